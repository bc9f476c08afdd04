package kinesub

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
)

// The fake stream has no enhanced fan-out: fan-out is tested against kinesistest.

var errNoFanOut = errors.New("fake stream: no enhanced fan-out")

func (f *fakeStream) DescribeStreamConsumer(context.Context, *kinesis.DescribeStreamConsumerInput, ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error) {
	return nil, errNoFanOut
}

func (f *fakeStream) RegisterStreamConsumer(context.Context, *kinesis.RegisterStreamConsumerInput, ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error) {
	return nil, errNoFanOut
}

func (f *fakeStream) SubscribeToShard(context.Context, *kinesis.SubscribeToShardInput, ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error) {
	return nil, errNoFanOut
}

func (f *pageKinesis) DescribeStreamConsumer(context.Context, *kinesis.DescribeStreamConsumerInput, ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error) {
	return nil, errNoFanOut
}

func (f *pageKinesis) RegisterStreamConsumer(context.Context, *kinesis.RegisterStreamConsumerInput, ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error) {
	return nil, errNoFanOut
}

func (f *pageKinesis) SubscribeToShard(context.Context, *kinesis.SubscribeToShardInput, ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error) {
	return nil, errNoFanOut
}
