package kinesub

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/protocol"
	"github.com/gostream/kinesub/lease"
)

// Focused tests of lease protocol 2's rules (docs/leases.md); the fleet simulation
// (sim_test.go) searches the same rules over many schedules.

// laggingIndex is a lease store whose listings lack other owners' heartbeat rows, as an
// eventually consistent index that has not caught up with rows just made does; reads of one
// row are strongly consistent.
type laggingIndex struct {
	lease.Store
	owner string
}

func (l laggingIndex) drop(all []lease.Lease) []lease.Lease {
	out := all[:0]
	for _, r := range all {
		if strings.Contains(r.Key, "/"+ownerRowPrefix) && baseOwner(r.Owner) != l.owner {
			continue
		}
		out = append(out, r)
	}
	return out
}

func (l laggingIndex) List(ctx context.Context) ([]lease.Lease, error) {
	all, err := l.Store.List(ctx)
	return l.drop(all), err
}

func (l laggingIndex) ListPrefix(ctx context.Context, prefix string) ([]lease.Lease, error) {
	all, err := l.Store.ListPrefix(ctx, prefix)
	return l.drop(all), err
}

// TestListingLagKeepsOwnerLive: a live owner whose heartbeat row a listing lacks is read on its
// own before it counts as gone, so its shards are not taken as orphans.
func TestListingLagKeepsOwnerLive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		requireLivePeerKept(t, "lag", "its row was missing from a listing",
			func(store lease.Store) lease.Store { return laggingIndex{store, "a"} })
	})
}

// requireLivePeerKept subscribes "a" through wrap(store) beside a live peer holding 2 of 4
// shards, and requires that a reads the 2 free ones and never takes the peer's: why names what
// a could get wrong.
func requireLivePeerKept(t *testing.T, name, why string, wrap func(lease.Store) lease.Store) {
	store := lease.NewMemory()
	f := newFakeStream(name, 4)
	holdAsPeer(t, store, name, "peer", peerLive, f.shards[0].id, f.shards[1].id)
	a := subscribeFake(t, f, fakeOpts(WithLeaseStore(wrap(store)), WithOwner("a"),
		WithBalanceInterval(50*time.Millisecond))...)
	eventually(t, 5*time.Second, "a reads the 2 free shards", func() bool { return reading(a) >= 2 })
	for range 30 {
		time.Sleep(a.cfg.leaseTTL / 10)
		require.Equal(t, 2, reading(a), "a took a live owner's shards: %s", why)
		require.Equal(t, "peer", readLease(t, store, name, f.shards[0].id).Owner)
	}
}

// unreadableBeats is a laggingIndex whose reads of other owners' heartbeat rows fail too.
type unreadableBeats struct{ laggingIndex }

func (u unreadableBeats) Read(ctx context.Context, key string) (lease.Lease, error) {
	if strings.Contains(key, "/"+ownerRowPrefix) && !strings.Contains(key, "/"+ownerRowPrefix+u.owner) {
		return lease.Lease{}, errors.New("heartbeat read failed")
	}
	return u.Store.Read(ctx, key)
}

// TestUnreadableOwnerCountsLive: an owner this subscriber has never read a heartbeat row of,
// whose row a listing lacks and whose row cannot be read either, is taken for live: its shards
// are not taken as orphans (they were, once: a failed read left it unseen, and unseen counted
// as gone).
func TestUnreadableOwnerCountsLive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		requireLivePeerKept(t, "unread", "a could not read its heartbeat row",
			func(store lease.Store) lease.Store { return unreadableBeats{laggingIndex{store, "a"}} })
	})
}

// skewedClock is a lease store that shows owner every expiry as a host whose clock runs ahead
// by skew sees it: earlier by skew.
type skewedClock struct {
	lease.Store
	owner string
	skew  time.Duration
}

func (s skewedClock) shift(l lease.Lease) lease.Lease {
	if !l.Expiry.IsZero() && !pendingAt(l, time.Now()) {
		l.Expiry = l.Expiry.Add(-s.skew)
	}
	return l
}

func (s skewedClock) Read(ctx context.Context, key string) (lease.Lease, error) {
	l, err := s.Store.Read(ctx, key)
	return s.shift(l), err
}

func (s skewedClock) List(ctx context.Context) ([]lease.Lease, error) {
	all, err := s.Store.List(ctx)
	for i := range all {
		all[i] = s.shift(all[i])
	}
	return all, err
}

func (s skewedClock) ListPrefix(ctx context.Context, prefix string) ([]lease.Lease, error) {
	all, err := s.Store.ListPrefix(ctx, prefix)
	for i := range all {
		all[i] = s.shift(all[i])
	}
	return all, err
}

// TestClockAheadTakesNoLiveOwnersShards: a subscriber whose clock runs far ahead of its peer's
// (every expiry it reads looks a minute older) still counts the peer live, because it times the
// peer's silence on its own clock by the heartbeat row's counter, not by the row's expiry.
func TestClockAheadTakesNoLiveOwnersShards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name = "skew"
		store := lease.NewMemory()
		f := newFakeStream(name, 4)
		holdAsPeer(t, store, name, "peer", peerLive, f.shards[0].id, f.shards[1].id)
		a := subscribeFake(t, f, fakeOpts(WithLeaseStore(skewedClock{store, "a", time.Minute}), WithOwner("a"),
			WithBalanceInterval(50*time.Millisecond))...)
		eventually(t, 5*time.Second, "a reads the 2 free shards", func() bool { return reading(a) == 2 })
		for range 30 {
			time.Sleep(a.cfg.leaseTTL / 10)
			require.Equal(t, 2, reading(a), "a took a live owner's shards under clock skew")
		}
		// The peer stops renewing: a takes its shards, once it saw the counter still for reapAfter.
		storeRelease(t, store, name+"/"+ownerRowPrefix+"peer", "peer")
		eventually(t, 5*time.Second, "a reads all 4 once the peer left", func() bool { return reading(a) == 4 })
	})
}

// TestOtherProtocolAppearingStopsSubscriber: the guard against other lease protocols holds for
// as long as a subscriber runs, not only at Subscribe: a kinesub 0.1 instance whose heartbeat
// row appears makes a running subscriber give up its shards and stop with
// ErrIncompatibleLeaseTable.
func TestOtherProtocolAppearingStopsSubscriber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name = "guard"
		store := lease.NewMemory()
		f := newFakeStream(name, 2)
		a := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithBalanceInterval(50*time.Millisecond))...)
		eventually(t, 5*time.Second, "a reads 2", func() bool { return reading(a) == 2 })
		ok, err := store.Acquire(context.Background(), name+"/"+v1OwnerPrefix+"old", "old", time.Hour)
		require.NoError(t, err)
		require.True(t, ok)
		eventually(t, 5*time.Second, "a stopped", func() bool { return a.Err() != nil })
		require.ErrorIs(t, a.Err(), ErrIncompatibleLeaseTable)
		require.Contains(t, a.Err().Error(), `"old"`)
		require.Zero(t, reading(a))
	})
}

// TestSilentOwnerReapedWhenDue: a peer's heartbeat row that stands still is taken over as soon
// as it has stood still for reapAfter since this subscriber first read it, not at the claim
// tick after that, which would add up to a tick (TTL/3) to every crash's failover.
func TestSilentOwnerReapedWhenDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name, ttl = "reapdue", 3 * time.Second
		store := lease.NewMemory()
		f := newFakeStream(name, 2)
		holdAsPeer(t, store, name, "ghost", peerSilent, f.shards[0].id, f.shards[1].id)
		start := time.Now()
		// Claim ticks of a second (TTL/3), as with the defaults' shard sync.
		a := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithLeaseTTL(ttl),
			WithShardSyncInterval(time.Second))...)
		eventually(t, 10*time.Second, "a reads the silent owner's shards", func() bool { return reading(a) == 2 })
		took := time.Since(start)
		require.GreaterOrEqual(t, took, protocol.ReapAfter(ttl), "taken over before the row stood still for reapAfter")
		require.Less(t, took, protocol.ReapAfter(ttl)+100*time.Millisecond, "taken over later than due")
	})
}

// TestOverlookedOwnerReapedWhenDue: a crashed owner whose watchers (the owners before it by
// name) joined after this subscriber first read its last counter is taken over by this
// subscriber when due, though it does not watch it: the watchers time the silence from their
// own first read, later (and here, being peers that only renew, never). The case is a crash
// whose watchers restart soon after it.
func TestOverlookedOwnerReapedWhenDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name, ttl = "overlooked", 3 * time.Second
		ctx := context.Background()
		store := lease.NewMemory()
		xRow := name + "/" + ownerRowPrefix + "x"
		mine := &rowReads{Memory: store, key: xRow}
		f := newFakeStream(name, 4)
		stopX := livePeer(t, store, name, "x")
		holdAsPeer(t, store, name, "x", peerLive, f.shards[0].id)
		holdAsPeer(t, store, name, "b", peerLive, f.shards[1].id)
		holdAsPeer(t, store, name, "c", peerLive, f.shards[2].id)
		// a watches b and c, the next owners by name; x is watched by b and c. a holds its
		// share (one shard of four), so it lists the table only when the change row moves.
		a := subscribeFake(t, f, fakeOpts(WithLeaseStore(mine), WithOwner("a"), WithLeaseTTL(ttl),
			WithShardSyncInterval(time.Second), WithBalanceInterval(time.Hour))...)
		eventually(t, 5*time.Second, "a reads the free shard", func() bool { return reading(a) == 1 })
		// A watcher joining while x renews costs no read of x's row: the listing that shows the
		// joiner shows x's counter moved too.
		livePeer(t, store, name, "v")
		a.changed(ctx)
		time.Sleep(2 * ttl)
		require.Zero(t, mine.n.Load(), "a read the row of a live owner it does not watch")
		stopX()
		crashed := time.Now()
		a.changed(ctx) // a lists the table at its next claim tick: it reads x's last counter
		time.Sleep(time.Second + 100*time.Millisecond)
		synctest.Wait()
		// x's watchers now are w1 and w2, which a first sees after that counter.
		livePeer(t, store, name, "w1")
		livePeer(t, store, name, "w2")
		a.changed(ctx)
		eventually(t, 2*ttl, "x's row taken over", func() bool {
			l, err := store.Read(ctx, xRow)
			return err == nil && l.Owner != "x"
		})
		took := time.Since(crashed)
		require.Less(t, took, time.Second+protocol.ReapAfter(ttl)+200*time.Millisecond,
			"taken over later than a claim tick (a's listing) and reapAfter after the crash")
		eventually(t, 5*time.Second, "a reads x's shard", func() bool { return reading(a) == 2 })
	})
}

// TestPendingLeaseOfSilentThiefWaitsDuringReap: a lease stolen by a thief that then goes
// silent during its wait is read by a peer stealWait after a change-row move made once the
// thief looked silent (TTL/2), not stealWait after the thief's row was taken over: the
// victim's time runs while the thief's silence is established (pending.go).
func TestPendingLeaseOfSilentThiefWaitsDuringReap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name, ttl = "pendingsilent", 3 * time.Second
		store := lease.NewMemory()
		f := newFakeStream(name, 1)
		shard := f.shards[0].id
		holdAsPeer(t, store, name, "victim", peerLive, shard)
		stop := stealAsPeer(t, store, name, shard, "thief")
		a := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithLeaseTTL(ttl),
			WithShardSyncInterval(time.Second))...)
		// a lists the table once the thief's steal is there, and leaves the thief's lease alone.
		eventually(t, 5*time.Second, "a running", func() bool { return len(a.Shards()) == 1 })
		time.Sleep(ttl) // the thief live for a while: a reads nothing
		require.Zero(t, reading(a), "a pending lease of a live thief was read")
		stop() // the thief crashes during its wait
		stopped := time.Now()
		var reaped time.Time
		thiefRow := name + "/" + ownerRowPrefix + "thief"
		eventually(t, 10*time.Second, "a reads the shard", func() bool {
			if l, err := store.Read(context.Background(), thiefRow); err == nil && l.Owner != "thief" && reaped.IsZero() {
				reaped = time.Now()
			}
			return reading(a) == 1
		})
		read := time.Now()
		require.False(t, reaped.IsZero(), "read before the thief's row was taken over")
		t.Logf("thief silent at 0: row taken over after %v, shard read after %v", reaped.Sub(stopped), read.Sub(stopped))
		require.GreaterOrEqual(t, read.Sub(stopped), protocol.StealWait(ttl), "read before the victim could have stopped")
		require.Less(t, read.Sub(reaped), protocol.StealWait(ttl), "the wait for the victim began only at the takeover")
	})
}

// TestPendingLeaseOfStoppedVictimReadAtOnce: a lease stolen pending from an owner that then
// stopped (its heartbeat row gone), by a thief that crashed during its wait, is read as soon as
// the thief's row is taken over: the only reader its wait protected has stopped. (It was read
// stealWait later, which a chain of thieves closing or crashing during their waits paid again
// each time.)
func TestPendingLeaseOfStoppedVictimReadAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name, ttl = "pendingvictim", 3 * time.Second
		ctx := context.Background()
		store := lease.NewMemory()
		f := newFakeStream(name, 1)
		shard := f.shards[0].id
		stopVictim := livePeer(t, store, name, "victim")
		ok, err := store.Acquire(ctx, name+"/"+shard, "victim", 0)
		require.NoError(t, err)
		require.True(t, ok)
		stopThief := stealAsPeer(t, store, name, shard, "thief")
		l := readLease(t, store, name, shard)
		v, noted := victimOf(l, time.Now())
		require.True(t, noted, "the steal noted no victim: %q", l.Note)
		require.Equal(t, lease.Tenure{Owner: "victim", Counter: l.Counter - 1}, v)
		// The victim stops and its row goes; then the thief crashes during its wait.
		stopVictim()
		victimRow := name + "/" + ownerRowPrefix + "victim"
		hb, err := store.Read(ctx, victimRow)
		require.NoError(t, err)
		_, err = store.Release(ctx, victimRow, hb.Tenure())
		require.NoError(t, err)
		stopThief()
		stopped := time.Now()
		a := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithLeaseTTL(ttl),
			WithShardSyncInterval(time.Second))...)
		var reaped time.Time
		thiefRow := name + "/" + ownerRowPrefix + "thief"
		eventually(t, 10*time.Second, "a reads the shard", func() bool {
			if l, err := store.Read(ctx, thiefRow); err == nil && l.Owner != "thief" && reaped.IsZero() {
				reaped = time.Now()
			}
			return reading(a) == 1
		})
		read := time.Now()
		require.False(t, reaped.IsZero(), "read before the thief's row was taken over")
		t.Logf("thief silent at 0: row taken over after %v, shard read after %v", reaped.Sub(stopped), read.Sub(stopped))
		require.Less(t, read.Sub(reaped), protocol.StealWait(ttl)/3, "a waited for a victim that had stopped")
		require.Equal(t, a.cfg.owner, readLease(t, store, name, shard).Owner)
	})
}

// rowReads is a lease store that counts the reads of one row.
type rowReads struct {
	*lease.Memory
	key string
	n   atomic.Int64
}

func (r *rowReads) Read(ctx context.Context, key string) (lease.Lease, error) {
	if key == r.key {
		r.n.Add(1)
	}
	return r.Memory.Read(ctx, key)
}
