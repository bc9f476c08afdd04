package kinesub

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/protocol"
	"github.com/gostream/kinesub/lease"
)

// reading counts the shards sub reads.
func reading(sub *Subscriber) int {
	n := 0
	for _, st := range sub.Shards() {
		if st.State == ShardReading {
			n++
		}
	}
	return n
}

// TestHeartbeatRow: a subscriber's heartbeat row is held and renewed while it runs, is not a
// shard, and is gone after Close; on both stores (the memory one in a synctest bubble).
func TestHeartbeatRow(t *testing.T) {
	t.Run("Memory", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) { testHeartbeatRow(t, lease.NewMemory()) })
	})
	t.Run("DynamoDB", func(t *testing.T) { testHeartbeatRow(t, dynamoStore(t)) })
}

func testHeartbeatRow(t *testing.T, store lease.Store) {
	const name = "heartbeat"
	f := newFakeStream(name, 2)
	// A TTL of 2 s, not the fakes' 600 ms: on a busy machine, dynalite's answers can take long
	// enough for the deadline to pass, and a shard lost that way is not released at Close.
	sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithLeaseTTL(2*time.Second))...)
	row := ownerRowPrefix + sub.cfg.owner
	require.Equal(t, "a", baseOwner(sub.cfg.owner), "the owner name, with an incarnation")
	key := name + "/" + row
	var first lease.Lease
	eventually(t, 30*time.Second, "heartbeat row held", func() bool {
		first = readLease(t, store, name, row)
		return first.Owner == sub.cfg.owner && first.Held(time.Now())
	})
	require.Equal(t, key, first.Key)
	eventually(t, 30*time.Second, "both shards read", func() bool { return reading(sub) == 2 })
	// A shard opened without a checkpoint records where it opened (reader.mark), once, after
	// it is reading: the last write an idle shard makes.
	eventually(t, 30*time.Second, "both shards' opening positions recorded", func() bool {
		for _, sh := range f.shards {
			if readLease(t, store, name, sh.id).Checkpoint.Sequence == "" {
				return false
			}
		}
		return true
	})

	// The shard leases are bound to the row: no expiry of their own, and no write while the
	// shards are idle.
	shards := map[string]lease.Lease{}
	for _, sh := range f.shards {
		l := readLease(t, store, name, sh.id)
		require.Equal(t, sub.cfg.owner, l.Owner)
		require.True(t, l.Expiry.IsZero(), "lease of %s has an expiry of its own", sh.id)
		shards[sh.id] = l
	}
	// Renewed every TTL/3 for two TTLs, each renewal moving its counter (how peers tell it is
	// live), it stays its own.
	start := time.Now()
	eventually(t, time.Minute, "heartbeat row renewed for two TTLs", func() bool {
		l := readLease(t, store, name, row)
		require.Equal(t, sub.cfg.owner, l.Owner)
		return time.Since(start) >= 2*sub.cfg.leaseTTL && l.Counter >= first.Counter+5
	})
	for id, l := range shards {
		require.Equal(t, l, readLease(t, store, name, id), "lease of idle %s written", id)
	}
	st := sub.Shards()
	require.Len(t, st, 2, "Shards lists the heartbeat row")
	for _, s := range st {
		require.NotContains(t, s.ShardID, "/")
	}

	require.NoError(t, sub.Close(context.Background()))
	require.Equal(t, lease.Lease{Key: key}, readLease(t, store, name, row), "heartbeat row left after Close")
	for _, id := range []string{f.shards[0].id, f.shards[1].id} {
		l := readLease(t, store, name, id)
		require.Empty(t, l.Owner, "lease of %s after Close", id)
		require.NotZero(t, l.Counter, "lease of %s deleted", id)
	}
}

// TestHeartbeatCountsOwnerLive: an owner whose heartbeat row is renewed counts toward the fair
// share though it holds no shard; one whose row stands still does not, once its counter has
// stood still for reapAfter on the subscriber's clock. Rows of owners gone are deleted: a
// released one at once, a silent one once taken over; a live one is kept. It runs in a synctest
// bubble, so the durations are exact.
func TestHeartbeatCountsOwnerLive(t *testing.T) {
	synctest.Test(t, testHeartbeatCountsOwnerLive)
}

func testHeartbeatCountsOwnerLive(t *testing.T) {
	const name = "liveness"
	store := lease.NewMemory()
	hb := func(owner string) string { return name + "/" + ownerRowPrefix + owner }
	holdAsPeer(t, store, name, "peer", peerLive)
	holdAsPeer(t, store, name, "ghost", peerSilent)
	holdAsPeer(t, store, name, "gone", peerSilent)
	storeRelease(t, store, hb("gone"), "gone")

	f := newFakeStream(name, 6)
	ttl := 100 * time.Millisecond
	start := time.Now()
	sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithLeaseTTL(ttl))...)
	// Live: sub and peer, so 3 each. Counting the silent ghost would make it 2.
	eventually(t, 5*time.Second, "3 shards read", func() bool { return reading(sub) == 3 })
	eventually(t, 5*time.Second, "the released row deleted", func() bool {
		return readLease(t, store, name, ownerRowPrefix+"gone").Counter == 0
	})
	eventually(t, 5*time.Second, "the silent row deleted", func() bool {
		return readLease(t, store, name, ownerRowPrefix+"ghost").Counter == 0
	})
	require.GreaterOrEqual(t, time.Since(start), protocol.ReapAfter(ttl), "silent row taken over before its counter stood still for reapAfter")
	require.Equal(t, 3, reading(sub), "share with one live peer")
	require.Equal(t, "peer", readLease(t, store, name, ownerRowPrefix+"peer").Owner, "a live heartbeat row was taken over")
	require.Len(t, sub.Shards(), 6)

	// The peer leaves: its shards are free, and sub takes them.
	storeRelease(t, store, hb("peer"), "peer")
	eventually(t, 5*time.Second, "6 shards read", func() bool { return reading(sub) == 6 })
}

// stealCounter counts successful steals of shards' leases (Steal and StealNote).
type stealCounter struct {
	lease.Store
	steals atomic.Int64
}

func (c *stealCounter) Steal(ctx context.Context, key, owner string, counter int64, ttl time.Duration) (bool, error) {
	ok, err := c.Store.Steal(ctx, key, owner, counter, ttl)
	c.count(key, ok)
	return ok, err
}

func (c *stealCounter) StealNote(ctx context.Context, key, owner string, counter int64, ttl time.Duration, note string) (bool, error) {
	ok, err := c.Store.StealNote(ctx, key, owner, counter, ttl, note)
	c.count(key, ok)
	return ok, err
}

func (c *stealCounter) count(key string, ok bool) {
	if ok && !strings.Contains(key, "/~") { // not the change row's bumps nor heartbeats
		c.steals.Add(1)
	}
}

// TestJoinerGetsShareWithoutSteal: an instance joining one that holds every shard gets its
// share handed back at once, without a steal, though the holder's balance round is an hour
// away and the joiner's comes every 50 ms. It runs in a synctest bubble, so the time to the
// share is exact.
func TestJoinerGetsShareWithoutSteal(t *testing.T) {
	synctest.Test(t, testJoinerGetsShareWithoutSteal)
}

func testJoinerGetsShareWithoutSteal(t *testing.T) {
	f := newFakeStream("joiner", 8)
	store := &stealCounter{Store: lease.NewMemory()}
	a := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithBalanceInterval(time.Hour))...)
	eventually(t, 5*time.Second, "a reads 8", func() bool { return reading(a) == 8 })

	start := time.Now()
	b := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("b"), WithBalanceInterval(50*time.Millisecond))...)
	eventually(t, 5*time.Second, "4/4", func() bool { return reading(a) == 4 && reading(b) == 4 })
	t.Logf("b read its share %v after joining", time.Since(start))
	require.Less(t, time.Since(start), 2*time.Second)
	for range 25 {
		time.Sleep(20 * time.Millisecond)
		require.Equal(t, 4, reading(a), "the split flapped")
		require.Equal(t, 4, reading(b), "the split flapped")
	}
	require.Zero(t, store.steals.Load(), "leases stolen")
}

// TestEarlierProtocolRefused: a stream whose shard lease is held with an expiry of its own (a
// subscriber of a version before 0.1.0, which renews each lease) is refused at Subscribe with
// ErrIncompatibleLeaseTable, naming the holder and what to do, before any lease is written
// (only the protocol's mark is);
// once that lease is released (the old instance closed), Subscribe goes ahead and resumes from
// its checkpoint. On both stores.
func TestEarlierProtocolRefused(t *testing.T) {
	t.Run("Memory", func(t *testing.T) { testEarlierProtocolRefused(t, lease.NewMemory()) })
	t.Run("DynamoDB", func(t *testing.T) { testEarlierProtocolRefused(t, dynamoStore(t)) })
}

func testEarlierProtocolRefused(t *testing.T, store lease.Store) {
	const name = "upgrade"
	f := newFakeStream(name, 2)
	ctx := context.Background()
	key := name + "/" + f.shards[0].id
	seqs := f.add(0, time.Now(), "r1", "r2", "r3", "r4", "r5", "r6")
	ok, err := store.Acquire(ctx, key, "old-instance", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	old, err := store.Read(ctx, key)
	require.NoError(t, err)
	ok, err = store.Checkpoint(ctx, key, old.Tenure(), lease.Checkpoint{Sequence: seqs[3]})
	require.NoError(t, err)
	require.True(t, ok)

	_, err = subscribe(ctx, f, name, fakeOpts(WithLeaseStore(store))...)
	require.ErrorIs(t, err, ErrIncompatibleLeaseTable)
	require.Contains(t, err.Error(), "old-instance")
	require.Contains(t, err.Error(), "stop every instance of the other version")
	// Nothing written but the protocol's mark, which keeps 0.1 subscribers started from now on
	// from running beside this protocol's; the old instance's lease is as it was.
	ls, err := store.List(ctx)
	require.NoError(t, err)
	require.Len(t, ls, 2, "Subscribe wrote to the table before refusing: %v", ls)
	kept := readLease(t, store, name, f.shards[0].id)
	require.Equal(t, old.Tenure(), kept.Tenure())
	require.Equal(t, seqs[3], kept.Checkpoint.Sequence)
	require.Equal(t, protocolOwner, readLease(t, store, name, protocolRow).Owner)

	ok, err = store.Release(ctx, key, old.Tenure())
	require.NoError(t, err)
	require.True(t, ok)
	sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store))...)
	select {
	case m := <-sub.Messages():
		require.Equal(t, "r5", string(m.Data()), "resumed after the old instance's checkpoint")
		require.NoError(t, m.Ack(ctx))
	case <-time.After(30 * time.Second):
		t.Fatal("nothing delivered after the old instance released its lease")
	}
}

// TestLeaseKindsOfRows: lease.KindOf, which tools listing a lease table rely on, tells every
// row this package writes for what it is.
func TestLeaseKindsOfRows(t *testing.T) {
	s := &Subscriber{stream: "orders"}
	for key, want := range map[string]lease.Kind{
		s.leaseKey("shardId-000000000007"):     lease.KindShard,
		s.ownerKeyOf("i0#0a1b2c3d"):            lease.KindHeartbeat,
		newChangeRow("orders").key:             lease.KindChanges,
		s.leaseKey(protocolRow):                lease.KindProtocolMark,
		s.leaseKey(v1OwnerPrefix + "i0"):       lease.KindHeartbeatV1,
		s.leaseKey("~v3/owner/i0#0a1b2c3d"):    lease.KindOther,
		s.leaseKey("kinesub-lease-protocol-3"): lease.KindProtocolMark,
	} {
		require.Equal(t, want, lease.KindOf(key), key)
	}
}

// TestJoinDrawsAgainOnSameName: two subscribers started with one WithOwner name that draw the
// same incarnation do not share a heartbeat row: the second finds the row already there and
// joins under a new incarnation, so the fleet counts two owners and each reads its share. On
// both stores (the memory one in a synctest bubble).
func TestJoinDrawsAgainOnSameName(t *testing.T) {
	t.Run("Memory", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) { testJoinDrawsAgainOnSameName(t, lease.NewMemory()) })
	})
	t.Run("DynamoDB", func(t *testing.T) { testJoinDrawsAgainOnSameName(t, dynamoStore(t)) })
}

func testJoinDrawsAgainOnSameName(t *testing.T, store lease.Store) {
	const same, other = "00000000c0115104", "00000000000000b2"
	f := newFakeStream("samename", 4)
	opts := func(draws ...string) []Option {
		var n atomic.Int32
		pr := &probeSet{incarnation: func() string { return draws[min(int(n.Add(1))-1, len(draws)-1)] }}
		return fakeOpts(WithLeaseStore(store), WithOwner("a"), WithBalanceInterval(100*time.Millisecond), withProbes(pr))
	}
	first := subscribeFake(t, f, opts(same)...)
	second := subscribeFake(t, f, opts(same, other)...)
	require.Equal(t, "a#"+same, first.tenure.owner())
	require.Equal(t, "a#"+other, second.tenure.owner(), "the second drew a new incarnation")
	require.Equal(t, second.tenure.owner(), second.cfg.owner)
	eventually(t, 30*time.Second, "2 shards each", func() bool { return reading(first) == 2 && reading(second) == 2 })
	require.Equal(t, "a#"+same, first.tenure.owner(), "the first kept its row")
	require.Equal(t, "a#"+same, readLease(t, store, f.stream, ownerRowPrefix+"a#"+same).Owner)
}

// TestIncarnation: 64 bits, 16 hex digits.
func TestIncarnation(t *testing.T) {
	inc := incarnation()
	require.Regexp(t, `^[0-9a-f]{16}$`, inc)
	require.NotEqual(t, inc, incarnation())
}
