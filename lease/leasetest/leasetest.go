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
// new, empty store; it may register cleanups with t.
func Run(t *testing.T, newStore func(t *testing.T) lease.Store) {
	for _, tc := range []struct {
		name string
		test func(t *testing.T, s lease.Store)
	}{
		{"ReadAbsent", testReadAbsent},
		{"LiveLeaseIsExclusive", testLiveLeaseIsExclusive},
		{"ExpiredLeaseIsAcquiredAndOldOwnerFenced", testExpiredLeaseFencesOldOwner},
		{"RenewExtends", testRenewExtends},
		{"WritesNeedOwnership", testWritesNeedOwnership},
		{"CheckpointSurvivesRelease", testCheckpointSurvivesRelease},
		{"ReleaseByNonOwnerChangesNothing", testReleaseByNonOwner},
		{"ReleasedLeaseIsAcquiredAtOnce", testReleasedLeaseAcquiredAtOnce},
		{"ShardEndRoundTrips", testShardEnd},
		{"List", testList},
		{"ListPrefix", testListPrefix},
		{"ConcurrentAcquireHasOneWinner", testConcurrentAcquire},
		{"CountersOnlyGrow", testCountersOnlyGrow},
		{"StealWithCurrentCounterFencesOldOwner", testSteal},
		{"StaleStealFails", testStaleSteal},
		{"DeleteWithCurrentCounter", testDelete},
		{"StaleDeleteFails", testStaleDelete},
		{"DeleteAbsent", testDeleteAbsent},
		{"DeleteFencesHolder", testDeleteFencesHolder},
		{"DeletedLeaseStartsAfresh", testDeletedLeaseStartsAfresh},
		{"InvalidArguments", testInvalidArguments},
		{"SubSequenceRoundTrips", testSubSequence},
	} {
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

func read(t *testing.T, s lease.Store, key string) lease.Lease {
	t.Helper()
	l, err := s.Read(ctx(t), key)
	require.NoError(t, err, "Read(%q)", key)
	return l
}

func renew(t *testing.T, s lease.Store, key, owner string, ttl time.Duration) bool {
	t.Helper()
	ok, err := s.Renew(ctx(t), key, owner, ttl)
	require.NoError(t, err, "Renew(%q, %q)", key, owner)
	return ok
}

func checkpoint(t *testing.T, s lease.Store, key, owner, seq string) bool {
	t.Helper()
	ok, err := s.Checkpoint(ctx(t), key, owner, seq, 0)
	require.NoError(t, err, "Checkpoint(%q, %q, %q)", key, owner, seq)
	return ok
}

func release(t *testing.T, s lease.Store, key, owner string) {
	t.Helper()
	require.NoError(t, s.Release(ctx(t), key, owner), "Release(%q, %q)", key, owner)
}

func steal(t *testing.T, s lease.Store, key, owner string, counter int64, ttl time.Duration) bool {
	t.Helper()
	ok, err := s.Steal(ctx(t), key, owner, counter, ttl)
	require.NoError(t, err, "Steal(%q, %q, %d)", key, owner, counter)
	return ok
}

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
	require.True(t, acquire(t, s, k, "a", short))
	time.Sleep(expire)
	require.True(t, acquire(t, s, k, "b", long), "Acquire of an expired lease")

	assert.False(t, renew(t, s, k, "a", long), "Renew by the fenced owner")
	assert.False(t, checkpoint(t, s, k, "a", "100"), "Checkpoint by the fenced owner")
	assert.False(t, acquire(t, s, k, "a", long), "Acquire by the fenced owner while b holds it")
	l := read(t, s, k)
	assert.Equal(t, "b", l.Owner)
	assert.Empty(t, l.Checkpoint, "the fenced owner's checkpoint was written")
}

func testRenewExtends(t *testing.T, s lease.Store) {
	k := key(t, "0")
	ttl := 2 * short
	start := time.Now()
	require.True(t, acquire(t, s, k, "a", ttl))
	first := read(t, s, k).Expiry

	time.Sleep(ttl / 2)
	require.True(t, renew(t, s, k, "a", long), "Renew before expiry")
	renewed := read(t, s, k)
	assert.True(t, renewed.Expiry.After(first), "Renew did not move the expiry: %v, then %v", first, renewed.Expiry)

	time.Sleep(time.Until(start.Add(ttl + short))) // past the original expiry
	assert.False(t, acquire(t, s, k, "b", long), "Acquire of a renewed lease after its original TTL")
	assert.Equal(t, "a", read(t, s, k).Owner)
	assert.True(t, renew(t, s, k, "a", long), "Renew again")
}

func testWritesNeedOwnership(t *testing.T, s lease.Store) {
	k := key(t, "0")
	assert.False(t, renew(t, s, k, "a", long), "Renew of an absent lease")
	assert.False(t, checkpoint(t, s, k, "a", "100"), "Checkpoint of an absent lease")
	release(t, s, k, "a")
	assert.Equal(t, lease.Lease{Key: k}, read(t, s, k), "failed writes created the lease")

	require.True(t, acquire(t, s, k, "a", long))
	assert.False(t, renew(t, s, k, "b", long), "Renew by a non-owner")
	assert.False(t, checkpoint(t, s, k, "b", "100"), "Checkpoint by a non-owner")
	assert.Empty(t, read(t, s, k).Checkpoint)
}

func testCheckpointSurvivesRelease(t *testing.T, s lease.Store) {
	k := key(t, "0")
	require.True(t, acquire(t, s, k, "a", long))
	require.True(t, checkpoint(t, s, k, "a", "49590338271490256608559692538361571095921575989136588898"))
	release(t, s, k, "a")

	l := read(t, s, k)
	assert.Equal(t, "49590338271490256608559692538361571095921575989136588898", l.Checkpoint)
	assert.Empty(t, l.Owner, "owner after Release")
	assert.True(t, l.Expiry.IsZero(), "expiry after Release: %v", l.Expiry)
	assert.False(t, l.Held(time.Now()))

	require.True(t, acquire(t, s, k, "b", long))
	assert.Equal(t, "49590338271490256608559692538361571095921575989136588898", read(t, s, k).Checkpoint,
		"checkpoint after another owner acquired the lease")
	require.True(t, checkpoint(t, s, k, "b", "49590338271490256608559692538361571095921575989136588899"))
	assert.Equal(t, "49590338271490256608559692538361571095921575989136588899", read(t, s, k).Checkpoint)
}

func testReleaseByNonOwner(t *testing.T, s lease.Store) {
	k := key(t, "0")
	require.True(t, acquire(t, s, k, "a", long))
	require.True(t, checkpoint(t, s, k, "a", "100"))
	before := read(t, s, k)
	release(t, s, k, "b")
	assert.Equal(t, before, read(t, s, k), "Release by a non-owner changed the lease")
	assert.False(t, acquire(t, s, k, "b", long), "Acquire after a non-owner's Release")
}

func testReleasedLeaseAcquiredAtOnce(t *testing.T, s lease.Store) {
	k := key(t, "0")
	require.True(t, acquire(t, s, k, "a", long))
	release(t, s, k, "a")
	assert.True(t, acquire(t, s, k, "b", long), "Acquire right after Release")
	assert.Equal(t, "b", read(t, s, k).Owner)
}

func testShardEnd(t *testing.T, s lease.Store) {
	k := key(t, "0")
	require.True(t, acquire(t, s, k, "a", long))
	require.True(t, checkpoint(t, s, k, "a", lease.ShardEnd))
	release(t, s, k, "a")
	assert.Equal(t, lease.ShardEnd, read(t, s, k).Checkpoint)
}

func testList(t *testing.T, s lease.Store) {
	empty, err := s.List(ctx(t))
	require.NoError(t, err)
	assert.Empty(t, empty, "List of a new store")

	k0, k1, k2 := key(t, "0"), key(t, "1"), key(t, "2")
	require.True(t, acquire(t, s, k0, "a", long))
	require.True(t, checkpoint(t, s, k0, "a", "100"))
	require.True(t, acquire(t, s, k1, "b", long))
	require.True(t, acquire(t, s, k2, "a", long))
	require.True(t, checkpoint(t, s, k2, "a", lease.ShardEnd))
	release(t, s, k2, "a")

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
		assert.Equal(t, want.checkpoint, l.Checkpoint, "checkpoint of %q", want.key)
		assert.Equal(t, read(t, s, want.key), l, "List and Read disagree on %q", want.key)
	}
}

// testListPrefix checks a store that implements lease.PrefixLister lists exactly the keys
// under a prefix, as List shows them; a store that does not skips nothing else.
func testListPrefix(t *testing.T, s lease.Store) {
	pl, ok := s.(lease.PrefixLister)
	if !ok {
		t.Skipf("%T does not implement lease.PrefixLister", s)
	}
	_, err := pl.ListPrefix(ctx(t), "")
	require.ErrorIs(t, err, lease.ErrInvalidArgument, "ListPrefix with an empty prefix")
	base := t.Name()
	empty, err := pl.ListPrefix(ctx(t), base+"/a/")
	require.NoError(t, err)
	assert.Empty(t, empty, "ListPrefix of a new store")

	// Two streams whose names share a prefix, and a row whose key is the bare stream name.
	a0, a1, ab0, bare := base+"/a/shardId-0", base+"/a/~owner/x", base+"/ab/shardId-0", base+"/a"
	for _, k := range []string{a0, a1, ab0, bare} {
		require.True(t, acquire(t, s, k, "o", long))
	}
	require.True(t, checkpoint(t, s, a0, "o", "100"))
	release(t, s, a1, "o")

	got, err := pl.ListPrefix(ctx(t), base+"/a/")
	require.NoError(t, err)
	var keys []string
	for _, l := range got {
		keys = append(keys, l.Key)
		assert.Equal(t, read(t, s, l.Key), l, "ListPrefix and Read disagree on %q", l.Key)
	}
	assert.Equal(t, []string{a0, a1}, keys, "keys listed under %q, in order", base+"/a/")
	got, err = pl.ListPrefix(ctx(t), base+"/ab/")
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

func testCountersOnlyGrow(t *testing.T, s lease.Store) {
	k := key(t, "0")
	var a0 int64 // counter of the lease as a saw it when it held the lease
	steps := []struct {
		name string
		do   func() bool // reports whether the write succeeded
		want bool
	}{
		{"Acquire a", func() bool { return acquire(t, s, k, "a", long) }, true},
		{"Renew a", func() bool { return renew(t, s, k, "a", long) }, true},
		{"Checkpoint a", func() bool { return checkpoint(t, s, k, "a", "1") }, true},
		{"Acquire b", func() bool { return acquire(t, s, k, "b", long) }, false},
		{"Renew b", func() bool { return renew(t, s, k, "b", long) }, false},
		{"Checkpoint b", func() bool { return checkpoint(t, s, k, "b", "2") }, false},
		{"Release b", func() bool { release(t, s, k, "b"); return false }, false},
		{"Acquire a again", func() bool { a0 = read(t, s, k).Counter; return acquire(t, s, k, "a", long) }, true},
		{"Release a", func() bool { release(t, s, k, "a"); return true }, true},
		{"Acquire b after release", func() bool { return acquire(t, s, k, "b", long) }, true},
		{"Steal with a stale counter", func() bool { return steal(t, s, k, "a", a0, long) }, false},
		{"Steal with the current counter", func() bool { return steal(t, s, k, "a", read(t, s, k).Counter, long) }, true},
		{"Renew by the fenced b", func() bool { return renew(t, s, k, "b", long) }, false},
	}
	prev := read(t, s, k).Counter
	require.Zero(t, prev, "counter of an absent lease")
	for _, st := range steps {
		ok := st.do()
		require.Equal(t, st.want, ok, "%s succeeded", st.name)
		got := read(t, s, k).Counter
		if ok {
			assert.Greater(t, got, prev, "counter after %s", st.name)
		} else {
			assert.Equal(t, prev, got, "counter after the failed %s", st.name)
		}
		prev = got
	}
}

func testSteal(t *testing.T, s lease.Store) {
	k := key(t, "0")
	require.True(t, acquire(t, s, k, "a", long))
	require.True(t, checkpoint(t, s, k, "a", "100"))
	before := read(t, s, k)
	require.True(t, steal(t, s, k, "b", before.Counter, long), "Steal with the current counter")

	after := read(t, s, k)
	assert.Equal(t, "b", after.Owner)
	assert.Greater(t, after.Counter, before.Counter)
	assert.True(t, after.Held(time.Now()))
	assert.Equal(t, "100", after.Checkpoint, "Steal kept the checkpoint")

	assert.False(t, renew(t, s, k, "a", long), "Renew by the fenced owner")
	assert.False(t, checkpoint(t, s, k, "a", "200"), "Checkpoint by the fenced owner")
	assert.False(t, acquire(t, s, k, "a", long), "Acquire by the fenced owner")
	assert.True(t, checkpoint(t, s, k, "b", "200"), "Checkpoint by the new owner")
	assert.Equal(t, "200", read(t, s, k).Checkpoint)
}

func testStaleSteal(t *testing.T, s lease.Store) {
	k := key(t, "0")
	assert.False(t, steal(t, s, k, "b", 0, long), "Steal of an absent lease")
	assert.Equal(t, lease.Lease{Key: k}, read(t, s, k), "a failed Steal created the lease")

	require.True(t, acquire(t, s, k, "a", long))
	seen := read(t, s, k).Counter
	require.True(t, renew(t, s, k, "a", long))
	before := read(t, s, k)

	assert.False(t, steal(t, s, k, "b", seen, long), "Steal with a stale counter")
	assert.False(t, steal(t, s, k, "b", before.Counter+1, long), "Steal with a future counter")
	assert.Equal(t, before, read(t, s, k), "a failed Steal changed the lease")
	assert.True(t, renew(t, s, k, "a", long), "Renew after failed Steals")
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
	require.True(t, acquire(t, s, k, "a", long))
	require.True(t, checkpoint(t, s, k, "a", lease.ShardEnd))
	release(t, s, k, "a")
	require.True(t, acquire(t, s, other, "b", long))
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
	require.True(t, acquire(t, s, k, "a", long))
	seen := read(t, s, k).Counter
	require.True(t, checkpoint(t, s, k, "a", lease.ShardEnd))
	release(t, s, k, "a")
	before := read(t, s, k)

	assert.False(t, del(t, s, k, seen), "Delete with a stale counter")
	assert.False(t, del(t, s, k, before.Counter+1), "Delete with a future counter")
	assert.False(t, del(t, s, k, 0), "Delete with counter 0 of an existing lease")
	assert.Equal(t, before, read(t, s, k), "a failed Delete changed the lease")
	assert.True(t, acquire(t, s, k, "b", long), "Acquire after failed Deletes")
	assert.Equal(t, lease.ShardEnd, read(t, s, k).Checkpoint)
}

func testDeleteAbsent(t *testing.T, s lease.Store) {
	k := key(t, "0")
	assert.False(t, del(t, s, k, 0), "Delete of an absent lease, counter 0")
	assert.False(t, del(t, s, k, 1), "Delete of an absent lease, counter 1")
	assert.Equal(t, lease.Lease{Key: k}, read(t, s, k), "a failed Delete created the lease")
	assert.Empty(t, list(t, s), "a failed Delete created a lease")
}

// Delete does not ask who holds the lease: the holder is fenced, as by a Steal, and its
// writes do not bring the lease back.
func testDeleteFencesHolder(t *testing.T, s lease.Store) {
	k := key(t, "0")
	require.True(t, acquire(t, s, k, "a", long))
	require.True(t, checkpoint(t, s, k, "a", "100"))
	require.True(t, del(t, s, k, read(t, s, k).Counter), "Delete of a held lease")

	assert.False(t, renew(t, s, k, "a", long), "Renew by the owner of a deleted lease")
	assert.False(t, checkpoint(t, s, k, "a", "200"), "Checkpoint by the owner of a deleted lease")
	release(t, s, k, "a")
	assert.Equal(t, lease.Lease{Key: k}, read(t, s, k), "writes after Delete recreated the lease")
}

// A deleted key is acquired again from scratch: a new owner, counter 1, no checkpoint.
func testDeletedLeaseStartsAfresh(t *testing.T, s lease.Store) {
	k := key(t, "0")
	require.True(t, acquire(t, s, k, "a", long))
	require.True(t, checkpoint(t, s, k, "a", lease.ShardEnd))
	release(t, s, k, "a")
	old := read(t, s, k)
	require.Greater(t, old.Counter, int64(1))
	require.True(t, del(t, s, k, old.Counter))

	require.True(t, acquire(t, s, k, "b", long), "Acquire of a deleted lease")
	l := read(t, s, k)
	assert.Equal(t, "b", l.Owner)
	assert.Equal(t, int64(1), l.Counter, "counter of a lease acquired after Delete")
	assert.Empty(t, l.Checkpoint, "checkpoint of a lease acquired after Delete")
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
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"Acquire empty key", func() error { return boolCall(s.Acquire(c, "", "a", long)) }},
		{"Acquire empty owner", func() error { return boolCall(s.Acquire(c, k, "", long)) }},
		{"Acquire zero ttl", func() error { return boolCall(s.Acquire(c, k, "a", 0)) }},
		{"Acquire negative ttl", func() error { return boolCall(s.Acquire(c, k, "a", -time.Second)) }},
		{"Steal empty key", func() error { return boolCall(s.Steal(c, "", "a", 0, long)) }},
		{"Steal empty owner", func() error { return boolCall(s.Steal(c, k, "", 0, long)) }},
		{"Steal zero ttl", func() error { return boolCall(s.Steal(c, k, "a", 0, 0)) }},
		{"Renew empty key", func() error { return boolCall(s.Renew(c, "", "a", long)) }},
		{"Renew empty owner", func() error { return boolCall(s.Renew(c, k, "", long)) }},
		{"Renew negative ttl", func() error { return boolCall(s.Renew(c, k, "a", -time.Second)) }},
		{"Checkpoint empty key", func() error { return boolCall(s.Checkpoint(c, "", "a", "1", 0)) }},
		{"Checkpoint empty owner", func() error { return boolCall(s.Checkpoint(c, k, "", "1", 0)) }},
		{"Checkpoint empty sequence", func() error { return boolCall(s.Checkpoint(c, k, "a", "", 0)) }},
		{"Checkpoint negative sub-sequence", func() error { return boolCall(s.Checkpoint(c, k, "a", "1", -1)) }},
		{"Release empty key", func() error { return s.Release(c, "", "a") }},
		{"Release empty owner", func() error { return s.Release(c, k, "") }},
		{"Read empty key", func() error { _, err := s.Read(c, ""); return err }},
		{"Delete empty key", func() error { return boolCall(s.Delete(c, "", 0)) }},
	} {
		err := tc.call()
		assert.ErrorIs(t, err, lease.ErrInvalidArgument, tc.name)
	}

	// A rejected call writes nothing, so the lease is still free.
	require.True(t, acquire(t, s, k, "a", long))
	assert.Equal(t, int64(1), read(t, s, k).Counter, "counter after invalid calls and one Acquire")
	assert.ErrorIs(t, boolCall(s.Checkpoint(c, k, "a", "", 0)), lease.ErrInvalidArgument, "Checkpoint empty sequence by the owner")
	assert.ErrorIs(t, boolCall(s.Checkpoint(c, k, "a", "1", -1)), lease.ErrInvalidArgument, "Checkpoint negative sub-sequence by the owner")
	assert.ErrorIs(t, boolCall(s.Renew(c, k, "a", 0)), lease.ErrInvalidArgument, "Renew zero ttl by the owner")
	assert.Equal(t, int64(1), read(t, s, k).Counter, "counter after invalid calls by the owner")
}
