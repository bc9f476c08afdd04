package kinesub

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// countingLister is a memory store that counts reads of whole streams (and of the whole
// store) and of change rows, and records the prefixes listed.
type countingLister struct {
	*lease.Memory
	lists, changeReads atomic.Int64

	mu       sync.Mutex
	prefixes map[string]bool
}

func newCountingLister() *countingLister {
	return &countingLister{Memory: lease.NewMemory(), prefixes: map[string]bool{}}
}

func (c *countingLister) List(ctx context.Context) ([]lease.Lease, error) {
	c.lists.Add(1)
	c.mu.Lock()
	c.prefixes[""] = true
	c.mu.Unlock()
	return c.Memory.List(ctx)
}

func (c *countingLister) ListPrefix(ctx context.Context, prefix string) ([]lease.Lease, error) {
	c.lists.Add(1)
	c.mu.Lock()
	c.prefixes[prefix] = true
	c.mu.Unlock()
	return c.Memory.ListPrefix(ctx, prefix)
}

func (c *countingLister) Read(ctx context.Context, key string) (lease.Lease, error) {
	if strings.HasSuffix(key, "/"+changesRow) {
		c.changeReads.Add(1)
	}
	return c.Memory.Read(ctx, key)
}

// owners counts the shard leases of stream held per owner.
func owners(t *testing.T, store lease.Store, f *fakeStream) map[string]int {
	t.Helper()
	per := map[string]int{}
	for _, sh := range f.shards {
		if l := readLease(t, store, f.stream, sh.id); l.Held(time.Now()) {
			per[baseOwner(l.Owner)]++
		}
	}
	return per
}

// steady waits until the bubble is idle, then checks that over 10 claim ticks (of a second)
// the subscribers read their change row and nothing else of the table.
func steady(t *testing.T, store *countingLister) {
	t.Helper()
	synctest.Wait()
	lists, reads := store.lists.Load(), store.changeReads.Load()
	time.Sleep(10 * time.Second)
	synctest.Wait()
	require.Equal(t, lists, store.lists.Load(), "the table was read in a steady state")
	require.GreaterOrEqual(t, store.changeReads.Load()-reads, int64(10), "change row reads in 10 s")
}

// TestCloseNoticedThroughChangeRow: two subscribers share 4 shards and, steady, read only the
// change row. When one closes, the other holds all 4 within 2 s, though the lease TTL (30 s)
// and the balance interval (an hour) are far away: the release moved the change row. It runs
// in a synctest bubble, so the times are exact.
func TestCloseNoticedThroughChangeRow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newCountingLister()
		f := newFakeStream("changes", 4)
		opts := func(owner string) []Option {
			return fakeOpts(WithLeaseStore(store), WithOwner(owner), WithLeaseTTL(30*time.Second),
				WithBalanceInterval(time.Hour), WithShardSyncInterval(time.Second))
		}
		a := subscribeFake(t, f, opts("a")...)
		eventually(t, 5*time.Second, "a reads 4", func() bool { return reading(a) == 4 })
		b := subscribeFake(t, f, opts("b")...)
		eventually(t, 5*time.Second, "2/2", func() bool { return reading(a) == 2 && reading(b) == 2 })
		steady(t, store)

		require.NoError(t, a.Close(context.Background()))
		closed := time.Now()
		lists := store.lists.Load()
		eventually(t, 5*time.Second, "b holds 4", func() bool { return owners(t, store, f)["b"] == 4 })
		require.LessOrEqual(t, time.Since(closed), 2*time.Second, "handoff after Close")
		require.Greater(t, store.lists.Load(), lists, "b did not read the table")
		eventually(t, 5*time.Second, "b reads 4", func() bool { return reading(b) == 4 })
		steady(t, store)
	})
}

// TestSharedTableBalancesEachStream: three streams share one table, with the same two owner
// names on each. Each stream is split evenly between its own two subscribers, each subscriber
// lists only its stream's rows, and a subscriber leaving one stream moves that stream's
// shards only.
func TestSharedTableBalancesEachStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newCountingLister()
		streams := []*fakeStream{newFakeStream("orders", 4), newFakeStream("payments", 6), newFakeStream("audit", 2)}
		subs := map[string]*Subscriber{}
		for _, f := range streams {
			for _, owner := range []string{"a", "b"} {
				subs[f.stream+"/"+owner] = subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner(owner))...)
			}
		}
		split := func() string {
			var out []string
			for _, f := range streams {
				per := owners(t, store, f)
				out = append(out, fmt.Sprintf("%s %d/%d", f.stream, per["a"], per["b"]))
			}
			return strings.Join(out, ", ")
		}
		const even = "orders 2/2, payments 3/3, audit 1/1"
		eventually(t, 10*time.Second, even, func() bool { return split() == even })
		store.mu.Lock()
		require.Equal(t, map[string]bool{"orders/": true, "payments/": true, "audit/": true}, store.prefixes,
			"what the subscribers listed")
		store.mu.Unlock()

		require.NoError(t, subs["payments/a"].Close(context.Background()))
		const moved = "orders 2/2, payments 0/6, audit 1/1"
		eventually(t, 10*time.Second, moved, func() bool { return split() == moved })
		time.Sleep(10 * subs["orders/a"].cfg.balanceInterval)
		require.Equal(t, moved, split(), "after 10 balance rounds")
	})
}

// crashable fails every call once down is set, as a process that crashed: nothing it held is
// released or renewed.
type crashable struct {
	lease.Store
	down atomic.Bool
}

var errCrashed = errors.New("crashed")

func (c *crashable) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if c.down.Load() {
		return false, errCrashed
	}
	return c.Store.Acquire(ctx, key, owner, ttl)
}

func (c *crashable) ListPrefix(ctx context.Context, prefix string) ([]lease.Lease, error) {
	if c.down.Load() {
		return nil, errCrashed
	}
	return c.Store.ListPrefix(ctx, prefix)
}

func (c *crashable) List(ctx context.Context) ([]lease.Lease, error) {
	if c.down.Load() {
		return nil, errCrashed
	}
	return c.Store.List(ctx)
}

func (c *crashable) Steal(ctx context.Context, key, owner string, counter int64, ttl time.Duration) (bool, error) {
	if c.down.Load() {
		return false, errCrashed
	}
	return c.Store.Steal(ctx, key, owner, counter, ttl)
}

func (c *crashable) StealNote(ctx context.Context, key, owner string, counter int64, ttl time.Duration, note string) (bool, error) {
	if c.down.Load() {
		return false, errCrashed
	}
	return c.Store.StealNote(ctx, key, owner, counter, ttl, note)
}

func (c *crashable) Read(ctx context.Context, key string) (lease.Lease, error) {
	if c.down.Load() {
		return lease.Lease{}, errCrashed
	}
	return c.Store.Read(ctx, key)
}

func (c *crashable) Delete(ctx context.Context, key string, counter int64) (bool, error) {
	if c.down.Load() {
		return false, errCrashed
	}
	return c.Store.Delete(ctx, key, counter)
}

func (c *crashable) Renew(ctx context.Context, key string, h lease.Tenure, ttl time.Duration) (bool, error) {
	if c.down.Load() {
		return false, errCrashed
	}
	return c.Store.Renew(ctx, key, h, ttl)
}

func (c *crashable) Checkpoint(ctx context.Context, key string, h lease.Tenure, cp lease.Checkpoint) (bool, error) {
	if c.down.Load() {
		return false, errCrashed
	}
	return c.Store.Checkpoint(ctx, key, h, cp)
}

func (c *crashable) CheckpointOrdered(ctx context.Context, key string, h lease.Tenure, cp lease.Checkpoint, n int64) (bool, error) {
	if c.down.Load() {
		return false, errCrashed
	}
	return c.Store.CheckpointOrdered(ctx, key, h, cp, n)
}

func (c *crashable) Release(ctx context.Context, key string, h lease.Tenure) (bool, error) {
	if c.down.Load() {
		return false, errCrashed
	}
	return c.Store.Release(ctx, key, h)
}

// TestCrashNoticedThroughPeerWatch: of two subscribers sharing 4 shards, one crashes. The other
// holds all 4 within one lease TTL and two claim ticks of the crash, though its balance round
// is an hour away and nothing was released: it watches its peer's heartbeat row. It runs in a
// synctest bubble, so the times are exact.
func TestCrashNoticedThroughPeerWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newCountingLister()
		crashing := &crashable{Store: store}
		f := newFakeStream("crash", 4)
		ttl := 3 * time.Second
		opts := func(s lease.Store, owner string) []Option {
			return fakeOpts(WithLeaseStore(s), WithOwner(owner), WithLeaseTTL(ttl),
				WithBalanceInterval(time.Hour), WithShardSyncInterval(time.Second))
		}
		a := subscribeFake(t, f, opts(crashing, "a")...)
		eventually(t, 5*time.Second, "a reads 4", func() bool { return reading(a) == 4 })
		b := subscribeFake(t, f, opts(store, "b")...)
		eventually(t, 5*time.Second, "2/2", func() bool {
			per := owners(t, store, f)
			return per["a"] == 2 && per["b"] == 2 && reading(b) == 2
		})
		synctest.Wait()
		crashing.down.Store(true)
		crashed := time.Now()
		eventually(t, time.Minute, "b holds 4", func() bool { return owners(t, store, f)["b"] == 4 })
		require.LessOrEqual(t, time.Since(crashed), ttl+2*time.Second, "failover after the crash")
	})
}

// wholeTable is a lease store that cannot list less than every row: its ListPrefix lists the
// whole store and keeps the rows under the prefix, as lease.Store allows.
type wholeTable struct{ lease.Store }

func (w wholeTable) ListPrefix(ctx context.Context, prefix string) ([]lease.Lease, error) {
	all, err := w.Store.List(ctx)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, l := range all {
		if strings.HasPrefix(l.Key, prefix) {
			out = append(out, l)
		}
	}
	return out, nil
}

// TestChangeRowWithAnyStore: a subscriber whose store lists every row to list one stream's
// still moves the change row when it joins, steals or releases, and its peers on a store that
// lists by prefix rely on it: a thief that did not move it would leave its victim confirming
// leases no longer its own. It runs in a synctest bubble.
func TestChangeRowWithAnyStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newCountingLister()
		f := newFakeStream("anystore", 2)
		a := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithBalanceInterval(time.Hour))...)
		eventually(t, 5*time.Second, "a reads 2", func() bool { return reading(a) == 2 })
		synctest.Wait()
		before := readLease(t, store, f.stream, changesRow).Counter
		b := subscribeFake(t, f, fakeOpts(WithLeaseStore(wholeTable{store}), WithOwner("b"), WithBalanceInterval(time.Hour))...)
		eventually(t, 5*time.Second, "b's join moved the change row", func() bool {
			return readLease(t, store, f.stream, changesRow).Counter > before
		})
		eventually(t, 5*time.Second, "1/1", func() bool { return reading(a) == 1 && reading(b) == 1 })
	})
}
