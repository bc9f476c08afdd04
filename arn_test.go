package kinesub

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/kinesistest"
	"github.com/gostream/kinesub/lease"
)

func TestParseStream(t *testing.T) {
	for _, tc := range []struct {
		in, name, arn string
	}{
		{"orders", "orders", ""},
		{"a.b_c-1", "a.b_c-1", ""},
		{"arn:aws:kinesis:eu-west-1:123456789012:stream/orders", "orders", "arn:aws:kinesis:eu-west-1:123456789012:stream/orders"},
		{"arn:aws-cn:kinesis:cn-north-1:123456789012:stream/o.r-d_1", "o.r-d_1", "arn:aws-cn:kinesis:cn-north-1:123456789012:stream/o.r-d_1"},
		{"arn:aws-us-gov:kinesis:us-gov-west-1:000000000000:stream/x", "x", "arn:aws-us-gov:kinesis:us-gov-west-1:000000000000:stream/x"},
		{"arn:aws-iso:kinesis:us-iso-east-1:123456789012:stream/x", "x", "arn:aws-iso:kinesis:us-iso-east-1:123456789012:stream/x"},
		{"arn:aws-iso-b:kinesis:us-isob-east-1:123456789012:stream/x", "x", "arn:aws-iso-b:kinesis:us-isob-east-1:123456789012:stream/x"},
		{"arn:aws-iso-e:kinesis:eu-isoe-west-1:123456789012:stream/x", "x", "arn:aws-iso-e:kinesis:eu-isoe-west-1:123456789012:stream/x"},
		{"arn:aws-iso-f:kinesis:us-isof-south-1:123456789012:stream/x", "x", "arn:aws-iso-f:kinesis:us-isof-south-1:123456789012:stream/x"},
		{"arn:aws-eusc:kinesis:eusc-de-east-1:123456789012:stream/x", "x", "arn:aws-eusc:kinesis:eusc-de-east-1:123456789012:stream/x"},
	} {
		ref, err := parseStream("Subscribe", tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.name, ref.name, tc.in)
		require.Equal(t, tc.arn, ref.arn, tc.in)
	}
	for _, bad := range []string{
		"", "has space", "slash/inside", strings.Repeat("s", 129),
		"arn:aws:kinesis:eu-west-1:123456789012:stream/",                    // no name
		"arn:aws:kinesis:eu-west-1:123456789012:stream/has space",           // bad name
		"arn:aws:kinesis:eu-west-1:123456789012:stream/a/b",                 // bad name
		"arn:aws:kinesis:eu-west-1:12345678901:stream/orders",               // 11-digit account
		"arn:aws:kinesis:eu-west-1:12345678901x:stream/orders",              // account not digits
		"arn:aws:kinesis::123456789012:stream/orders",                       // no region
		"arn:aws:sqs:eu-west-1:123456789012:stream/orders",                  // another service
		"arn:aws:kinesis:eu-west-1:123456789012:deliverystream/orders",      // not a stream
		"arn:aws:kinesis:eu-west-1:123456789012:stream/orders/consumer/c:1", // a consumer
		"arn:other:kinesis:eu-west-1:123456789012:stream/orders",            // no such partition
		"arn:awsXYZ:kinesis:eu-west-1:123456789012:stream/orders",           // no such partition
		"arn:aws-cn-x:kinesis:cn-north-1:123456789012:stream/orders",        // no such partition
		"arn::kinesis:eu-west-1:123456789012:stream/orders",                 // no partition
		"arn:aws:kinesis:eu-west-1:123456789012",                            // too few parts
		"arn:aws:kinesis:eu-west-1:123456789012:stream/" + strings.Repeat("s", 129),
	} {
		_, err := parseStream("Subscribe", bad)
		require.ErrorIs(t, err, ErrInvalidOption, "%q", bad)
		require.Contains(t, err.Error(), "Subscribe stream(", "%q", bad)
	}
	// A partition that is not AWS's is named, with the ones there are.
	_, err := parseStream("Subscribe", "arn:awsXYZ:kinesis:eu-west-1:123456789012:stream/orders")
	require.ErrorContains(t, err, `no AWS partition "awsXYZ"`)
	require.ErrorContains(t, err, "aws, aws-cn, aws-us-gov, aws-iso, aws-iso-b, aws-iso-e, aws-iso-f, aws-eusc")
}

// TestStreamARNNotFound: a well-formed ARN of a stream that does not exist is reported with the
// ARN and what to check (the client's region against the ARN's, the account), never with the
// advice to pass WithCreateIfMissing, which creates streams by name in the client's own
// account and region: it creates nothing for an ARN of another region, and says what it
// created for one of another account.
func TestStreamARNNotFound(t *testing.T) {
	srv := kinesistest.NewServer(kinesistest.WithRegion("us-east-1"))
	t.Cleanup(srv.Close)
	c := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, srv.CreateStream(ctx, "orders", 1))
	streams := func() []string {
		out, err := c.ListStreams(ctx, &kinesis.ListStreamsInput{})
		require.NoError(t, err)
		return out.StreamNames
	}
	subscribeARN := func(arn string, opts ...Option) error {
		sub, err := Subscribe(ctx, c, arn, append(opts, WithLeaseStore(lease.NewMemory()))...)
		if err == nil {
			_ = sub.Close(ctx)
		}
		return err
	}
	const creates = "WithCreateIfMissing creates streams by name in the client's own account and region, not this ARN"

	otherRegion := "arn:aws:kinesis:eu-west-1:000000000000:stream/orders"
	for _, opts := range [][]Option{nil, {WithCreateIfMissing(1)}} {
		err := subscribeARN(otherRegion, opts...)
		require.ErrorIs(t, err, ErrStreamNotFound)
		require.ErrorContains(t, err, otherRegion)
		require.ErrorContains(t, err, "the client is configured for region us-east-1")
		require.ErrorContains(t, err, "the ARN names region eu-west-1")
		require.ErrorContains(t, err, creates)
		require.NotContains(t, err.Error(), "pass WithCreateIfMissing")
	}
	err := subscribeARN("arn:aws:kinesis:eu-west-1:000000000000:stream/fresh", WithCreateIfMissing(1))
	require.ErrorIs(t, err, ErrStreamNotFound)
	require.Equal(t, []string{"orders"}, streams(), "a stream created for an ARN of another region")

	otherAccount := "arn:aws:kinesis:us-east-1:111111111111:stream/orders"
	err = subscribeARN(otherAccount)
	require.ErrorIs(t, err, ErrStreamNotFound)
	require.ErrorContains(t, err, otherAccount)
	require.ErrorContains(t, err, "account (111111111111)")
	require.ErrorContains(t, err, creates)
	err = subscribeARN("arn:aws:kinesis:us-east-1:111111111111:stream/fresh", WithCreateIfMissing(1))
	require.ErrorIs(t, err, ErrStreamNotFound)
	require.ErrorContains(t, err, "WithCreateIfMissing created a stream fresh in the client's own account and region, which is not this ARN")

	// By name, the advice stands.
	err = subscribeARN("missing")
	require.ErrorIs(t, err, ErrStreamNotFound)
	require.ErrorContains(t, err, "pass WithCreateIfMissing")
}

// arnChecker stands in front of a fake stream and records every call that does not name the
// stream by the expected ARN (and, where the call takes one, its name).
type arnChecker struct {
	*fakeStream
	arn   string
	mu    sync.Mutex
	calls map[string]int
	bad   []string
	puts  []string // partition keys written
}

func (a *arnChecker) check(op string, name, arn *string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls[op]++
	if aws.ToString(arn) != a.arn || (name != nil && aws.ToString(name) != a.fakeStream.stream) {
		a.bad = append(a.bad, fmt.Sprintf("%s(StreamName %q, StreamARN %q)", op, aws.ToString(name), aws.ToString(arn)))
	}
}

func (a *arnChecker) ListShards(ctx context.Context, in *kinesis.ListShardsInput, o ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	a.check("ListShards", in.StreamName, in.StreamARN)
	return a.fakeStream.ListShards(ctx, in, o...)
}

func (a *arnChecker) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, o ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	a.check("GetShardIterator", in.StreamName, in.StreamARN)
	return a.fakeStream.GetShardIterator(ctx, in, o...)
}

func (a *arnChecker) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	a.check("GetRecords", nil, in.StreamARN)
	return a.fakeStream.GetRecords(ctx, in, o...)
}

func (a *arnChecker) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, o ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	a.check("DescribeStreamSummary", in.StreamName, in.StreamARN)
	return a.fakeStream.DescribeStreamSummary(ctx, in, o...)
}

func (a *arnChecker) PutRecord(_ context.Context, in *kinesis.PutRecordInput, _ ...func(*kinesis.Options)) (*kinesis.PutRecordOutput, error) {
	a.check("PutRecord", in.StreamName, in.StreamARN)
	a.mu.Lock()
	a.puts = append(a.puts, aws.ToString(in.PartitionKey))
	a.mu.Unlock()
	return &kinesis.PutRecordOutput{SequenceNumber: aws.String("1"), ShardId: aws.String("shardId-000000000000")}, nil
}

func (a *arnChecker) PutRecords(_ context.Context, in *kinesis.PutRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	a.check("PutRecords", in.StreamName, in.StreamARN)
	out := &kinesis.PutRecordsOutput{}
	a.mu.Lock()
	for _, r := range in.Records {
		a.puts = append(a.puts, aws.ToString(r.PartitionKey))
		out.Records = append(out.Records, types.PutRecordsResultEntry{SequenceNumber: aws.String("1"), ShardId: aws.String("shardId-000000000000")})
	}
	a.mu.Unlock()
	return out, nil
}

// TestStreamARNOnEveryCall: a subscriber and a publisher given a stream ARN pass it as StreamARN
// on every call, and the subscriber keys its leases by the stream's name.
func TestStreamARNOnEveryCall(t *testing.T) {
	const arn = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders"
	f := newFakeStream("orders", 2)
	f.add(0, time.Time{}, "a", "b")
	f.add(1, time.Time{}, "c")
	c := &arnChecker{fakeStream: f, arn: arn, calls: map[string]int{}}
	store := lease.NewMemory()
	sub, err := subscribe(context.Background(), c, arn, fakeOpts(WithLeaseStore(store), WithStartAt(Horizon()))...)
	require.NoError(t, err)
	require.Equal(t, "orders", sub.StreamName())
	got := recv(t, sub, 3, true)
	require.ElementsMatch(t, []string{"a", "b", "c"}, payloads(got))
	// A seek opens the shard by ARN too.
	require.NoError(t, sub.Seeker().Seek(context.Background(), got[0].Position()))
	recv(t, sub, 1, true)
	require.NoError(t, sub.Commit(context.Background()))
	require.NoError(t, sub.Close(context.Background()))

	leases, err := store.List(context.Background())
	require.NoError(t, err)
	for _, l := range leases {
		require.True(t, strings.HasPrefix(l.Key, "orders/"), "lease key %q is not keyed by the stream's name", l.Key)
	}
	require.NotEmpty(t, readLease(t, store, "orders", got[0].ShardID()).Checkpoint.Sequence)

	p, err := newPublisher(c, arn)
	require.NoError(t, err)
	_, err = p.Publish(context.Background(), "k1", []byte("x"), nil)
	require.NoError(t, err)
	require.NoError(t, p.PublishBatch(context.Background(), []Record{{PartitionKey: "k2", Data: []byte("y")}}))

	c.mu.Lock()
	defer c.mu.Unlock()
	require.Empty(t, c.bad, "calls without the stream's ARN")
	for _, op := range []string{"DescribeStreamSummary", "ListShards", "GetShardIterator", "GetRecords", "PutRecord", "PutRecords"} {
		require.Positive(t, c.calls[op], "no %s call seen", op)
	}
	require.Equal(t, []string{"k1", "k2"}, c.puts)
}

// TestStreamARNSharesLeases: instances of one stream configured by name and by ARN share one set
// of leases, so the second resumes after what the first acknowledged. kinesalite does not take
// StreamARN without StreamName; kinesub sends both, which the service accepts, and which lets
// this run against the emulator.
func TestStreamARNSharesLeases(t *testing.T) {
	s := newStream(t, 1)
	out, err := s.c.DescribeStreamSummary(context.Background(), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(s.name)})
	require.NoError(t, err)
	arn := aws.ToString(out.StreamDescriptionSummary.StreamARN)
	require.True(t, strings.HasPrefix(arn, "arn:aws:kinesis:"), arn)

	pub, err := NewPublisher(s.c, arn)
	require.NoError(t, err)
	for i := range 6 {
		_, err := pub.Publish(context.Background(), "k", []byte(fmt.Sprint(i)), nil)
		require.NoError(t, err)
	}
	store := lease.NewDynamoDB(testenv.DynamoDB(t), testenv.Name(t))
	require.NoError(t, store.EnsureTable(context.Background()))
	byName, err := Subscribe(context.Background(), s.c, s.name, testOpts(store, WithInitialPosition(Horizon()))...)
	require.NoError(t, err)
	require.Equal(t, []string{"0", "1", "2"}, payloads(recv(t, byName, 3, true)))
	require.NoError(t, byName.Close(context.Background()))

	byARN, err := Subscribe(context.Background(), s.c, arn, testOpts(store, WithInitialPosition(Horizon()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = byARN.Close(context.Background()) })
	require.Equal(t, []string{"3", "4", "5"}, payloads(recv(t, byARN, 3, true)))
	require.NoError(t, byARN.Commit(context.Background()))
	leases, err := store.List(context.Background())
	require.NoError(t, err)
	for _, l := range leases {
		require.True(t, strings.HasPrefix(l.Key, s.name+"/"), "lease key %q", l.Key)
	}
	none(t, byARN)
}

// pagedShards lists shards one a page, so that every listing takes continuation calls.
type pagedShards struct{ *kinesis.Client }

func (p pagedShards) ListShards(ctx context.Context, in *kinesis.ListShardsInput, o ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	cp := *in
	cp.MaxResults = aws.Int32(1)
	return p.Client.ListShards(ctx, &cp, o...)
}

// TestStreamARNListShardsContinuation: a subscriber given a stream ARN lists a stream whose
// shards take several ListShards pages. The continuation calls carry the NextToken alone (the
// service refuses it beside a stream name or ARN), and every shard is read.
func TestStreamARNListShardsContinuation(t *testing.T) {
	s, _ := newFanOutStream(t, 3)
	for i := range 30 {
		s.put(fmt.Sprintf("key-%d", i), []byte(fmt.Sprintf("r%d", i)))
	}
	arn := streamARN(t, s)
	sub, err := subscribe(context.Background(), pagedShards{s.c}, arn,
		testOpts(lease.NewMemory(), WithStartAt(Horizon()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close(context.Background()) })
	got := recv(t, sub, 30, true)
	shards := map[string]bool{}
	for _, m := range got {
		shards[m.ShardID()] = true
	}
	require.Len(t, shards, 3, "records of every shard read")
	select {
	case err := <-sub.Errors():
		t.Fatalf("reported: %v", err)
	default:
	}
}
