package kinesub

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// countingStore counts the checkpoint writes of acknowledged records that reach a lease store
// (not the position marker a shard's first reader writes once).
type countingStore struct {
	lease.Store
	checkpoints atomic.Int64
}

func (c *countingStore) CheckpointOrdered(ctx context.Context, key string, h lease.Tenure, cp lease.Checkpoint, n int64) (bool, error) {
	if seq := cp.Sequence; seq != lease.TrimHorizon && !strings.HasPrefix(seq, lease.AtTimestampPrefix) {
		c.checkpoints.Add(1)
	}
	return c.Store.CheckpointOrdered(ctx, key, h, cp, n)
}

// TestCoalescedCheckpoints acks 10,000 records of one shard in order: the acks cost at most one
// store write per checkpoint interval (a couple on an idle machine), and Close writes the last one;
// with interval 0 every ack that advances the watermark is a write of its own.
func TestCoalescedCheckpoints(t *testing.T) {
	const n = 10_000
	s := newStream(t, 1)
	s.publish(n, 1)

	t.Run("interval", func(t *testing.T) {
		store := &countingStore{Store: lease.NewMemory()}
		const interval = 2 * time.Second
		subscribed := time.Now()
		sub, err := Subscribe(context.Background(), s.c, s.name, testOpts(store,
			WithStartAt(Horizon()), WithBatchSize(maxBatchSize), WithCheckpointInterval(interval))...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Close(context.Background()) })
		start := time.Now()
		got := recv(t, sub, n, true)
		elapsed := time.Since(start)
		acked := store.checkpoints.Load()
		last := got[n-1]
		require.Equal(t, "key-0/9999", string(last.Data()))
		// The flusher writes the newest watermark on its next tick, once.
		eventually(t, time.Minute, "checkpoint of the last ack", func() bool {
			return readLease(t, store, s.name, last.ShardID()).Checkpoint.Sequence == last.SequenceNumber()
		})
		before := store.checkpoints.Load()
		ticks := int64(time.Since(subscribed) / interval)
		require.NoError(t, sub.Close(context.Background()))
		after := store.checkpoints.Load()
		t.Logf("%d acks in %v: %d checkpoint writes by then, %d after the next tick, %d on Close",
			n, elapsed, acked, before, after-before)
		require.Positive(t, before, "checkpoint writes counted")
		require.LessOrEqual(t, before, ticks+1, "acks within one interval are coalesced")
		require.LessOrEqual(t, after-before, int64(1), "Close writes the last checkpoint at most once")
		require.Equal(t, last.SequenceNumber(), readLease(t, store, s.name, last.ShardID()).Checkpoint.Sequence)
	})

	t.Run("every advance", func(t *testing.T) {
		store := &countingStore{Store: lease.NewMemory()}
		sub, err := Subscribe(context.Background(), s.c, s.name, testOpts(store,
			WithStartAt(Horizon()), WithBatchSize(maxBatchSize), WithCheckpointInterval(0))...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Close(context.Background()) })
		got := recv(t, sub, n, true)
		before := store.checkpoints.Load()
		require.NoError(t, sub.Close(context.Background()))
		after := store.checkpoints.Load()
		t.Logf("%d acks: %d checkpoint writes before Close, %d on Close", n, before, after-before)
		// Each in-order ack advances the watermark by one record, and each advance is written
		// before Ack returns.
		require.GreaterOrEqual(t, before, int64(1000))
		require.EqualValues(t, n, before, "one write per advance")
		require.Zero(t, after-before, "nothing left to write on Close")
		last := got[n-1]
		require.Equal(t, last.SequenceNumber(), readLease(t, store, s.name, last.ShardID()).Checkpoint.Sequence)
	})
}

// TestCoalesceCommitFlushes: with a checkpoint interval far away, Commit writes the acked
// watermark at once, a second Commit with nothing new writes nothing, and Close does not write
// a checkpoint already in the store.
func TestCoalesceCommitFlushes(t *testing.T) {
	s := newStream(t, 1)
	s.publish(100, 1)
	store := &countingStore{Store: lease.NewMemory()}
	sub := subscribeT(t, s, testOpts(store, WithStartAt(Horizon()), WithCheckpointInterval(time.Hour))...)
	got := recv(t, sub, 100, false)
	ctx := context.Background()
	shard := got[0].ShardID()
	for _, m := range got[:60] {
		require.NoError(t, m.Ack(ctx))
	}
	require.Equal(t, lease.TrimHorizon, readLease(t, store, s.name, shard).Checkpoint.Sequence, "acks alone wait for the interval")
	require.NoError(t, sub.Commit(ctx))
	require.Equal(t, got[59].SequenceNumber(), readLease(t, store, s.name, shard).Checkpoint.Sequence)
	require.EqualValues(t, 1, store.checkpoints.Load())

	require.NoError(t, sub.Commit(ctx))
	require.EqualValues(t, 1, store.checkpoints.Load(), "nothing new to write")

	for _, m := range got[60:] {
		require.NoError(t, m.Ack(ctx))
	}
	require.NoError(t, sub.Commit(ctx))
	require.Equal(t, got[99].SequenceNumber(), readLease(t, store, s.name, shard).Checkpoint.Sequence)
	require.EqualValues(t, 2, store.checkpoints.Load())

	require.NoError(t, sub.Close(ctx))
	require.EqualValues(t, 2, store.checkpoints.Load(), "Close has nothing left to write")
	l := readLease(t, store, s.name, shard)
	require.Equal(t, got[99].SequenceNumber(), l.Checkpoint.Sequence)
	require.Empty(t, l.Owner)
}

// TestBoundedInFlight: a consumer that acks nothing, against a 20,000-record backlog on one
// shard, receives no more than the in-flight cap plus one batch; the shard's lease is kept
// meanwhile, and acks free room so that reading resumes and the backlog is read to its end.
func TestBoundedInFlight(t *testing.T) {
	const backlog, limit, batch = 20_000, 1000, 1000
	s := newStream(t, 1)
	s.publish(backlog, 16)
	store := lease.NewMemory()
	// A TTL of seconds: on a busy machine the renewal goroutine may not run for a few hundred
	// milliseconds, and a lease lost that way is not what this test is about.
	const ttl = 3 * time.Second
	sub := subscribeT(t, s, testOpts(store, WithStartAt(Horizon()), WithOwner("slow"),
		WithMaxInFlight(limit), WithBatchSize(batch), WithLeaseTTL(ttl))...)

	// Take everything offered without acking, until the reader waits for room below its cap
	// and everything it fetched has been received.
	var l orderChecker
	start := time.Now()
	held := holdToCap(t, sub, 1)
	for _, m := range held {
		l.see(t, m)
	}
	t.Logf("%d deliveries held without acks", len(held))
	require.GreaterOrEqual(t, len(held), limit, "reading goes on up to the cap")
	require.LessOrEqual(t, len(held), limit+batch, "reading stops at the cap")

	// Held for well over a TTL, the lease stays ours, renewed meanwhile, and nothing more is
	// fetched.
	shard := held[0].ShardID()
	holding := readLease(t, store, s.name, shard).Tenure()
	eventually(t, time.Minute, "renewals for two TTLs", func() bool {
		return time.Since(start) > 2*ttl && readLease(t, store, s.name, ownerRowPrefix+sub.cfg.owner).Expiry.After(start.Add(2*ttl))
	})
	require.Equal(t, holding, readLease(t, store, s.name, shard).Tenure(), "the same holding, kept by the heartbeat row")
	require.True(t, parkedAtCap(sub, 1, len(held)), "reader no longer parked at its cap: %+v", sub.Shards())
	none(t, sub)
	lh := readLease(t, store, s.name, shard)
	require.Equal(t, "slow", baseOwner(lh.Owner))
	st := sub.Shards()
	require.Equal(t, ShardReading, st[0].State, "lease kept while the consumer holds the cap")
	require.Equal(t, len(held), st[0].InFlight)

	// Acks free room: reading resumes, and the rest of the backlog arrives, in order.
	for _, m := range held {
		require.NoError(t, m.Ack(context.Background()))
	}
	want := s.expected()
	got := len(held) + consume(t, sub, &l, want, 2*time.Minute)
	require.Equal(t, backlog, got, "nothing delivered twice")
	require.NoError(t, sub.Commit(context.Background()))
	require.Equal(t, l.last[shard].String(), readLease(t, store, s.name, shard).Checkpoint.Sequence)
}
