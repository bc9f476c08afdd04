// Package conformance holds one suite of subtests that every Kinesis server the tests use must
// pass: kinesalite (the Node.js emulator) and kinesistest. Run holds both to the same behaviour
// where kinesalite implements it; what kinesalite lacks runs against kinesistest only, each
// such subtest saying why.
package conformance

import (
	"context"
	"errors"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"

	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/kinesistest"
)

// Backend is a Kinesis server under test.
type Backend struct {
	// Client returns a client for the server, shared by the subtests every server passes.
	Client func(t *testing.T) *kinesis.Client
	// Server starts a kinesistest server with the given options, for the subtests of what
	// kinesalite lacks; nil for kinesalite, which skips none of the shared subtests and runs
	// none of those.
	Server func(t *testing.T, opts ...kinesistest.Option) *kinesistest.Server
}

// Run runs the suite against b.
func Run(t *testing.T, b Backend) {
	shared := []struct {
		name string
		fn   func(*testing.T, *kinesis.Client)
	}{
		{"CreateDescribe", testCreateDescribe},
		{"CreateExisting", testCreateExisting},
		{"MissingStream", testMissingStream},
		{"PutGetOrder", testPutGetOrder},
		{"PutRecordRouting", testPutRecordRouting},
		{"SequencePerShard", testSequencePerShard},
		{"IteratorTypes", testIteratorTypes},
		{"GetRecordsLimit", testGetRecordsLimit},
		{"InvalidIterator", testInvalidIterator},
		{"ForeignSequenceNumber", testForeignSequenceNumber},
		{"PutRecordsTooMany", testPutRecordsTooMany},
		{"PartitionKeyLength", testPartitionKeyLength},
		{"ExplicitHashKeyRange", testExplicitHashKeyRange},
		{"SplitShard", testSplitShard},
		{"MergeShards", testMergeShards},
		{"ClosedShardEnds", testClosedShardEnds},
		{"DeleteStream", testDeleteStream},
	}
	for _, tc := range shared {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, b.Client(t)) })
	}
	if b.Server == nil {
		return
	}
	// What kinesalite lacks, each with the reason it runs against kinesistest only.
	only := []struct {
		name string
		fn   func(*testing.T, Backend)
	}{
		{"ChildShards", testChildShards},                       // kinesalite returns no ChildShards
		{"UpdateShardCount", testUpdateShardCount},             // kinesalite has no UpdateShardCount
		{"MillisBehindLatest", testMillisBehindLatest},         // kinesalite always answers 0
		{"ExpiredIterator", testExpiredIterator},               // kinesalite's lifetime is a fixed 5 minutes
		{"ListShardsPages", testListShardsPages},               // kinesalite ignores MaxResults and crashes on NextToken alone
		{"ListShardsFilter", testListShardsFilter},             // kinesalite ignores ShardFilter
		{"ListStreamsPages", testListStreamsPages},             // kinesalite has no ListStreams NextToken
		{"ThrottleReads", testThrottleReads},                   // kinesalite never throttles
		{"ThrottleWrites", testThrottleWrites},                 // kinesalite never throttles
		{"Faults", testFaults},                                 // kinesalite has no fault injection
		{"Consumers", testConsumers},                           // kinesalite has no enhanced fan-out
		{"SubscribeToShard", testSubscribeToShard},             // kinesalite has no enhanced fan-out
		{"SubscribeTakeover", testSubscribeTakeover},           // kinesalite has no enhanced fan-out
		{"SubscribeRate", testSubscribeRate},                   // kinesalite has no enhanced fan-out
		{"SubscribeShardEnd", testSubscribeShardEnd},           // kinesalite has no enhanced fan-out
		{"SubscribeLifetime", testSubscribeLifetime},           // kinesalite has no enhanced fan-out
		{"SubscribeFaults", testSubscribeFaults},               // kinesalite has no enhanced fan-out; the faults are kinesistest's own
		{"StreamARNRequests", testStreamARNRequests},           // kinesalite needs a StreamName
		{"ExplicitHashKeyPattern", testExplicitHashKeyPattern}, // kinesalite's pattern is unanchored: it takes "01" and "-1" as numbers
	}
	for _, tc := range only {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, b) })
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// newStream creates a stream of n shards, waits until it is ACTIVE and returns its name.
func newStream(t *testing.T, c *kinesis.Client, n int32) string {
	t.Helper()
	name := testenv.Name(t)
	testenv.CreateStream(t, c, name, n)
	return name
}

func listShards(t *testing.T, c *kinesis.Client, stream string) []types.Shard {
	t.Helper()
	out, err := c.ListShards(ctx(t), &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatalf("ListShards: %v", err)
	}
	return out.Shards
}

func iter(t *testing.T, c *kinesis.Client, stream, shard string, typ types.ShardIteratorType, seq *string, ts *time.Time) *string {
	t.Helper()
	out, err := c.GetShardIterator(ctx(t), &kinesis.GetShardIteratorInput{
		StreamName: aws.String(stream), ShardId: aws.String(shard), ShardIteratorType: typ,
		StartingSequenceNumber: seq, Timestamp: ts,
	})
	if err != nil {
		t.Fatalf("GetShardIterator %s %s: %v", shard, typ, err)
	}
	return out.ShardIterator
}

// readAll reads a shard from it until a call returns no records (or the shard's end), and
// returns the records and the last answer.
func readAll(t *testing.T, c *kinesis.Client, it *string) ([]types.Record, *kinesis.GetRecordsOutput) {
	t.Helper()
	var recs []types.Record
	for {
		out, err := c.GetRecords(ctx(t), &kinesis.GetRecordsInput{ShardIterator: it})
		if err != nil {
			t.Fatalf("GetRecords: %v", err)
		}
		recs = append(recs, out.Records...)
		if len(out.Records) == 0 || out.NextShardIterator == nil {
			return recs, out
		}
		it = out.NextShardIterator
	}
}

func putRecords(t *testing.T, c *kinesis.Client, stream string, keys ...string) []types.PutRecordsResultEntry {
	t.Helper()
	var entries []types.PutRecordsRequestEntry
	for _, k := range keys {
		entries = append(entries, types.PutRecordsRequestEntry{Data: []byte("data-" + k), PartitionKey: aws.String(k)})
	}
	out, err := c.PutRecords(ctx(t), &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: entries})
	if err != nil {
		t.Fatalf("PutRecords: %v", err)
	}
	if n := aws.ToInt32(out.FailedRecordCount); n != 0 {
		t.Fatalf("PutRecords: %d records failed", n)
	}
	return out.Records
}

func datas(recs []types.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Data)
	}
	return out
}

func bigInt(t *testing.T, s *string) *big.Int {
	t.Helper()
	v, ok := new(big.Int).SetString(aws.ToString(s), 10)
	if !ok {
		t.Fatalf("%q is not a decimal number", aws.ToString(s))
	}
	return v
}

// wantCode fails unless err is an API error with the given code.
func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != code {
		t.Fatalf("error = %v, want %s", err, code)
	}
}

// noRetry makes one call of the SDK's, so a throttle or fault reaches the test.
func noRetry(o *kinesis.Options) { o.RetryMaxAttempts = 1 }

// clock is a test clock that moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
