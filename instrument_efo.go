package kinesub

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
)

// The enhanced fan-out calls, counted like the others (instrument.go). A SubscribeToShard call
// is measured up to its initial response: the subscription's events are not requests.

func (c meteredKinesis) DescribeStreamConsumer(ctx context.Context, in *kinesis.DescribeStreamConsumerInput, opts ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error) {
	start := time.Now()
	out, err := c.k.DescribeStreamConsumer(ctx, in, opts...)
	c.r.record(ctx, "DescribeStreamConsumer", start, err)
	return out, err
}

func (c meteredKinesis) RegisterStreamConsumer(ctx context.Context, in *kinesis.RegisterStreamConsumerInput, opts ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error) {
	start := time.Now()
	out, err := c.k.RegisterStreamConsumer(ctx, in, opts...)
	c.r.record(ctx, "RegisterStreamConsumer", start, err)
	return out, err
}

func (c meteredKinesis) SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, opts ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error) {
	start := time.Now()
	out, err := c.k.SubscribeToShard(ctx, in, opts...)
	c.r.record(ctx, "SubscribeToShard", start, err)
	return out, err
}
