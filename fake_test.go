package kinesub

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/kinesisiface"
	"github.com/gostream/kinesub/lease"
)

// fakeStream is an in-memory stream behind the kinesisiface.Kinesis interface, for unit tests
// that need to control timing (slow reads, hanging or failing iterator requests) in ways the
// emulator cannot. Sequence numbers are the record's index in its shard plus one, in decimal;
// an iterator is "<shard>/<index of the next record>".
type fakeStream struct {
	mu     sync.Mutex
	stream string
	shards []*fakeShard

	// beforeGetRecords, when set, runs at the start of every GetRecords call; an error it
	// returns is the call's result. It may block (until ctx ends) to keep a batch in flight.
	beforeGetRecords func(ctx context.Context, shard string) error
	// beforeGetIterator is the same for GetShardIterator.
	beforeGetIterator func(ctx context.Context, in *kinesis.GetShardIteratorInput) error
	// beforeListShards is the same for ListShards.
	beforeListShards func(ctx context.Context) error
	// perRecord, when set, is how long GetRecords takes for each record it returns, as a large
	// response takes longer to arrive.
	perRecord time.Duration
}

type fakeShard struct {
	id       string
	parent   string
	adjacent string // the second parent of a merge
	closed   bool
	trimmed  bool // past the retention period: no longer listed nor readable
	records  []types.Record
}

var _ kinesisiface.Kinesis = (*fakeStream)(nil)

// newFake returns a stream with n open shards named like the service's: shardId-000000000000….
func newFakeStream(stream string, n int) *fakeStream {
	f := &fakeStream{stream: stream}
	for i := range n {
		f.shards = append(f.shards, &fakeShard{id: fmt.Sprintf("shardId-%012d", i)})
	}
	return f
}

// subscribeFake subscribes to f, closing the subscription when the test ends.
func subscribeFake(t *testing.T, f *fakeStream, opts ...Option) *Subscriber {
	t.Helper()
	sub, err := subscribe(context.Background(), f, f.stream, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close(context.Background()) })
	return sub
}

// fakeOpts are short intervals for subscriptions to a fake stream, with leases in a memory
// store of their own unless extra names another.
func fakeOpts(extra ...Option) []Option {
	return append([]Option{
		WithLeaseStore(lease.NewMemory()),
		WithPollInterval(2 * time.Millisecond),
		WithShardSyncInterval(20 * time.Millisecond),
		WithLeaseTTL(600 * time.Millisecond),
		WithCheckpointInterval(20 * time.Millisecond),
		WithRequestTimeout(time.Second),
	}, extra...)
}

func (f *fakeStream) setHooks(getRecords func(context.Context, string) error, getIterator func(context.Context, *kinesis.GetShardIteratorInput) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.beforeGetRecords, f.beforeGetIterator = getRecords, getIterator
}

// add appends records with the given payloads to shard i, arriving at ts, and returns their
// sequence numbers.
func (f *fakeStream) add(i int, ts time.Time, payloads ...string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	sh := f.shards[i]
	seqs := make([]string, len(payloads))
	for j, p := range payloads {
		seq := strconv.Itoa(len(sh.records) + 1)
		sh.records = append(sh.records, types.Record{
			Data: []byte(p), PartitionKey: aws.String("k"), SequenceNumber: aws.String(seq),
			ApproximateArrivalTimestamp: aws.Time(ts),
		})
		seqs[j] = seq
	}
	return seqs
}

// split closes shard i and adds one child of it, returned by index.
func (f *fakeStream) split(i int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shards[i].closed = true
	f.shards = append(f.shards, &fakeShard{id: fmt.Sprintf("shardId-%012d", len(f.shards)), parent: f.shards[i].id})
	return len(f.shards) - 1
}

// merge closes shards i and j and adds their child, returned by index.
func (f *fakeStream) merge(i, j int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shards[i].closed, f.shards[j].closed = true, true
	f.shards = append(f.shards, &fakeShard{id: fmt.Sprintf("shardId-%012d", len(f.shards)), parent: f.shards[i].id, adjacent: f.shards[j].id})
	return len(f.shards) - 1
}

// trim drops closed shard i as the service does once the retention period has passed.
func (f *fakeStream) trim(i int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shards[i].trimmed = true
}

func (f *fakeStream) shard(id string) *fakeShard {
	for _, sh := range f.shards {
		if sh.id == id && !sh.trimmed {
			return sh
		}
	}
	return nil
}

func fakeNotFound(what string) error {
	return &types.ResourceNotFoundException{Message: aws.String(what + " not found")}
}

func fakeInvalid(why string) error {
	return &types.InvalidArgumentException{Message: aws.String(why)}
}

func (f *fakeStream) ListShards(ctx context.Context, in *kinesis.ListShardsInput, _ ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	f.mu.Lock()
	hook := f.beforeListShards
	f.mu.Unlock()
	if hook != nil {
		if err := hook(ctx); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if aws.ToString(in.StreamName) != f.stream {
		return nil, fakeNotFound("stream")
	}
	out := &kinesis.ListShardsOutput{}
	for _, sh := range f.shards {
		if sh.trimmed {
			continue
		}
		s := types.Shard{
			ShardId: aws.String(sh.id),
			// The whole hash-key space: the fake places no record by its hash key, and a reader
			// drops the user records of an aggregate outside its shard's range.
			HashKeyRange:        &types.HashKeyRange{StartingHashKey: aws.String("0"), EndingHashKey: aws.String("340282366920938463463374607431768211455")},
			SequenceNumberRange: &types.SequenceNumberRange{StartingSequenceNumber: aws.String("1")},
		}
		if sh.parent != "" {
			s.ParentShardId = aws.String(sh.parent)
		}
		if sh.adjacent != "" {
			s.AdjacentParentShardId = aws.String(sh.adjacent)
		}
		if sh.closed {
			s.SequenceNumberRange.EndingSequenceNumber = aws.String(strconv.Itoa(len(sh.records) + 1))
		}
		out.Shards = append(out.Shards, s)
	}
	return out, nil
}

func (f *fakeStream) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, _ ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	f.mu.Lock()
	hook := f.beforeGetIterator
	f.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, in); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sh := f.shard(aws.ToString(in.ShardId))
	if aws.ToString(in.StreamName) != f.stream || sh == nil {
		return nil, fakeNotFound("shard")
	}
	number := func() (int, error) {
		n, err := strconv.Atoi(aws.ToString(in.StartingSequenceNumber))
		if err != nil || n < 1 || n > len(sh.records) {
			return 0, fakeInvalid("StartingSequenceNumber " + aws.ToString(in.StartingSequenceNumber) + " used in GetShardIterator on shard " + sh.id + " is invalid")
		}
		return n, nil
	}
	var next int
	switch in.ShardIteratorType {
	case types.ShardIteratorTypeTrimHorizon:
		next = 0
	case types.ShardIteratorTypeLatest:
		next = len(sh.records)
	case types.ShardIteratorTypeAtSequenceNumber:
		n, err := number()
		if err != nil {
			return nil, err
		}
		next = n - 1
	case types.ShardIteratorTypeAfterSequenceNumber:
		n, err := number()
		if err != nil {
			return nil, err
		}
		next = n
	case types.ShardIteratorTypeAtTimestamp:
		t := aws.ToTime(in.Timestamp)
		next = len(sh.records)
		for i, r := range sh.records {
			if !r.ApproximateArrivalTimestamp.Before(t) {
				next = i
				break
			}
		}
	default:
		return nil, fakeInvalid("iterator type " + string(in.ShardIteratorType))
	}
	return &kinesis.GetShardIteratorOutput{ShardIterator: aws.String(sh.id + "/" + strconv.Itoa(next))}, nil
}

func (f *fakeStream) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	id, pos, ok := strings.Cut(aws.ToString(in.ShardIterator), "/")
	next, err := strconv.Atoi(pos)
	if !ok || err != nil {
		return nil, fakeInvalid("bad iterator")
	}
	f.mu.Lock()
	hook := f.beforeGetRecords
	f.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, id); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sh := f.shard(id)
	if sh == nil {
		return nil, fakeNotFound("shard")
	}
	end := min(len(sh.records), next+int(aws.ToInt32(in.Limit)))
	if d := f.perRecord * time.Duration(end-next); d > 0 {
		f.mu.Unlock()
		select {
		case <-time.After(d):
		case <-ctx.Done():
			f.mu.Lock()
			return nil, ctx.Err()
		}
		f.mu.Lock()
	}
	out := &kinesis.GetRecordsOutput{
		Records:            append([]types.Record(nil), sh.records[next:end]...),
		MillisBehindLatest: aws.Int64(0),
	}
	if !sh.closed || end < len(sh.records) {
		out.NextShardIterator = aws.String(id + "/" + strconv.Itoa(end))
	}
	return out, nil
}

func (f *fakeStream) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, _ ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	if aws.ToString(in.StreamName) != f.stream {
		return nil, fakeNotFound("stream")
	}
	return &kinesis.DescribeStreamSummaryOutput{StreamDescriptionSummary: &types.StreamDescriptionSummary{
		StreamName: in.StreamName, StreamStatus: types.StreamStatusActive,
	}}, nil
}

func (f *fakeStream) CreateStream(context.Context, *kinesis.CreateStreamInput, ...func(*kinesis.Options)) (*kinesis.CreateStreamOutput, error) {
	return nil, &types.ResourceInUseException{Message: aws.String("the fake holds one stream")}
}

func (f *fakeStream) PutRecords(context.Context, *kinesis.PutRecordsInput, ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	return nil, fmt.Errorf("fake: PutRecords not implemented")
}

func (f *fakeStream) PutRecord(context.Context, *kinesis.PutRecordInput, ...func(*kinesis.Options)) (*kinesis.PutRecordOutput, error) {
	return nil, fmt.Errorf("fake: PutRecord not implemented")
}
