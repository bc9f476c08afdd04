package telemetry

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub/internal/kinesisiface"
)

// Kinesis counts the calls made through Client in Requests, each under its operation's name.
// A SubscribeToShard call is measured up to its initial response: the subscription's events
// are not requests. It is safe for concurrent use when Client is.
type Kinesis struct {
	Client   kinesisiface.Kinesis
	Requests *Requests
}

var _ kinesisiface.Kinesis = Kinesis{}

func (c Kinesis) ListShards(ctx context.Context, in *kinesis.ListShardsInput, opts ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	start := time.Now()
	out, err := c.Client.ListShards(ctx, in, opts...)
	c.Requests.Record(ctx, "ListShards", start, err)
	return out, err
}

func (c Kinesis) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, opts ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	start := time.Now()
	out, err := c.Client.GetShardIterator(ctx, in, opts...)
	c.Requests.Record(ctx, "GetShardIterator", start, err)
	return out, err
}

func (c Kinesis) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	start := time.Now()
	out, err := c.Client.GetRecords(ctx, in, opts...)
	c.Requests.Record(ctx, "GetRecords", start, err)
	return out, err
}

func (c Kinesis) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, opts ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	start := time.Now()
	out, err := c.Client.DescribeStreamSummary(ctx, in, opts...)
	c.Requests.Record(ctx, "DescribeStreamSummary", start, err)
	return out, err
}

func (c Kinesis) CreateStream(ctx context.Context, in *kinesis.CreateStreamInput, opts ...func(*kinesis.Options)) (*kinesis.CreateStreamOutput, error) {
	start := time.Now()
	out, err := c.Client.CreateStream(ctx, in, opts...)
	c.Requests.Record(ctx, "CreateStream", start, err)
	return out, err
}

func (c Kinesis) PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	start := time.Now()
	out, err := c.Client.PutRecords(ctx, in, opts...)
	c.Requests.Record(ctx, "PutRecords", start, err)
	return out, err
}

func (c Kinesis) PutRecord(ctx context.Context, in *kinesis.PutRecordInput, opts ...func(*kinesis.Options)) (*kinesis.PutRecordOutput, error) {
	start := time.Now()
	out, err := c.Client.PutRecord(ctx, in, opts...)
	c.Requests.Record(ctx, "PutRecord", start, err)
	return out, err
}

func (c Kinesis) DescribeStreamConsumer(ctx context.Context, in *kinesis.DescribeStreamConsumerInput, opts ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error) {
	start := time.Now()
	out, err := c.Client.DescribeStreamConsumer(ctx, in, opts...)
	c.Requests.Record(ctx, "DescribeStreamConsumer", start, err)
	return out, err
}

func (c Kinesis) RegisterStreamConsumer(ctx context.Context, in *kinesis.RegisterStreamConsumerInput, opts ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error) {
	start := time.Now()
	out, err := c.Client.RegisterStreamConsumer(ctx, in, opts...)
	c.Requests.Record(ctx, "RegisterStreamConsumer", start, err)
	return out, err
}

func (c Kinesis) SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, opts ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error) {
	start := time.Now()
	out, err := c.Client.SubscribeToShard(ctx, in, opts...)
	c.Requests.Record(ctx, "SubscribeToShard", start, err)
	return out, err
}
