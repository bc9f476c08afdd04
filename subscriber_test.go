package kinesub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

func TestRoundTrip(t *testing.T) {
	s := newStream(t, 2)
	sub := subscribeT(t, s, testOpts(lease.NewMemory(), WithStartAt(Horizon()))...)
	seq, err := s.pub.Publish(context.Background(), "order-42", []byte("paid"), map[string]string{"trace-id": "abc", "kind": "payment"})
	require.NoError(t, err)
	m := recv(t, sub, 1, true)[0]
	assert.Equal(t, "paid", string(m.Data()))
	assert.Equal(t, map[string]string{"trace-id": "abc", "kind": "payment"}, m.Headers())
	assert.Equal(t, "order-42", m.PartitionKey())
	assert.Equal(t, seq, m.SequenceNumber())
	assert.Contains(t, s.shardIDs(), m.ShardID())
	assert.WithinDuration(t, time.Now(), m.ArrivalTime(), time.Minute)
	assert.Equal(t, AtSequence(m.ShardID(), seq), m.Position())

	// A record without headers has an empty, non-nil header map.
	_, err = s.pub.Publish(context.Background(), "order-43", []byte("plain"), nil)
	require.NoError(t, err)
	m = recv(t, sub, 1, true)[0]
	assert.Equal(t, "plain", string(m.Data()))
	assert.Nil(t, m.Headers(), "no headers: no map")
	assert.ErrorIs(t, m.Ack(context.Background()), ErrAlreadySettled)
}

func TestResumeFromCheckpoint(t *testing.T) {
	s := newStream(t, 1)
	store := lease.NewMemory()
	s.publish(10, 1)
	sub := subscribeT(t, s, testOpts(store, WithStartAt(Horizon()))...)
	got := recv(t, sub, 5, true)
	require.Equal(t, []string{"key-0/0", "key-0/1", "key-0/2", "key-0/3", "key-0/4"}, payloads(got))
	require.NoError(t, sub.Close(context.Background()))
	l := readLease(t, store, s.name, got[4].ShardID())
	require.Equal(t, got[4].SequenceNumber(), l.Checkpoint.Sequence)
	require.Empty(t, l.Owner, "Close releases the lease")

	sub2 := subscribeT(t, s, testOpts(store)...)
	got = recv(t, sub2, 5, true)
	require.Equal(t, []string{"key-0/5", "key-0/6", "key-0/7", "key-0/8", "key-0/9"}, payloads(got))
	upTo(t, s, sub2, nil) // nothing else
}

func TestNackRequeueReplays(t *testing.T) {
	s := newStream(t, 1)
	store := lease.NewMemory()
	s.publish(6, 1)
	sub := subscribeT(t, s, testOpts(store, WithStartAt(Horizon()))...)
	got := recv(t, sub, 6, false)
	ctx := context.Background()
	for i, m := range got {
		if i == 2 {
			require.NoError(t, m.Nack(ctx))
			continue
		}
		require.NoError(t, m.Ack(ctx))
	}
	require.NoError(t, sub.Commit(ctx))
	require.Equal(t, got[1].SequenceNumber(), readLease(t, store, s.name, got[0].ShardID()).Checkpoint.Sequence)
	require.NoError(t, sub.Close(ctx))

	sub2 := subscribeT(t, s, testOpts(store)...)
	replay := recv(t, sub2, 4, true)
	require.Equal(t, []string{"key-0/2", "key-0/3", "key-0/4", "key-0/5"}, payloads(replay))
}

func TestOutOfOrderAcksAdvancePrefixOnly(t *testing.T) {
	s := newStream(t, 1)
	store := lease.NewMemory()
	s.publish(5, 1)
	sub := subscribeT(t, s, testOpts(store, WithStartAt(Horizon()), WithCheckpointInterval(time.Hour))...)
	got := recv(t, sub, 5, false)
	ctx := context.Background()
	shard := got[0].ShardID()
	for _, i := range []int{0, 2, 3, 4} {
		require.NoError(t, got[i].Ack(ctx))
	}
	require.NoError(t, sub.Commit(ctx))
	require.Equal(t, got[0].SequenceNumber(), readLease(t, store, s.name, shard).Checkpoint.Sequence)
	require.NoError(t, got[1].Ack(ctx))
	require.NoError(t, sub.Commit(ctx))
	require.Equal(t, got[4].SequenceNumber(), readLease(t, store, s.name, shard).Checkpoint.Sequence)
}

func TestCheckpointEveryAdvance(t *testing.T) {
	s := newStream(t, 1)
	store := lease.NewMemory()
	s.publish(3, 1)
	sub := subscribeT(t, s, testOpts(store, WithStartAt(Horizon()), WithCheckpointInterval(0))...)
	for _, m := range recv(t, sub, 3, false) {
		require.NoError(t, m.Ack(context.Background()))
		// With interval 0 the write is done when Ack returns.
		require.Equal(t, m.SequenceNumber(), readLease(t, store, s.name, m.ShardID()).Checkpoint.Sequence)
	}
}

// consumeAcrossReshard publishes and consumes 300 records over 12 keys, reshards, then does
// it again: every record arrives, per key in publish order without gaps, from all three shards.
func consumeAcrossReshard(t *testing.T, s *stream, reshard func(), opts ...Option) {
	t.Helper()
	sub := subscribeT(t, s, testOpts(lease.NewMemory(), append([]Option{WithStartAt(Horizon())}, opts...)...)...)
	s.publish(300, 12)
	var oc orderChecker
	shards := map[string]int{}
	for _, m := range recv(t, sub, 100, true) {
		oc.see(t, m)
		shards[m.ShardID()]++
	}
	reshard()
	testenv.WaitActive(t, s.c, s.name)
	s.publish(300, 12)
	for _, m := range recv(t, sub, 500, true) {
		oc.see(t, m)
		shards[m.ShardID()]++
	}
	require.Len(t, shards, 3, "records from the parents and the children: %v", shards)
	for k, n := range oc.next {
		require.Equal(t, 50, n, "key %s", k)
	}
	upTo(t, s, sub, nil) // nothing else
}

// splitShard splits shard at the middle of its hash key range.
func (s *stream) splitShard(shard string) {
	s.t.Helper()
	mid := new(big.Int).Lsh(big.NewInt(1), 127)
	_, err := s.c.SplitShard(context.Background(), &kinesis.SplitShardInput{
		StreamName: aws.String(s.name), ShardToSplit: aws.String(shard), NewStartingHashKey: aws.String(mid.String()),
	})
	require.NoError(s.t, err)
}

// TestSplitDuringConsumption splits the only shard while records flow: every record arrives,
// and per key in publish order, because the children wait for the parent to drain.
func TestSplitDuringConsumption(t *testing.T) {
	s := newStream(t, 1)
	consumeAcrossReshard(t, s, func() { s.splitShard(s.shardIDs()[0]) })
}

// TestMergeDuringConsumption merges two shards while records flow: the child waits for both
// parents, ParentShardId and AdjacentParentShardId.
func TestMergeDuringConsumption(t *testing.T) {
	s := newStream(t, 2)
	consumeAcrossReshard(t, s, func() {
		ids := s.shardIDs()
		_, err := s.c.MergeShards(context.Background(), &kinesis.MergeShardsInput{
			StreamName: aws.String(s.name), ShardToMerge: aws.String(ids[0]), AdjacentShardToMerge: aws.String(ids[1]),
		})
		require.NoError(t, err)
	})
}

// TestChildrenWaitForParents checks the gate itself: a child never delivers while a parent
// holds an unacknowledged record.
func TestChildrenWaitForParents(t *testing.T) {
	s := newStream(t, 1)
	parent := s.shardIDs()[0]
	s.publish(5, 1)
	s.splitShard(parent)
	testenv.WaitActive(t, s.c, s.name)
	s.publish(20, 4)
	sub := subscribeT(t, s, testOpts(lease.NewMemory(), WithStartAt(Horizon()))...)
	held := recv(t, sub, 5, false)
	for _, m := range held {
		require.Equal(t, parent, m.ShardID())
	}
	// The parent's reader is at its end, waiting for its records to be settled, and the
	// children are gated meanwhile.
	eventually(t, 30*time.Second, "the children gated behind the parent at its end", func() bool {
		w := heldShards(sub)[parent]
		waiting := 0
		for _, st := range sub.Shards() {
			if st.State == ShardWaitingForParent && st.WaitingFor == parent {
				waiting++
			}
		}
		return w != nil && w.waitingRoom.Load() && waiting == 2
	})
	none(t, sub)
	for _, m := range held {
		require.NoError(t, m.Ack(context.Background()))
	}
	for _, m := range recv(t, sub, 20, true) {
		require.NotEqual(t, parent, m.ShardID())
	}
}

// blackhole is a lease store that fails every call while cut is set: a partitioned process.
type blackhole struct {
	lease.Store
	cut atomic.Bool
}

func (b *blackhole) fail() error { return fmt.Errorf("network unreachable (test partition)") }

func (b *blackhole) Steal(ctx context.Context, key, owner string, counter int64, ttl time.Duration) (bool, error) {
	if b.cut.Load() {
		return false, b.fail()
	}
	return b.Store.Steal(ctx, key, owner, counter, ttl)
}

func (b *blackhole) StealNote(ctx context.Context, key, owner string, counter int64, ttl time.Duration, note string) (bool, error) {
	if b.cut.Load() {
		return false, b.fail()
	}
	return b.Store.StealNote(ctx, key, owner, counter, ttl, note)
}

func (b *blackhole) Read(ctx context.Context, key string) (lease.Lease, error) {
	if b.cut.Load() {
		return lease.Lease{}, b.fail()
	}
	return b.Store.Read(ctx, key)
}

func (b *blackhole) Delete(ctx context.Context, key string, counter int64) (bool, error) {
	if b.cut.Load() {
		return false, b.fail()
	}
	return b.Store.Delete(ctx, key, counter)
}

func (b *blackhole) Renew(ctx context.Context, key string, h lease.Tenure, ttl time.Duration) (bool, error) {
	if b.cut.Load() {
		return false, b.fail()
	}
	return b.Store.Renew(ctx, key, h, ttl)
}

func (b *blackhole) Checkpoint(ctx context.Context, key string, h lease.Tenure, cp lease.Checkpoint) (bool, error) {
	if b.cut.Load() {
		return false, b.fail()
	}
	return b.Store.Checkpoint(ctx, key, h, cp)
}

func (b *blackhole) CheckpointOrdered(ctx context.Context, key string, h lease.Tenure, cp lease.Checkpoint, n int64) (bool, error) {
	if b.cut.Load() {
		return false, b.fail()
	}
	return b.Store.CheckpointOrdered(ctx, key, h, cp, n)
}

func (b *blackhole) Release(ctx context.Context, key string, h lease.Tenure) (bool, error) {
	if b.cut.Load() {
		return false, b.fail()
	}
	return b.Store.Release(ctx, key, h)
}

func (b *blackhole) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if b.cut.Load() {
		return false, b.fail()
	}
	return b.Store.Acquire(ctx, key, owner, ttl)
}

func (b *blackhole) List(ctx context.Context) ([]lease.Lease, error) {
	if b.cut.Load() {
		return nil, b.fail()
	}
	return b.Store.List(ctx)
}

func (b *blackhole) ListPrefix(ctx context.Context, prefix string) ([]lease.Lease, error) {
	if b.cut.Load() {
		return nil, b.fail()
	}
	return b.Store.ListPrefix(ctx, prefix)
}

// TestTakeoverAfterExpiry: a subscriber cut off from the lease table stops reading before its
// lease expires, and a second one on the same DynamoDB table takes the shard over and resumes
// after the checkpoint.
func TestTakeoverAfterExpiry(t *testing.T) {
	s := newStream(t, 1)
	table := lease.NewDynamoDB(testenv.DynamoDB(t), testenv.Name(t))
	require.NoError(t, table.EnsureTable(context.Background()))
	a := &blackhole{Store: table}
	s.publish(10, 1)
	// Renewals to the emulator may take a few hundred milliseconds on a busy machine: a TTL of
	// seconds keeps a from losing the lease before it is cut off.
	ttl := WithLeaseTTL(3 * time.Second)
	subA := subscribeT(t, s, testOpts(a, WithOwner("a"), WithStartAt(Horizon()), ttl)...)
	got := recv(t, subA, 10, false)
	for _, m := range got[:4] {
		require.NoError(t, m.Ack(context.Background()))
	}
	require.NoError(t, subA.Commit(context.Background()))
	shard := got[0].ShardID()

	subB := subscribeT(t, s, testOpts(table, WithOwner("b"), ttl)...)
	eventually(t, 30*time.Second, "b sees a's lease", func() bool {
		st := subB.Shards()
		return len(st) == 1 && st[0].State == ShardLeasedElsewhere && baseOwner(st[0].Owner) == "a"
	})
	none(t, subB)
	a.cut.Store(true)
	start := time.Now()
	waitErr(t, subA, ErrLeaseLost, 30*time.Second)
	t.Logf("a stopped after %v", time.Since(start))
	replay := recv(t, subB, 6, true)
	t.Logf("b took over after %v", time.Since(start))
	require.Equal(t, []string{"key-0/4", "key-0/5", "key-0/6", "key-0/7", "key-0/8", "key-0/9"}, payloads(replay))
	require.Equal(t, "b", baseOwner(readLease(t, table, s.name, shard).Owner))
}

// TestFencedReaderStops: when another owner takes the lease over, the reader stops within one
// renew period (TTL/3) and delivers nothing more from that shard. It runs in a synctest bubble,
// so the renew period is measured exactly.
func TestFencedReaderStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("fenced", 1)
		store := lease.NewMemory()
		ttl := 900 * time.Millisecond
		sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithStartAt(Horizon()), WithLeaseTTL(ttl))...)
		f.add(0, time.Now(), "a", "b", "c")
		shard := recv(t, sub, 3, true)[0].ShardID()
		stealAsPeer(t, store, f.stream, shard, "thief")
		start := time.Now()
		waitErr(t, sub, ErrLeaseLost, 2*ttl)
		require.LessOrEqual(t, time.Since(start), ttl/3, "fenced within one renew period")
		f.add(0, time.Now(), "d", "e", "f")
		time.Sleep(ttl)
		synctest.Wait()
		none(t, sub)
		require.Equal(t, "thief", readLease(t, store, f.stream, shard).Owner)
		require.Equal(t, ShardLeasedElsewhere, sub.Shards()[0].State)
	})
}

// TestCloseDrainsFlushesReleases: Close waits for what the consumer holds, writes the
// checkpoint and releases; the next subscriber resumes right after the last acked record.
func TestCloseDrainsFlushesReleases(t *testing.T) {
	done := noLeaks(t)
	s := newStream(t, 1)
	store := lease.NewMemory()
	s.publish(10, 1)
	sub, err := Subscribe(context.Background(), s.c, s.name, testOpts(store, WithStartAt(Horizon()), WithCheckpointInterval(time.Hour))...)
	require.NoError(t, err)
	got := recv(t, sub, 7, false)
	for _, m := range got[:6] {
		require.NoError(t, m.Ack(context.Background()))
	}
	// The last one is acked once Close has begun.
	go func() {
		for {
			if closing(sub) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		_ = got[6].Ack(context.Background())
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n := 0
	closed := make(chan struct{})
	go func() {
		for range sub.Messages() {
			n++
		}
		close(closed)
	}()
	require.NoError(t, sub.Close(ctx))
	<-closed
	for range sub.Errors() {
	}
	l := readLease(t, store, s.name, got[0].ShardID())
	require.Equal(t, got[6].SequenceNumber(), l.Checkpoint.Sequence)
	require.Empty(t, l.Owner)
	require.NoError(t, sub.Err())
	require.ErrorIs(t, sub.Seeker().Seek(context.Background(), Horizon()), ErrClosed)
	done()

	sub2 := subscribeT(t, s, testOpts(store)...)
	require.Equal(t, []string{"key-0/7", "key-0/8", "key-0/9"}, payloads(recv(t, sub2, 3, true)))
}

func TestCancelEndsSubscription(t *testing.T) {
	done := noLeaks(t)
	s := newStream(t, 2)
	ctx, cancel := context.WithCancelCause(context.Background())
	logs := &logLines{}
	sub, err := Subscribe(ctx, s.c, s.name, testOpts(lease.NewMemory(), WithLogger(slog.New(logs)))...)
	require.NoError(t, err)
	eventually(t, 30*time.Second, "both shards read", func() bool { return reading(sub) == 2 })
	shutdown := errors.New("deploy rolled back")
	cancel(shutdown)
	ended := make(chan struct{})
	go func() {
		for range sub.Messages() {
		}
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("Messages not closed after ctx cancellation")
	}
	// Not a silent stop: Err says why, with the context's cause, and so does the log.
	require.ErrorIs(t, sub.Err(), ErrSubscriptionEnded)
	require.ErrorIs(t, sub.Err(), shutdown)
	require.True(t, logs.has(slog.LevelInfo, "subscription ended by its context"), "logged: %v", logs.all())
	require.NoError(t, sub.Close(context.Background()))
	done()
}

func TestStreamNotFound(t *testing.T) {
	c := testenv.Kinesis(t)
	_, err := Subscribe(context.Background(), c, testenv.Name(t), WithLeaseStore(lease.NewMemory()), WithRequestTimeout(30*time.Second))
	require.ErrorIs(t, err, ErrStreamNotFound)
	require.Contains(t, err.Error(), "WithCreateIfMissing")
}

func TestCreateIfMissing(t *testing.T) {
	c := testenv.Kinesis(t)
	name := testenv.Name(t)
	t.Cleanup(func() {
		_, _ = c.DeleteStream(context.Background(), &kinesis.DeleteStreamInput{StreamName: aws.String(name)})
	})
	sub, err := Subscribe(context.Background(), c, name, testOpts(lease.NewMemory(), WithCreateIfMissing(3))...)
	require.NoError(t, err)
	defer sub.Close(context.Background())
	out, err := c.DescribeStreamSummary(context.Background(), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
	require.NoError(t, err)
	require.EqualValues(t, 3, aws.ToInt32(out.StreamDescriptionSummary.OpenShardCount))
}

// TestStreamDeletedIsFatal: a stream deleted under a subscription ends it, and Err says why.
func TestStreamDeletedIsFatal(t *testing.T) {
	s := newStream(t, 1)
	sub := subscribeT(t, s, testOpts(lease.NewMemory())...)
	eventually(t, 30*time.Second, "the shard read", func() bool { return reading(sub) == 1 })
	_, err := s.c.DeleteStream(context.Background(), &kinesis.DeleteStreamInput{StreamName: aws.String(s.name)})
	require.NoError(t, err)
	select {
	case _, ok := <-sub.Messages():
		require.False(t, ok)
	case <-time.After(30 * time.Second):
		t.Fatal("subscription did not end after its stream was deleted")
	}
	require.ErrorIs(t, sub.Err(), ErrStreamNotFound)
}

// TestAggregatedAndMalformedRecords: a KPL-aggregated record is reported, not delivered; a
// record whose envelope is malformed arrives as a plain payload.
func TestAggregatedAndMalformedRecords(t *testing.T) {
	s := newStream(t, 1)
	store := lease.NewMemory()
	sub := subscribeT(t, s, testOpts(store, WithStartAt(Horizon()))...)
	aggSeq := s.put("k", []byte{0xF3, 0x89, 0x9A, 0xC2, 0x0A, 0x01, 'x'})
	bad := []byte("RSK1\x00\x00\x27\x0fnot really headers")
	s.put("k", bad)
	s.put("k", []byte("after"))
	err := waitErr(t, sub, ErrAggregatedRecord, 30*time.Second)
	require.Contains(t, err.Error(), aggSeq)
	got := recv(t, sub, 2, true)
	require.Equal(t, bad, got[0].Data())
	require.Empty(t, got[0].Headers())
	require.Equal(t, "after", string(got[1].Data()))
	require.NoError(t, sub.Commit(context.Background()))
	require.Equal(t, got[1].SequenceNumber(), readLease(t, store, s.name, got[1].ShardID()).Checkpoint.Sequence)
}

// TestSlowConsumerKeepsLeases: a consumer that stops reading for 5 × TTL keeps every lease
// (renewal does not wait on deliveries) and resumes where it was. It runs in a synctest bubble:
// a renewal is late only if the subscriber makes it late, never because the machine is busy.
func TestSlowConsumerKeepsLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const perShard = 100
		f := newFakeStream("slow-consumer", 2)
		want := map[string][]string{} // shard → its payloads in order
		for i, sh := range f.shards {
			for n := range perShard {
				p := fmt.Sprintf("%d/%d", i, n)
				f.add(i, time.Now(), p)
				want[sh.id] = append(want[sh.id], p)
			}
		}
		store := lease.NewMemory()
		ttl := 300 * time.Millisecond
		sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithStartAt(Horizon()), WithLeaseTTL(ttl), WithBufferPages(1))...)
		got := map[string][]string{}
		take := func(n int) {
			for _, m := range recv(t, sub, n, true) {
				got[m.ShardID()] = append(got[m.ShardID()], string(m.Data()))
			}
		}
		take(10)

		// Five TTLs pass with the consumer away: each lease is renewed every TTL/3 meanwhile.
		errs := collectErrors(sub)
		eventually(t, 5*time.Second, "both shards read", func() bool { return reading(sub) == 2 })
		holding := map[string]lease.Tenure{}
		for _, sh := range f.shards {
			holding[sh.id] = readLease(t, store, f.stream, sh.id).Tenure()
		}
		before := time.Now()
		time.Sleep(5 * ttl)
		synctest.Wait()
		for id, h := range holding {
			l := readLease(t, store, f.stream, id)
			require.Equal(t, h, l.Tenure(), "holding of %s", id)
			require.True(t, l.Expiry.IsZero(), "lease of %s has an expiry of its own", id)
		}
		hb := readLease(t, store, f.stream, ownerRowPrefix+sub.cfg.owner)
		require.True(t, hb.Expiry.After(before.Add(5*ttl)), "heartbeat row renewed through five TTLs: expires %v", hb.Expiry.Sub(before))
		require.Equal(t, 2, reading(sub), "a lease was lost: %+v", sub.Shards())
		require.Zero(t, errs.count(func(err error) bool { return errors.Is(err, ErrLeaseLost) }))

		take(2*perShard - 10)
		require.Equal(t, want, got, "each shard resumed where it was, in order, nothing twice")
		synctest.Wait()
		none(t, sub)
	})
}

// TestMaxInFlightStopsFetching: a consumer that never acks gets at most the cap per shard.
func TestMaxInFlightStopsFetching(t *testing.T) {
	s := newStream(t, 1)
	s.publish(100, 1)
	sub := subscribeT(t, s, testOpts(lease.NewMemory(), WithStartAt(Horizon()), WithMaxInFlight(10), WithBatchSize(5))...)
	got := holdToCap(t, sub, 1)
	require.Len(t, got, 10, "deliveries without an ack")
	for _, m := range got {
		require.NoError(t, m.Ack(context.Background()))
	}
	more := recv(t, sub, 10, false)
	require.Equal(t, "key-0/10", string(more[0].Data()))
}

// TestInitialPosition: WithInitialPosition(Horizon) reads the backlog of a shard without
// checkpoint, but unlike WithStartAt it does not beat a stored checkpoint.
func TestInitialPosition(t *testing.T) {
	s := newStream(t, 1)
	store := lease.NewMemory()
	s.publish(6, 1)
	sub := subscribeT(t, s, testOpts(store, WithInitialPosition(Horizon()))...)
	require.Equal(t, []string{"key-0/0", "key-0/1", "key-0/2"}, payloads(recv(t, sub, 3, true)))
	require.NoError(t, sub.Close(context.Background()))
	sub2 := subscribeT(t, s, testOpts(store, WithInitialPosition(Horizon()))...)
	require.Equal(t, []string{"key-0/3", "key-0/4", "key-0/5"}, payloads(recv(t, sub2, 3, true)))
}

// TestHandoverBeforeFirstCheckpoint: a shard opened at the tip and handed over before its
// first checkpoint is reopened where it was first opened, not at a later tip, so records
// published in between are not skipped.
func TestHandoverBeforeFirstCheckpoint(t *testing.T) {
	s := newStream(t, 1)
	store := lease.NewMemory()
	sub := subscribeT(t, s, testOpts(store)...)
	eventually(t, 30*time.Second, "the shard is read", func() bool {
		st := sub.Shards()
		return len(st) == 1 && st[0].State == ShardReading
	})
	eventually(t, 30*time.Second, "where the reader opened recorded", func() bool {
		return strings.HasPrefix(readLease(t, store, s.name, s.shardIDs()[0]).Checkpoint.Sequence, lease.AtTimestampPrefix)
	})
	require.NoError(t, sub.Close(context.Background()))
	s.publish(3, 1) // nobody reads the shard now
	sub2 := subscribeT(t, s, testOpts(store)...)
	require.Equal(t, []string{"key-0/0", "key-0/1", "key-0/2"}, payloads(recv(t, sub2, 3, true)))
}
