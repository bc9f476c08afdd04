package kinesub

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/faultproxy"
	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// X-Amz-Target names of the operations the fault plans aim at.
const (
	targetGetRecords       = "Kinesis_20131202.GetRecords"
	targetGetShardIterator = "Kinesis_20131202.GetShardIterator"
	targetListShards       = "Kinesis_20131202.ListShards"
	targetUpdateItem       = "DynamoDB_20120810.UpdateItem"
	targetGetItem          = "DynamoDB_20120810.GetItem"
	targetScan             = "DynamoDB_20120810.Scan"
)

// newFaultProxy starts a fault-injecting proxy in front of the emulator named by endpointVar.
// Tests that check for goroutine leaks close it themselves first; Close is idempotent.
func newFaultProxy(t *testing.T, endpointVar string, plan faultproxy.Plan) *faultproxy.Proxy {
	t.Helper()
	if os.Getenv(endpointVar) == "" {
		testenv.Kinesis(t) // skips, or fails when the emulators are required
		testenv.DynamoDB(t)
	}
	p, err := faultproxy.New(os.Getenv(endpointVar), plan)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// kinesisThrough returns a Kinesis client that reaches the emulator through p, with the SDK's
// default retryer: the subscriber itself turns retries off where it retries on its own.
func kinesisThrough(t *testing.T, p *faultproxy.Proxy) *kinesis.Client {
	return kinesis.New(testenv.Kinesis(t).Options(), func(o *kinesis.Options) {
		o.BaseEndpoint = aws.String(p.URL())
	})
}

// dynamoThrough returns a DynamoDB client that reaches the emulator through p, with the SDK's
// default retryer, as a user's lease store would have.
func dynamoThrough(t *testing.T, p *faultproxy.Proxy) *dynamodb.Client {
	return dynamodb.New(testenv.DynamoDB(t).Options(), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(p.URL())
	})
}

// leaseTable creates a lease table straight on the emulator and returns a store on it that
// talks through client.
func leaseTable(t *testing.T, client *dynamodb.Client) *lease.DynamoDB {
	t.Helper()
	direct := testenv.DynamoDB(t)
	name := testenv.Name(t)
	require.NoError(t, lease.NewDynamoDB(direct, name).EnsureTable(context.Background()))
	t.Cleanup(func() {
		_, _ = direct.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	return lease.NewDynamoDB(client, name)
}

// collector gathers, on a goroutine of its own, what a channel carries until it is closed;
// done is closed then.
type collector[T any] struct {
	mu    sync.Mutex
	items []T
	done  chan struct{}
}

func collect[S, T any](ch <-chan S, each func(S) T) *collector[T] {
	c := &collector[T]{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for v := range ch {
			item := each(v)
			c.mu.Lock()
			c.items = append(c.items, item)
			c.mu.Unlock()
		}
	}()
	return c
}

// errorLog drains a subscriber's Errors until it is closed.
type errorLog struct{ *collector[error] }

func collectErrors(sub *Subscriber) errorLog {
	return errorLog{collect(sub.Errors(), func(err error) error { return err })}
}

// count returns how many collected errors satisfy match.
func (l errorLog) count(match func(error) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, err := range l.items {
		if match(err) {
			n++
		}
	}
	return n
}

// summary counts the collected errors by operation and cause, for the test log.
func (l errorLog) summary() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, err := range l.items {
		k := "other"
		var se *ShardError
		if errors.As(err, &se) {
			k = string(se.Op)
		}
		switch {
		case errors.Is(err, ErrLeaseLost):
			k += "/lease-lost"
		case isA[*types.ProvisionedThroughputExceededException](err),
			isA[*ddbtypes.ProvisionedThroughputExceededException](err):
			k += "/throttled"
		}
		out[k]++
	}
	return out
}

// faults sums a proxy's injected faults of every kind.
func faults(stats map[string]int) int {
	n := 0
	for _, k := range []faultproxy.Kind{faultproxy.Throttle, faultproxy.InternalFailure, faultproxy.ExpiredIterator,
		faultproxy.ConditionalCheckFailed, faultproxy.DropConnection, faultproxy.Latency} {
		n += stats[k.String()]
	}
	return n
}

func isA[T error](err error) bool {
	var target T
	return errors.As(err, &target)
}

// consume receives and acks messages until every key has reached its published count,
// checking per-key order, and returns how many messages arrived in all (duplicates included).
// Each message is acked as it is received, by the goroutine that received it.
func consume(t *testing.T, sub *Subscriber, oc *orderChecker, want map[string]int, d time.Duration) int {
	t.Helper()
	remaining := 0
	for k, n := range want {
		if oc.next[k] < n {
			remaining++
		}
	}
	deadline := time.After(d)
	got := 0
	for remaining > 0 {
		select {
		case m, ok := <-sub.Messages():
			if !ok {
				t.Fatalf("Messages closed with %d keys incomplete (Err: %v)", remaining, sub.Err())
			}
			got++
			k := m.PartitionKey()
			before := oc.next[k]
			oc.see(t, m)
			if oc.next[k] != before && oc.next[k] == want[k] {
				remaining--
			}
			if err := m.Ack(context.Background()); !errors.Is(err, ErrAckedLate) { // lost meanwhile: it comes again
				require.NoError(t, err)
			}
		case <-deadline:
			t.Fatalf("after %v, %d keys incomplete, %d messages received: %s", d, remaining, got, progress(oc, want))
		}
	}
	return got
}

// progress describes the first keys that are behind, for a timeout message.
func progress(oc *orderChecker, want map[string]int) string {
	var behind []string
	for k, n := range want {
		if oc.next[k] < n {
			behind = append(behind, fmt.Sprintf("%s:%d/%d", k, oc.next[k], n))
		}
	}
	sort.Strings(behind)
	return strings.Join(behind[:min(len(behind), 5)], " ")
}

// expected returns a copy of the stream's per-key published counts.
func (s *stream) expected() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.counts))
	for k, n := range s.counts {
		out[k] = n
	}
	return out
}

// TestFaultInjectionDeliversEverything consumes a 50,000-record, 4-shard stream through proxies
// that fault 10% of the Kinesis reads and of the lease table calls: every record is delivered
// and acked at least once, in order per key, and Close leaves no goroutine behind.
func TestFaultInjectionDeliversEverything(t *testing.T) {
	done := noLeaks(t)
	const records, keys = 50_000, 64
	s := newStream(t, 4)
	start := time.Now()
	s.publish(records, keys)
	t.Logf("published %d records in %v", records, time.Since(start))

	kp := newFaultProxy(t, testenv.KinesisEndpointVar, faultproxy.Plan{
		Seed: 1,
		Rate: 0.10,
		Ops:  []string{targetGetRecords, targetGetShardIterator, targetListShards},
		Faults: []faultproxy.Fault{
			{Kind: faultproxy.Throttle, Weight: 3},
			{Kind: faultproxy.InternalFailure, Weight: 2},
			{Kind: faultproxy.ExpiredIterator, Weight: 2},
			{Kind: faultproxy.DropConnection, Weight: 2},
			{Kind: faultproxy.Latency, Weight: 1},
		},
		Latency: 40 * time.Millisecond,
	})
	dp := newFaultProxy(t, testenv.DynamoDBEndpointVar, faultproxy.Plan{
		Seed: 2,
		Rate: 0.10,
		Ops:  []string{targetUpdateItem, targetGetItem, targetScan},
		Faults: []faultproxy.Fault{
			{Kind: faultproxy.Throttle, Weight: 3},
			{Kind: faultproxy.InternalFailure, Weight: 2},
			{Kind: faultproxy.ConditionalCheckFailed, Weight: 1},
			{Kind: faultproxy.DropConnection, Weight: 2},
			{Kind: faultproxy.Latency, Weight: 2},
		},
		Latency: 40 * time.Millisecond,
	})
	store := leaseTable(t, dynamoThrough(t, dp))

	// Subscribe itself is not under test here: let it reach the services undisturbed.
	kp.SetRate(0)
	dp.SetRate(0)
	sub, err := Subscribe(context.Background(), kinesisThrough(t, kp), s.name, testOpts(store,
		WithStartAt(Horizon()),
		WithOwner("faulty"),
		WithBatchSize(500),
		WithLeaseTTL(3*time.Second),
		WithCheckpointInterval(100*time.Millisecond),
		WithRequestTimeout(20*time.Second),
	)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close(context.Background()) })
	kp.SetRate(0.10)
	dp.SetRate(0.10)
	errs := collectErrors(sub)

	var oc orderChecker
	start = time.Now()
	got := consume(t, sub, &oc, s.expected(), 3*time.Minute)
	elapsed := time.Since(start)
	got += upTo(t, s, sub, &oc) // replays still on their way
	t.Logf("consumed %d records in %v: %d deliveries, %d duplicates", records, elapsed, got, got-records)

	// Close under the same faults: it must end, and take every goroutine with it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	closeStart := time.Now()
	closeErr := sub.Close(ctx)
	require.Less(t, time.Since(closeStart), 30*time.Second)
	<-errs.done
	t.Logf("Close: %v after %v", closeErr, time.Since(closeStart))
	t.Logf("kinesis faults: %v", kp.Stats())
	t.Logf("dynamodb faults: %v", dp.Stats())
	t.Logf("errors reported: %v", errs.summary())
	require.NoError(t, kp.Close())
	require.NoError(t, dp.Close())
	done()

	// The plans really did fault the calls the subscriber made. Which kinds were drawn depends
	// on how the readers' calls interleave, so only the totals are checked.
	require.GreaterOrEqual(t, faults(kp.Stats()), 10, "kinesis calls faulted")
	require.GreaterOrEqual(t, faults(dp.Stats()), 10, "dynamodb calls faulted")
}

// TestThrottledGetRecords throttles half of the GetRecords calls: both shards are still read to
// the last record, each throttle reaches Errors as a ShardError wrapping the SDK's
// ProvisionedThroughputExceededException, and every throttled request the proxy answered is one
// the subscriber saw: the SDK's retryer adds no calls of its own under the reader's backoff.
func TestThrottledGetRecords(t *testing.T) {
	const records = 1200
	s := newStream(t, 2)
	s.publish(records, 8)
	kp := newFaultProxy(t, testenv.KinesisEndpointVar, faultproxy.Plan{
		Seed:   3,
		Rate:   0.5,
		Ops:    []string{targetGetRecords},
		Faults: []faultproxy.Fault{{Kind: faultproxy.Throttle, Weight: 1}},
	})
	sub, err := Subscribe(context.Background(), kinesisThrough(t, kp), s.name,
		testOpts(lease.NewMemory(), WithStartAt(Horizon()), WithBatchSize(100))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close(context.Background()) })

	var throttles atomic.Int64
	var first atomic.Pointer[ShardError]
	errsDone := make(chan struct{})
	go func() {
		defer close(errsDone)
		for err := range sub.Errors() {
			var se *ShardError
			if errors.As(err, &se) && se.Op == "GetRecords" && isA[*types.ProvisionedThroughputExceededException](err) {
				throttles.Add(1)
				first.CompareAndSwap(nil, se)
			}
		}
	}()

	var oc orderChecker
	start := time.Now()
	got := consume(t, sub, &oc, s.expected(), 2*time.Minute)
	t.Logf("consumed %d records in %v (%d deliveries)", records, time.Since(start), got)
	require.Equal(t, records, got, "a throttled read delivers nothing, so nothing is delivered twice")

	// Stop faulting, then every throttle the proxy answered must have been reported once.
	kp.SetRate(0)
	stats := kp.Stats()
	faulted := stats["Throttle/"+targetGetRecords]
	forwarded := stats[faultproxy.StatForwarded+"/"+targetGetRecords]
	eventually(t, 30*time.Second, "every throttled GetRecords reported", func() bool { return int(throttles.Load()) >= faulted })
	require.NoError(t, sub.Close(context.Background()))
	<-errsDone
	t.Logf("GetRecords: %d forwarded, %d throttled, %d throttles reported", forwarded, faulted, throttles.Load())
	require.Positive(t, faulted)
	require.EqualValues(t, faulted, throttles.Load(), "one request per GetRecords call: no SDK retries")
	require.InDelta(t, 0.5, float64(faulted)/float64(faulted+forwarded), 0.2, "the proxy faulted about half the calls")

	se := first.Load()
	require.NotNil(t, se)
	require.Equal(t, s.name, se.Stream)
	require.Contains(t, s.shardIDs(), se.Shard)
}

// TestLostLeaseViaStoreThrottling throttles every lease write for more than twice the lease TTL:
// the subscriber reports the throttles, gives up its leases when it cannot renew them, takes
// them back once the table answers again, and delivers every record, some more than once.
func TestLostLeaseViaStoreThrottling(t *testing.T) {
	done := noLeaks(t)
	s := newStream(t, 2)
	dp := newFaultProxy(t, testenv.DynamoDBEndpointVar, faultproxy.Plan{
		Seed:   4,
		Rate:   0,
		Ops:    []string{targetUpdateItem},
		Faults: []faultproxy.Fault{{Kind: faultproxy.Throttle, Weight: 1}},
	})
	store := leaseTable(t, dynamoThrough(t, dp))
	const ttl = 900 * time.Millisecond
	sub, err := Subscribe(context.Background(), s.c, s.name,
		testOpts(store, WithStartAt(Horizon()), WithOwner("a"), WithLeaseTTL(ttl))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close(context.Background()) })
	errs := collectErrors(sub)

	var oc orderChecker
	s.publish(1000, 8)
	got := consume(t, sub, &oc, s.expected(), time.Minute)
	require.NoError(t, sub.Commit(context.Background()))

	// The table throttles every write: no renewal, no checkpoint. Records keep coming, and are
	// consumed until each lease has been given up while the table is unreachable.
	// Leases lost before the outage (a renewal late on a busy machine) do not count toward it.
	isLost := func(err error) bool { return errors.Is(err, ErrLeaseLost) }
	lostBefore := errs.count(isLost)
	dp.SetRate(1)
	outage := time.Now()
	s.publish(1000, 8)
	want := s.expected()
	lost := func() bool { return errs.count(isLost) >= lostBefore+2 }
	deadline := time.After(time.Minute)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !lost() {
		select {
		case m := <-sub.Messages():
			got++
			oc.see(t, m)
			if err := m.Ack(context.Background()); !errors.Is(err, ErrAckedLate) { // the lease lost meanwhile: it comes again
				require.NoError(t, err)
			}
		case <-tick.C:
		case <-deadline:
			t.Fatalf("leases not given up a minute into the outage: %v", errs.summary())
		}
	}
	dp.SetRate(0)
	t.Logf("outage of %v over", time.Since(outage))
	got += consume(t, sub, &oc, want, time.Minute)
	for _, id := range s.shardIDs() {
		// The SDK's retryer may sleep through the end of the outage: allow a request timeout.
		eventually(t, 30*time.Second, "lease of "+id+" taken back", func() bool {
			l := readLease(t, store, s.name, id)
			return baseOwner(l.Owner) == "a" && l.Held(time.Now())
		})
	}
	got += upTo(t, s, sub, &oc) // replays still on their way
	t.Logf("2000 records, %d deliveries, %d duplicates", got, got-2000)
	require.Positive(t, errs.count(func(err error) bool {
		var se *ShardError
		return errors.As(err, &se) && se.Op == OpHeartbeat
	}), "failed heartbeat renewals reported")
	require.Positive(t, dp.Stats()["Throttle/"+targetUpdateItem])

	// Checkpoints resume once the table answers: the last record of each shard is recorded.
	require.NoError(t, sub.Commit(context.Background()))
	require.Len(t, oc.last, 2)
	for id, seq := range oc.last {
		require.Equal(t, seq.String(), readLease(t, store, s.name, id).Checkpoint.Sequence, "checkpoint of %s", id)
	}
	require.NoError(t, sub.Close(context.Background()))
	<-errs.done
	t.Logf("errors reported: %v; dynamodb: %v", errs.summary(), dp.Stats())
	require.NoError(t, dp.Close())
	done()
}

// hangingCheckpoints is a lease store whose checkpoint writes hang until their deadline while
// hang is set, as a throttled or overloaded table's can; its other calls answer at once.
type hangingCheckpoints struct {
	lease.Store
	hang atomic.Bool
	hung atomic.Int64 // writes that hung
}

func (h *hangingCheckpoints) CheckpointOrdered(ctx context.Context, key string, t lease.Tenure, cp lease.Checkpoint, n int64) (bool, error) {
	if h.hang.Load() {
		h.hung.Add(1)
		<-ctx.Done()
		return false, ctx.Err()
	}
	return h.Store.CheckpointOrdered(ctx, key, t, cp, n)
}

// TestLostLeaseNotFromSlowCheckpoints: checkpoint writes that hang for longer than the lease
// TTL do not delay renewal, so the lease stays held and no other subscriber can take the shard
// while this one still reads it; checkpoints catch up once the store answers again.
//
// It runs in a synctest bubble, so the lease's expiry is checked against exact time.
func TestLostLeaseNotFromSlowCheckpoints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("slow-checkpoints", 1)
		store := &hangingCheckpoints{Store: lease.NewMemory()}
		const ttl = 900 * time.Millisecond
		sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithStartAt(Horizon()), WithOwner("a"),
			WithLeaseTTL(ttl), WithRequestTimeout(3*time.Second))...)
		errs := collectErrors(sub)
		f.add(0, time.Now(), "0", "1", "2")
		got := recv(t, sub, 3, true)
		shard := got[0].ShardID()
		eventually(t, time.Second, "first checkpoint", func() bool {
			return readLease(t, store, f.stream, shard).Checkpoint.Sequence == got[2].SequenceNumber()
		})

		store.hang.Store(true)
		f.add(0, time.Now(), "3")
		m := recv(t, sub, 1, true)[0] // its checkpoint write hangs
		for range 8 {
			time.Sleep(ttl / 2)
			l := readLease(t, store, f.stream, shard)
			require.Equal(t, "a", baseOwner(l.Owner))
			require.True(t, l.Held(time.Now()), "lease expired while its checkpoint write hung")
		}
		require.Zero(t, errs.count(func(err error) bool { return errors.Is(err, ErrLeaseLost) }))
		require.Positive(t, store.hung.Load(), "a checkpoint write hung")

		store.hang.Store(false)
		eventually(t, 5*time.Second, "checkpoint after the store recovers", func() bool {
			return readLease(t, store, f.stream, shard).Checkpoint.Sequence == m.SequenceNumber()
		})
		require.NoError(t, sub.Close(context.Background()))
		<-errs.done
	})
}
