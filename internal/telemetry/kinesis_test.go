package telemetry

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"
)

// fakeKinesis answers every call with an empty output and err, noting the operation.
type fakeKinesis struct {
	calls []string
	err   error
}

func (f *fakeKinesis) ListShards(context.Context, *kinesis.ListShardsInput, ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	f.calls = append(f.calls, "ListShards")
	return &kinesis.ListShardsOutput{}, f.err
}

func (f *fakeKinesis) GetShardIterator(context.Context, *kinesis.GetShardIteratorInput, ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	f.calls = append(f.calls, "GetShardIterator")
	return &kinesis.GetShardIteratorOutput{}, f.err
}

func (f *fakeKinesis) GetRecords(context.Context, *kinesis.GetRecordsInput, ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	f.calls = append(f.calls, "GetRecords")
	return &kinesis.GetRecordsOutput{}, f.err
}

func (f *fakeKinesis) DescribeStreamSummary(context.Context, *kinesis.DescribeStreamSummaryInput, ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	f.calls = append(f.calls, "DescribeStreamSummary")
	return &kinesis.DescribeStreamSummaryOutput{}, f.err
}

func (f *fakeKinesis) CreateStream(context.Context, *kinesis.CreateStreamInput, ...func(*kinesis.Options)) (*kinesis.CreateStreamOutput, error) {
	f.calls = append(f.calls, "CreateStream")
	return &kinesis.CreateStreamOutput{}, f.err
}

func (f *fakeKinesis) PutRecords(context.Context, *kinesis.PutRecordsInput, ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	f.calls = append(f.calls, "PutRecords")
	return &kinesis.PutRecordsOutput{}, f.err
}

func (f *fakeKinesis) PutRecord(context.Context, *kinesis.PutRecordInput, ...func(*kinesis.Options)) (*kinesis.PutRecordOutput, error) {
	f.calls = append(f.calls, "PutRecord")
	return &kinesis.PutRecordOutput{}, f.err
}

func (f *fakeKinesis) DescribeStreamConsumer(context.Context, *kinesis.DescribeStreamConsumerInput, ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error) {
	f.calls = append(f.calls, "DescribeStreamConsumer")
	return &kinesis.DescribeStreamConsumerOutput{}, f.err
}

func (f *fakeKinesis) RegisterStreamConsumer(context.Context, *kinesis.RegisterStreamConsumerInput, ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error) {
	f.calls = append(f.calls, "RegisterStreamConsumer")
	return &kinesis.RegisterStreamConsumerOutput{}, f.err
}

func (f *fakeKinesis) SubscribeToShard(context.Context, *kinesis.SubscribeToShardInput, ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error) {
	f.calls = append(f.calls, "SubscribeToShard")
	return &kinesis.SubscribeToShardOutput{}, f.err
}

// TestKinesis: every call through the wrapper reaches the client and is counted under its
// operation's name, with the client's error classified.
func TestKinesis(t *testing.T) {
	ctx := context.Background()
	calls := []struct {
		op   string
		call func(k Kinesis) (any, error)
	}{
		{"ListShards", func(k Kinesis) (any, error) { return k.ListShards(ctx, &kinesis.ListShardsInput{}) }},
		{"GetShardIterator", func(k Kinesis) (any, error) { return k.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{}) }},
		{"GetRecords", func(k Kinesis) (any, error) { return k.GetRecords(ctx, &kinesis.GetRecordsInput{}) }},
		{"DescribeStreamSummary", func(k Kinesis) (any, error) {
			return k.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{})
		}},
		{"CreateStream", func(k Kinesis) (any, error) { return k.CreateStream(ctx, &kinesis.CreateStreamInput{}) }},
		{"PutRecords", func(k Kinesis) (any, error) { return k.PutRecords(ctx, &kinesis.PutRecordsInput{}) }},
		{"PutRecord", func(k Kinesis) (any, error) { return k.PutRecord(ctx, &kinesis.PutRecordInput{}) }},
		{"DescribeStreamConsumer", func(k Kinesis) (any, error) {
			return k.DescribeStreamConsumer(ctx, &kinesis.DescribeStreamConsumerInput{})
		}},
		{"RegisterStreamConsumer", func(k Kinesis) (any, error) {
			return k.RegisterStreamConsumer(ctx, &kinesis.RegisterStreamConsumerInput{})
		}},
		{"SubscribeToShard", func(k Kinesis) (any, error) { return k.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{}) }},
	}
	for _, tc := range []struct {
		name    string
		err     error
		outcome string
	}{
		{"ok", nil, OutcomeOK},
		{"throttled", &types.LimitExceededException{}, OutcomeThrottled},
		{"error", &types.ResourceNotFoundException{}, OutcomeError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mt := newMeters(t)
			fake := &fakeKinesis{err: tc.err}
			k := Kinesis{Client: fake, Requests: mt.req}
			want := map[string]float64{}
			var ops []string
			for _, c := range calls {
				out, err := c.call(k)
				require.NotNil(t, out, c.op)
				require.Equal(t, tc.err, err, c.op)
				want[c.op+"/"+tc.outcome] = 1
				ops = append(ops, c.op)
			}
			require.Equal(t, ops, fake.calls)
			require.Equal(t, want, mt.counts())
		})
	}
}
