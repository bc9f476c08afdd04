// Package leasetest is the conformance suite every lease.Store must pass.
//
// A store's tests call Run with a function that returns a new, empty store:
//
//	func TestMemory(t *testing.T) {
//		leasetest.Run(t, func(t *testing.T) lease.Store { return lease.NewMemory() })
//	}
//
// The suite uses lease TTLs of tens of milliseconds and runs in a few seconds, so the store
// under test must answer well within that (a local emulator does).
package leasetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

const (
	// short is the TTL of leases the suite lets expire; it sleeps expire before expecting them
	// to have lapsed.
	short  = 50 * time.Millisecond
	expire = 2 * short
	// long outlives any subtest: such a lease never lapses on its own.
	long = time.Minute
	// timeout bounds each subtest's store calls.
	timeout = 20 * time.Second
)

// Run runs the conformance subtests. newStore is called once per subtest and must return a
// new, empty store; it may register cleanups with t. Every method of lease.Store is held to
// its contract, CheckpointOrdered, StealNote and ListPrefix as well as the others.
func Run(t *testing.T, newStore func(t *testing.T) lease.Store) {
	type subtest struct {
		name string
		test func(t *testing.T, s lease.Store)
	}
	tests := []subtest{
		{"ReadAbsent", testReadAbsent},
		{"LiveLeaseIsExclusive", testLiveLeaseIsExclusive},
		{"ExpiredLeaseIsAcquiredAndOldOwnerFenced", testExpiredLeaseFencesOldOwner},
		{"RenewExtends", testRenewExtends},
		{"WritesNeedOwnership", testWritesNeedOwnership},
		{"WritesNeedTheHolding", testWritesNeedTheHolding},
		{"CheckpointSurvivesRelease", testCheckpointSurvivesRelease},
		{"ReleaseByNonOwnerChangesNothing", testReleaseByNonOwner},
		{"ReleasedLeaseIsAcquiredAtOnce", testReleasedLeaseAcquiredAtOnce},
		{"LeaseWithoutTTL", testLeaseWithoutTTL},
		{"ShardEndRoundTrips", testShardEnd},
		{"List", testList},
		{"ListPrefix", testListPrefix},
		{"ConcurrentAcquireHasOneWinner", testConcurrentAcquire},
		{"CountersMoveWithTheHolder", testCounters},
		{"StealWithCurrentCounterFencesOldOwner", testSteal},
		{"StaleStealFails", testStaleSteal},
		{"DeleteWithCurrentCounter", testDelete},
		{"StaleDeleteFails", testStaleDelete},
		{"DeleteAbsent", testDeleteAbsent},
		{"DeleteSparesHeldLeases", testDeleteSparesHeld},
		{"DeletedLeaseStartsAfresh", testDeletedLeaseStartsAfresh},
		{"InvalidArguments", testInvalidArguments},
		{"SubSequenceRoundTrips", testSubSequence},
		{"RenewNeverShortens", testRenewNeverShortens},
		{"CheckpointsInOrder", testCheckpointsInOrder},
		{"StealNote", testStealNote},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.test(t, newStore(t))
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return c
}

// key returns a lease key unique to the running subtest.
func key(t *testing.T, suffix string) string {
	return t.Name() + "/shardId-" + suffix
}

func acquire(t *testing.T, s lease.Store, key, owner string, ttl time.Duration) bool {
	t.Helper()
	ok, err := s.Acquire(ctx(t), key, owner, ttl)
	require.NoError(t, err, "Acquire(%q, %q)", key, owner)
	return ok
}

// hold acquires key for owner and returns its holding.
func hold(t *testing.T, s lease.Store, key, owner string, ttl time.Duration) lease.Tenure {
	t.Helper()
	require.True(t, acquire(t, s, key, owner, ttl), "Acquire(%q, %q)", key, owner)
	l := read(t, s, key)
	require.Equal(t, owner, l.Owner)
	return l.Tenure()
}

func read(t *testing.T, s lease.Store, key string) lease.Lease {
	t.Helper()
	l, err := s.Read(ctx(t), key)
	require.NoError(t, err, "Read(%q)", key)
	return l
}

func renew(t *testing.T, s lease.Store, key string, h lease.Tenure, ttl time.Duration) bool {
	t.Helper()
	ok, err := s.Renew(ctx(t), key, h, ttl)
	require.NoError(t, err, "Renew(%q, %+v)", key, h)
	return ok
}

func checkpoint(t *testing.T, s lease.Store, key string, h lease.Tenure, seq string) bool {
	t.Helper()
	ok, err := s.Checkpoint(ctx(t), key, h, lease.Checkpoint{Sequence: seq})
	require.NoError(t, err, "Checkpoint(%q, %+v, %q)", key, h, seq)
	return ok
}

func release(t *testing.T, s lease.Store, key string, h lease.Tenure) bool {
	t.Helper()
	ok, err := s.Release(ctx(t), key, h)
	require.NoError(t, err, "Release(%q, %+v)", key, h)
	return ok
}

func steal(t *testing.T, s lease.Store, key, owner string, counter int64, ttl time.Duration) bool {
	t.Helper()
	ok, err := s.Steal(ctx(t), key, owner, counter, ttl)
	require.NoError(t, err, "Steal(%q, %q, %d)", key, owner, counter)
	return ok
}

// seq is the sequence number of l's checkpoint.
func seq(l lease.Lease) string { return l.Checkpoint.Sequence }

func testReadAbsent(t *testing.T, s lease.Store) {
	k := key(t, "0")
	assert.Equal(t, lease.Lease{Key: k}, read(t, s, k))
}

func testLiveLeaseIsExclusive(t *testing.T, s lease.Store) {
	k := key(t, "0")
	before := time.Now()
	require.True(t, acquire(t, s, k, "a", long), "first Acquire of a free lease")
	assert.False(t, acquire(t, s, k, "b", long), "Acquire of a lease another owner holds")
	assert.True(t, acquire(t, s, k, "a", long), "Acquire by the owner again")

	l := read(t, s, k)
	assert.Equal(t, "a", l.Owner)
	assert.True(t, l.Held(time.Now()), "lease held after Acquire: %+v", l)
	assert.WithinRange(t, l.Expiry, before.Add(long-time.Second), time.Now().Add(long+time.Second))
}

func testExpiredLeaseFencesOldOwner(t *testing.T, s lease.Store) {
	k := key(t, "0")
	a := hold(t, s, k, "a", short)
	time.Sleep(expire)
	require.True(t, acquire(t, s, k, "b", long), "Acquire of an expired lease")

	assert.False(t, renew(t, s, k, a, long), "Renew by the fenced owner")
	assert.False(t, checkpoint(t, s, k, a, "100"), "Checkpoint by the fenced owner")
	assert.False(t, release(t, s, k, a), "Release by the fenced owner")
	assert.False(t, acquire(t, s, k, "a", long), "Acquire by the fenced owner while b holds it")
	l := read(t, s, k)
	assert.Equal(t, "b", l.Owner)
	assert.Empty(t, seq(l), "the fenced owner's checkpoint was written")
}

func testRenewExtends(t *testing.T, s lease.Store) {
	k := key(t, "0")
	ttl := 2 * short
	start := time.Now()
	a := hold(t, s, k, "a", ttl)
	first := read(t, s, k).Expiry

	time.Sleep(ttl / 2)
	require.True(t, renew(t, s, k, a, long), "Renew before expiry")
	renewed := read(t, s, k)
	assert.True(t, renewed.Expiry.After(first), "Renew did not move the expiry: %v, then %v", first, renewed.Expiry)
	assert.Equal(t, a.Counter, renewed.Counter, "Renew changed the counter")

	time.Sleep(time.Until(start.Add(ttl + short))) // past the original expiry
	assert.False(t, acquire(t, s, k, "b", long), "Acquire of a renewed lease after its original TTL")
	assert.Equal(t, "a", read(t, s, k).Owner)
	assert.True(t, renew(t, s, k, a, long), "Renew again, with the same holding")
}

func testWritesNeedOwnership(t *testing.T, s lease.Store) {
	k := key(t, "0")
	none := lease.Tenure{Owner: "a", Counter: 0}
	assert.False(t, renew(t, s, k, none, long), "Renew of an absent lease")
	assert.False(t, checkpoint(t, s, k, none, "100"), "Checkpoint of an absent lease")
	assert.False(t, release(t, s, k, none), "Release of an absent lease")
	assert.Equal(t, lease.Lease{Key: k}, read(t, s, k), "failed writes created the lease")

	a := hold(t, s, k, "a", long)
	b := lease.Tenure{Owner: "b", Counter: a.Counter}
	assert.False(t, renew(t, s, k, b, long), "Renew by a non-owner")
	assert.False(t, checkpoint(t, s, k, b, "100"), "Checkpoint by a non-owner")
	assert.Empty(t, seq(read(t, s, k)))
}

// testWritesNeedTheHolding: a write is conditional on the holding it was made for, not only
// on the owner's name: after the owner lost the lease and took it back, writes with what it
// held before report false and change nothing, whatever their order with the new holding's.
func testWritesNeedTheHolding(t *testing.T, s lease.Store) {
	k := key(t, "0")
	first := hold(t, s, k, "a", long)
	require.True(t, checkpoint(t, s, k, first, "100"))
	require.True(t, steal(t, s, k, "b", read(t, s, k).Counter, long), "b takes the lease over")
	require.True(t, steal(t, s, k, "a", read(t, s, k).Counter, long), "a takes it back")
	second := read(t, s, k).Tenure()
	require.Equal(t, "a", second.Owner)
	require.Greater(t, second.Counter, first.Counter)
	require.True(t, checkpoint(t, s, k, second, "300"))

	// A write of the first holding, in flight all along, lands now.
	assert.False(t, checkpoint(t, s, k, first, "200"), "Checkpoint of an earlier holding by the same owner")
	assert.False(t, renew(t, s, k, first, long), "Renew of an earlier holding")
	assert.False(t, release(t, s, k, first), "Release of an earlier holding")
	l := read(t, s, k)
	assert.Equal(t, "300", seq(l), "the checkpoint moved back")
	assert.Equal(t, second, l.Tenure(), "the holding changed")
	assert.True(t, checkpoint(t, s, k, second, "400"), "Checkpoint of the current holding")
}

func testCheckpointSurvivesRelease(t *testing.T, s lease.Store) {
	const s1 = "49590338271490256608559692538361571095921575989136588898"
	const s2 = "49590338271490256608559692538361571095921575989136588899"
	k := key(t, "0")
	a := hold(t, s, k, "a", long)
	require.True(t, checkpoint(t, s, k, a, s1))
	assert.Equal(t, a.Counter, read(t, s, k).Counter, "Checkpoint changed the counter")
	require.True(t, release(t, s, k, a))

	l := read(t, s, k)
	assert.Equal(t, s1, seq(l))
	assert.Empty(t, l.Owner, "owner after Release")
	assert.Greater(t, l.Counter, a.Counter, "counter after Release")
	assert.True(t, l.Expiry.IsZero(), "expiry after Release: %v", l.Expiry)
	assert.False(t, l.Held(time.Now()))

	b := hold(t, s, k, "b", long)
	assert.Equal(t, s1, seq(read(t, s, k)), "checkpoint after another owner acquired the lease")
	require.True(t, checkpoint(t, s, k, b, s2))
	assert.Equal(t, s2, seq(read(t, s, k)))
}

func testReleaseByNonOwner(t *testing.T, s lease.Store) {
	k := key(t, "0")
	a := hold(t, s, k, "a", long)
	require.True(t, checkpoint(t, s, k, a, "100"))
	before := read(t, s, k)
	assert.False(t, release(t, s, k, lease.Tenure{Owner: "b", Counter: a.Counter}), "Release by a non-owner")
	assert.Equal(t, before, read(t, s, k), "Release by a non-owner changed the lease")
	assert.False(t, acquire(t, s, k, "b", long), "Acquire after a non-owner's Release")
}

func testReleasedLeaseAcquiredAtOnce(t *testing.T, s lease.Store) {
	k := key(t, "0")
	require.True(t, release(t, s, k, hold(t, s, k, "a", long)))
	assert.True(t, acquire(t, s, k, "b", long), "Acquire right after Release")
	assert.Equal(t, "b", read(t, s, k).Owner)
}

// testLeaseWithoutTTL: a lease taken with a zero TTL never lapses: nobody acquires it however
// long it is left; it is freed by Release, and taken over by Steal.
func testLeaseWithoutTTL(t *testing.T, s lease.Store) {
	k := key(t, "0")
	a := hold(t, s, k, "a", 0)
	l := read(t, s, k)
	assert.True(t, l.Expiry.IsZero(), "expiry of a lease taken without a TTL: %v", l.Expiry)
	assert.True(t, l.Held(time.Now().Add(24*time.Hour)), "held, whenever")
	time.Sleep(expire)
	assert.False(t, acquire(t, s, k, "b", long), "Acquire of a lease without a TTL that another owner holds")
	ok, err := s.Delete(ctx(t), k, a.Counter)
	require.NoError(t, err)
	assert.False(t, ok, "Delete of a lease held without a TTL")
	require.True(t, checkpoint(t, s, k, a, "100"))

	require.True(t, steal(t, s, k, "b", a.Counter, 0), "Steal of a lease without a TTL")
	b := read(t, s, k).Tenure()
	assert.Equal(t, "b", b.Owner)
	assert.False(t, checkpoint(t, s, k, a, "200"), "Checkpoint by the owner it was stolen from")
	require.True(t, release(t, s, k, b))
	assert.True(t, acquire(t, s, k, "c", long), "Acquire after Release")
	l = read(t, s, k)
	assert.Equal(t, "100", seq(l))
	assert.False(t, l.Expiry.IsZero(), "a TTL again")

	// A lease held with a TTL becomes one without when its owner acquires it so, and back.
	require.True(t, acquire(t, s, k, "c", 0))
	assert.True(t, read(t, s, k).Expiry.IsZero())
	require.True(t, acquire(t, s, k, "c", long))
	assert.False(t, read(t, s, k).Expiry.IsZero())
}

func testShardEnd(t *testing.T, s lease.Store) {
	k := key(t, "0")
	a := hold(t, s, k, "a", long)
	require.True(t, checkpoint(t, s, k, a, lease.ShardEnd))
	require.True(t, release(t, s, k, a))
	assert.Equal(t, lease.ShardEnd, seq(read(t, s, k)))
}

func testList(t *testing.T, s lease.Store) {
	empty, err := s.List(ctx(t))
	require.NoError(t, err)
	assert.Empty(t, empty, "List of a new store")

	k0, k1, k2 := key(t, "0"), key(t, "1"), key(t, "2")
	require.True(t, checkpoint(t, s, k0, hold(t, s, k0, "a", long), "100"))
	hold(t, s, k1, "b", long)
	a2 := hold(t, s, k2, "a", long)
	require.True(t, checkpoint(t, s, k2, a2, lease.ShardEnd))
	require.True(t, release(t, s, k2, a2))

	got, err := s.List(ctx(t))
	require.NoError(t, err)
	byKey := map[string]lease.Lease{}
	for _, l := range got {
		byKey[l.Key] = l
	}
	assert.Len(t, got, 3)
	assert.Len(t, byKey, 3, "List returned a key twice: %+v", got)
	for _, want := range []struct{ key, owner, checkpoint string }{
		{k0, "a", "100"},
		{k1, "b", ""},
		{k2, "", lease.ShardEnd},
	} {
		l, ok := byKey[want.key]
		if !assert.True(t, ok, "List lacks %q", want.key) {
			continue
		}
		assert.Equal(t, want.owner, l.Owner, "owner of %q", want.key)
		assert.Equal(t, want.checkpoint, seq(l), "checkpoint of %q", want.key)
		assert.Equal(t, read(t, s, want.key), l, "List and Read disagree on %q", want.key)
	}
}

// testListPrefix checks that ListPrefix lists exactly the keys under a prefix, as List shows
// them.
func testListPrefix(t *testing.T, s lease.Store) {
	_, err := s.ListPrefix(ctx(t), "")
	require.ErrorIs(t, err, lease.ErrInvalidArgument, "ListPrefix with an empty prefix")
	base := t.Name()
	empty, err := s.ListPrefix(ctx(t), base+"/a/")
	require.NoError(t, err)
	assert.Empty(t, empty, "ListPrefix of a new store")

	// Two streams whose names share a prefix, and a row whose key is the bare stream name.
	a0, a1, ab0, bare := base+"/a/shardId-0", base+"/a/~owner/x", base+"/ab/shardId-0", base+"/a"
	held := map[string]lease.Tenure{}
	for _, k := range []string{a0, a1, ab0, bare} {
		held[k] = hold(t, s, k, "o", long)
	}
	require.True(t, checkpoint(t, s, a0, held[a0], "100"))
	require.True(t, release(t, s, a1, held[a1]))

	got, err := s.ListPrefix(ctx(t), base+"/a/")
	require.NoError(t, err)
	var keys []string
	for _, l := range got {
		keys = append(keys, l.Key)
		assert.Equal(t, read(t, s, l.Key), l, "ListPrefix and Read disagree on %q", l.Key)
	}
	assert.Equal(t, []string{a0, a1}, keys, "keys listed under %q, in order", base+"/a/")
	got, err = s.ListPrefix(ctx(t), base+"/ab/")
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, ab0, got[0].Key)
}

func testConcurrentAcquire(t *testing.T, s lease.Store) {
	const n = 8
	k := key(t, "0")
	c := ctx(t)
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		won     = make([]bool, n)
		errs    = make([]error, n)
		winners []string
	)
	for i := range n {
		wg.Go(func() {
			<-start
			won[i], errs[i] = s.Acquire(c, k, fmt.Sprintf("owner-%d", i), long)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i], "owner-%d", i)
		if won[i] {
			winners = append(winners, fmt.Sprintf("owner-%d", i))
		}
	}
	require.Len(t, winners, 1, "winners of %d racing Acquires", n)
	l := read(t, s, k)
	assert.Equal(t, winners[0], l.Owner)
	assert.Equal(t, int64(1), l.Counter, "counter after one successful Acquire")
}

// testCounters: every write that changes the holder adds one to the counter, and nothing
// else changes it: renewals and checkpoints leave it, so a holding stays the same until it
// ends, and failed writes change nothing.
func testCounters(t *testing.T, s lease.Store) {
	k := key(t, "0")
	var a, b lease.Tenure
	var a0 int64 // the counter as a saw it while it held the lease
	steps := []struct {
		name  string
		do    func() bool // reports whether the write succeeded
		want  bool
		bumps bool // a successful write adds one to the counter
	}{
		{"Acquire a", func() bool { a = hold(t, s, k, "a", long); return true }, true, true},
		{"Renew a", func() bool { return renew(t, s, k, a, long) }, true, false},
		{"Checkpoint a", func() bool { return checkpoint(t, s, k, a, "1") }, true, false},
		{"Acquire b", func() bool { return acquire(t, s, k, "b", long) }, false, false},
		{"Renew b", func() bool { return renew(t, s, k, lease.Tenure{Owner: "b", Counter: a.Counter}, long) }, false, false},
		{"Checkpoint b", func() bool { return checkpoint(t, s, k, lease.Tenure{Owner: "b", Counter: a.Counter}, "2") }, false, false},
		{"Release b", func() bool { return release(t, s, k, lease.Tenure{Owner: "b", Counter: a.Counter}) }, false, false},
		{"Acquire a again", func() bool { a0 = read(t, s, k).Counter; return acquire(t, s, k, "a", long) }, true, true},
		{"Release a with its first holding", func() bool { return release(t, s, k, a) }, false, false},
		{"Release a", func() bool { return release(t, s, k, read(t, s, k).Tenure()) }, true, true},
		{"Acquire b after release", func() bool { b = hold(t, s, k, "b", long); return true }, true, true},
		{"Steal with a stale counter", func() bool { return steal(t, s, k, "a", a0, long) }, false, false},
		{"Steal with the current counter", func() bool { return steal(t, s, k, "a", b.Counter, long) }, true, true},
		{"Renew by the fenced b", func() bool { return renew(t, s, k, b, long) }, false, false},
	}
	prev := read(t, s, k).Counter
	require.Zero(t, prev, "counter of an absent lease")
	for _, st := range steps {
		ok := st.do()
		require.Equal(t, st.want, ok, "%s succeeded", st.name)
		got := read(t, s, k).Counter
		if ok && st.bumps {
			assert.Equal(t, prev+1, got, "counter after %s", st.name)
		} else {
			assert.Equal(t, prev, got, "counter after %s", st.name)
		}
		prev = got
	}
}

func testSteal(t *testing.T, s lease.Store) {
	k := key(t, "0")
	a := hold(t, s, k, "a", long)
	require.True(t, checkpoint(t, s, k, a, "100"))
	before := read(t, s, k)
	require.True(t, steal(t, s, k, "b", before.Counter, long), "Steal with the current counter")

	after := read(t, s, k)
	assert.Equal(t, "b", after.Owner)
	assert.Equal(t, before.Counter+1, after.Counter)
	assert.True(t, after.Held(time.Now()))
	assert.Equal(t, "100", seq(after), "Steal kept the checkpoint")

	assert.False(t, renew(t, s, k, a, long), "Renew by the fenced owner")
	assert.False(t, checkpoint(t, s, k, a, "200"), "Checkpoint by the fenced owner")
	assert.False(t, acquire(t, s, k, "a", long), "Acquire by the fenced owner")
	assert.True(t, checkpoint(t, s, k, after.Tenure(), "200"), "Checkpoint by the new owner")
	assert.Equal(t, "200", seq(read(t, s, k)))
}

func testStaleSteal(t *testing.T, s lease.Store) {
	k := key(t, "0")
	assert.False(t, steal(t, s, k, "b", 0, long), "Steal of an absent lease")
	assert.Equal(t, lease.Lease{Key: k}, read(t, s, k), "a failed Steal created the lease")

	seen := hold(t, s, k, "a", long).Counter
	require.True(t, release(t, s, k, read(t, s, k).Tenure()))
	a := hold(t, s, k, "a", long)
	before := read(t, s, k)

	assert.False(t, steal(t, s, k, "b", seen, long), "Steal with a stale counter")
	assert.False(t, steal(t, s, k, "b", before.Counter+1, long), "Steal with a future counter")
	assert.Equal(t, before, read(t, s, k), "a failed Steal changed the lease")
	assert.True(t, renew(t, s, k, a, long), "Renew after failed Steals")
}

func del(t *testing.T, s lease.Store, key string, counter int64) bool {
	t.Helper()
	ok, err := s.Delete(ctx(t), key, counter)
	require.NoError(t, err, "Delete(%q, %d)", key, counter)
	return ok
}

func list(t *testing.T, s lease.Store) map[string]lease.Lease {
	t.Helper()
	ls, err := s.List(ctx(t))
	require.NoError(t, err)
	byKey := map[string]lease.Lease{}
	for _, l := range ls {
		byKey[l.Key] = l
	}
	return byKey
}

func testDelete(t *testing.T, s lease.Store) {
	k, other := key(t, "0"), key(t, "1")
	a := hold(t, s, k, "a", long)
	require.True(t, checkpoint(t, s, k, a, lease.ShardEnd))
	require.True(t, release(t, s, k, a))
	hold(t, s, other, "b", long)
	before := read(t, s, other)

	require.True(t, del(t, s, k, read(t, s, k).Counter), "Delete with the current counter")
	assert.Equal(t, lease.Lease{Key: k}, read(t, s, k), "Read after Delete")
	all := list(t, s)
	assert.NotContains(t, all, k, "List after Delete")
	assert.Equal(t, before, all[other], "Delete changed another lease")
	assert.False(t, del(t, s, k, 0), "Delete of the deleted lease")
}

func testStaleDelete(t *testing.T, s lease.Store) {
	k := key(t, "0")
	a := hold(t, s, k, "a", long)
	require.True(t, checkpoint(t, s, k, a, lease.ShardEnd))
	require.True(t, release(t, s, k, a))
	before := read(t, s, k)

	assert.False(t, del(t, s, k, a.Counter), "Delete with a stale counter")
	assert.False(t, del(t, s, k, before.Counter+1), "Delete with a future counter")
	assert.False(t, del(t, s, k, 0), "Delete with counter 0 of an existing lease")
	assert.Equal(t, before, read(t, s, k), "a failed Delete changed the lease")
	assert.True(t, acquire(t, s, k, "b", long), "Acquire after failed Deletes")
	assert.Equal(t, lease.ShardEnd, seq(read(t, s, k)))
}

func testDeleteAbsent(t *testing.T, s lease.Store) {
	k := key(t, "0")
	assert.False(t, del(t, s, k, 0), "Delete of an absent lease, counter 0")
	assert.False(t, del(t, s, k, 1), "Delete of an absent lease, counter 1")
	assert.Equal(t, lease.Lease{Key: k}, read(t, s, k), "a failed Delete created the lease")
	assert.Empty(t, list(t, s), "a failed Delete created a lease")
}

// Delete never removes a lease that someone holds; it removes one whose holder let it expire,
// and the holder's writes do not bring it back.
func testDeleteSparesHeld(t *testing.T, s lease.Store) {
	k := key(t, "0")
	a := hold(t, s, k, "a", short)
	require.True(t, checkpoint(t, s, k, a, "100"))
	require.True(t, renew(t, s, k, a, 2*expire))
	assert.False(t, del(t, s, k, a.Counter), "Delete of a held lease")
	assert.Equal(t, "a", read(t, s, k).Owner)

	time.Sleep(3 * expire)
	require.True(t, del(t, s, k, a.Counter), "Delete of an expired lease")
	assert.False(t, renew(t, s, k, a, long), "Renew by the owner of a deleted lease")
	assert.False(t, checkpoint(t, s, k, a, "200"), "Checkpoint by the owner of a deleted lease")
	assert.False(t, release(t, s, k, a), "Release by the owner of a deleted lease")
	assert.Equal(t, lease.Lease{Key: k}, read(t, s, k), "writes after Delete recreated the lease")
}

// A deleted key is acquired again from scratch: a new owner, counter 1, no checkpoint.
func testDeletedLeaseStartsAfresh(t *testing.T, s lease.Store) {
	k := key(t, "0")
	a := hold(t, s, k, "a", long)
	require.True(t, checkpoint(t, s, k, a, lease.ShardEnd))
	require.True(t, release(t, s, k, a))
	old := read(t, s, k)
	require.Greater(t, old.Counter, int64(1))
	require.True(t, del(t, s, k, old.Counter))

	require.True(t, acquire(t, s, k, "b", long), "Acquire of a deleted lease")
	l := read(t, s, k)
	assert.Equal(t, "b", l.Owner)
	assert.Equal(t, int64(1), l.Counter, "counter of a lease acquired after Delete")
	assert.Empty(t, seq(l), "checkpoint of a lease acquired after Delete")
	assert.True(t, l.Held(time.Now()))
	assert.False(t, acquire(t, s, k, "a", long), "Acquire by the old owner while b holds it")
}

func testInvalidArguments(t *testing.T, s lease.Store) {
	k := key(t, "0")
	c := ctx(t)
	boolCall := func(ok bool, err error) error {
		if ok {
			return errors.New("reported success")
		}
		return err
	}
	a := lease.Tenure{Owner: "a", Counter: 1}
	cp := lease.Checkpoint{Sequence: "1"}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"Acquire empty key", func() error { return boolCall(s.Acquire(c, "", "a", long)) }},
		{"Acquire empty owner", func() error { return boolCall(s.Acquire(c, k, "", long)) }},
		{"Acquire negative ttl", func() error { return boolCall(s.Acquire(c, k, "a", -time.Second)) }},
		{"Steal empty key", func() error { return boolCall(s.Steal(c, "", "a", 0, long)) }},
		{"Steal empty owner", func() error { return boolCall(s.Steal(c, k, "", 0, long)) }},
		{"Steal negative ttl", func() error { return boolCall(s.Steal(c, k, "a", 0, -time.Second)) }},
		{"Renew empty key", func() error { return boolCall(s.Renew(c, "", a, long)) }},
		{"Renew empty owner", func() error { return boolCall(s.Renew(c, k, lease.Tenure{Counter: 1}, long)) }},
		{"Renew zero ttl", func() error { return boolCall(s.Renew(c, k, a, 0)) }},
		{"Renew negative ttl", func() error { return boolCall(s.Renew(c, k, a, -time.Second)) }},
		{"Checkpoint empty key", func() error { return boolCall(s.Checkpoint(c, "", a, cp)) }},
		{"Checkpoint empty owner", func() error { return boolCall(s.Checkpoint(c, k, lease.Tenure{Counter: 1}, cp)) }},
		{"Checkpoint empty sequence", func() error { return boolCall(s.Checkpoint(c, k, a, lease.Checkpoint{})) }},
		{"Checkpoint negative sub-sequence", func() error {
			return boolCall(s.Checkpoint(c, k, a, lease.Checkpoint{Sequence: "1", SubSequence: -1}))
		}},
		{"Release empty key", func() error { return boolCall(s.Release(c, "", a)) }},
		{"Release empty owner", func() error { return boolCall(s.Release(c, k, lease.Tenure{Counter: 1})) }},
		{"Read empty key", func() error { _, err := s.Read(c, ""); return err }},
		{"Delete empty key", func() error { return boolCall(s.Delete(c, "", 0)) }},
	} {
		err := tc.call()
		assert.ErrorIs(t, err, lease.ErrInvalidArgument, tc.name)
	}

	// A rejected call writes nothing, so the lease is still free.
	h := hold(t, s, k, "a", long)
	assert.Equal(t, int64(1), h.Counter, "counter after invalid calls and one Acquire")
	assert.ErrorIs(t, boolCall(s.Checkpoint(c, k, h, lease.Checkpoint{})), lease.ErrInvalidArgument, "Checkpoint empty sequence by the owner")
	assert.ErrorIs(t, boolCall(s.Checkpoint(c, k, h, lease.Checkpoint{Sequence: "1", SubSequence: -1})), lease.ErrInvalidArgument,
		"Checkpoint negative sub-sequence by the owner")
	assert.ErrorIs(t, boolCall(s.Renew(c, k, h, 0)), lease.ErrInvalidArgument, "Renew zero ttl by the owner")
	l := read(t, s, k)
	assert.Equal(t, h, l.Tenure(), "holding after invalid calls by the owner")
	assert.Empty(t, seq(l))
}
