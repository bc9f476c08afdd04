package kinesub

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// skewedView is a lease store whose ListPrefix, while skewed is set, shows this owner's shard rows as
// lapsed, as a table read by a host whose clock runs ahead, or a row whose renewal has not
// landed yet, shows them. Heartbeat rows are shown as they are.
type skewedView struct {
	lease.Store
	owner  string
	skewed atomic.Bool
	shown  atomic.Int64 // listings shown skewed
}

func (s *skewedView) ListPrefix(ctx context.Context, prefix string) ([]lease.Lease, error) {
	ls, err := s.Store.ListPrefix(ctx, prefix)
	if err != nil || !s.skewed.Load() {
		return ls, err
	}
	s.shown.Add(1)
	for i, l := range ls {
		if baseOwner(l.Owner) == s.owner && !strings.Contains(l.Key, "/"+ownerRowPrefix) {
			ls[i].Expiry = time.Now().Add(-time.Millisecond)
		}
	}
	return ls, nil
}

// TestClaimCountsRunningReaders: a subscriber counts the shards it reads toward its fair share
// whether or not their rows look held in the table it read, so rows that look lapsed do not
// make it take shards beyond its share.
func TestClaimCountsRunningReaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name, ttl = "late", 300 * time.Millisecond
		store := &skewedView{Store: lease.NewMemory(), owner: "a"}
		holdAsPeer(t, store, name, "peer", peerLive)
		f := newFakeStream(name, 6)
		sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithLeaseTTL(ttl),
			WithBalanceInterval(time.Hour))...)
		time.Sleep(ttl)
		require.Equal(t, 3, reading(sub), "share with one live peer")

		store.skewed.Store(true)
		for range 20 {
			bumpChanges(t, store, name, "peer") // so that claim ticks list the table
			time.Sleep(ttl / 4)
			require.Equal(t, 3, reading(sub), "shards taken while its rows looked lapsed")
		}
		require.Positive(t, store.shown.Load(), "listings shown skewed")
		store.skewed.Store(false)
		time.Sleep(2 * ttl)
		require.Equal(t, 3, reading(sub))
	})
}

// stealClock records the leases owner stole (left pending: read only once its previous
// owner stopped), when it bound each (its wait was over), and every release by owner of a
// lease it stole and had not bound yet: released then, the lease would be taken by a peer that
// reads at once, while its previous owner may still read it.
type stealClock struct {
	lease.Store
	owner string
	ttl   time.Duration
	mu    sync.Mutex
	stole map[string]time.Time // pending steals by owner, by key
	bound map[string]bool      // those it bound since
	early []string
}

func (c *stealClock) Steal(ctx context.Context, key, owner string, counter int64, ttl time.Duration) (bool, error) {
	ok, err := c.Store.Steal(ctx, key, owner, counter, ttl)
	c.stolen(ok, key, owner, ttl)
	return ok, err
}

// StealNote is Steal, for the pending steals that note their victim.
func (c *stealClock) StealNote(ctx context.Context, key, owner string, counter int64, ttl time.Duration, note string) (bool, error) {
	ok, err := c.Store.StealNote(ctx, key, owner, counter, ttl, note)
	c.stolen(ok, key, owner, ttl)
	return ok, err
}

func (c *stealClock) stolen(ok bool, key, owner string, ttl time.Duration) {
	if ok && baseOwner(owner) == c.owner && !strings.Contains(key, "/~") {
		c.mu.Lock()
		if c.bound == nil {
			c.bound = map[string]bool{}
		}
		if ttl == 0 { // the binding of a pending lease (or a take of an orphan's bound one)
			c.bound[key] = true
		} else {
			c.stole[key] = time.Now()
			delete(c.bound, key)
		}
		c.mu.Unlock()
	}
}

func (c *stealClock) Release(ctx context.Context, key string, h lease.Tenure) (bool, error) {
	c.mu.Lock()
	if _, ok := c.stole[key]; ok && baseOwner(h.Owner) == c.owner && !c.bound[key] {
		c.early = append(c.early, key)
	}
	c.mu.Unlock()
	return c.Store.Release(ctx, key, h)
}

// ghostStream is a fake stream of n shards whose leases an owner ("ghost") stole and left
// pending (mid-steal: the owner it stole them from may still read them) before it went silent:
// its heartbeat row stands still. A subscriber takes the row over once it has seen it still for
// reapAfter, then steals the leases, and may read them only stealWait later.
func ghostStream(t *testing.T, store lease.Store, name string, n int) *fakeStream {
	f := newFakeStream(name, n)
	ids := make([]string, len(f.shards))
	for i, sh := range f.shards {
		ids[i] = sh.id
	}
	holdAsPeer(t, store, name, "ghost", peerSilent, ids...)
	for _, id := range ids {
		ok, err := store.Steal(context.Background(), name+"/"+id, "ghost", 1, pendingTTL)
		require.NoError(t, err)
		require.True(t, ok, "pending lease of %s", id)
	}
	return f
}

// TestHandBackSkipsShardBeingStolen: a subscriber over its share never hands back a lease it
// is still waiting to read after stealing it. Released before stealWait, the lease would be
// taken by a peer that reads at once, while the owner it was stolen from may still read it. A
// subscriber takes over the six pending leases of an owner that went silent; before it may
// read them, a peer's heartbeat makes its share three, and it hands three back only once it
// reads them.
func TestHandBackSkipsShardBeingStolen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name, ttl = "handback", time.Second
		store := &stealClock{Store: lease.NewMemory(), owner: "a", ttl: ttl, stole: map[string]time.Time{}}
		f := ghostStream(t, store, name, 6)
		a := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithLeaseTTL(ttl),
			WithBalanceInterval(20*time.Millisecond))...)
		eventually(t, 5*time.Second, "six taken over", func() bool {
			store.mu.Lock()
			defer store.mu.Unlock()
			return len(store.stole) == 6
		})
		require.Zero(t, reading(a), "read at once")
		holdAsPeer(t, store, name, "peer", peerLive)
		eventually(t, 5*time.Second, "a reads its share of 3", func() bool {
			return reading(a) == 3 && len(a.Shards()) == 6 && split(t, store, name)[0] == 3
		})
		store.mu.Lock()
		defer store.mu.Unlock()
		require.Empty(t, store.early, "leases released before their previous owner had stopped")
	})
}

// TestCloseKeepsShardBeingStolen: Close does not release a lease stolen but not yet read: a
// peer taking it at once could read while the owner it was stolen from still does. The lease
// is left to expire instead, and nothing of it is checkpointed (nothing was read).
func TestCloseKeepsShardBeingStolen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name, ttl = "closesteal", time.Second
		ctx := context.Background()
		store := &stealClock{Store: lease.NewMemory(), owner: "a", ttl: ttl, stole: map[string]time.Time{}}
		f := ghostStream(t, store, name, 2)
		a, err := subscribe(ctx, f, name, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithLeaseTTL(ttl),
			WithBalanceInterval(20*time.Millisecond))...)
		require.NoError(t, err)
		eventually(t, 5*time.Second, "one stolen", func() bool {
			store.mu.Lock()
			defer store.mu.Unlock()
			return len(store.stole) >= 1
		})
		require.NoError(t, a.Close(ctx))
		store.mu.Lock()
		defer store.mu.Unlock()
		require.Empty(t, store.early, "leases released before their previous owner had stopped")
		for key := range store.stole {
			l, err := store.Read(ctx, key)
			require.NoError(t, err)
			require.Equal(t, "a", baseOwner(l.Owner), "left to expire")
		}
	})
}

// blockedSteal holds the first steal of a shard's lease until the test lets it go, as a store
// that applied the write but answered late.
type blockedSteal struct {
	*stealClock
	once     sync.Once
	stealing chan struct{} // closed when the first steal arrives
	proceed  chan struct{} // closed by the test to let it answer
}

func (b *blockedSteal) Steal(ctx context.Context, key, owner string, counter int64, ttl time.Duration) (bool, error) {
	return b.StealNote(ctx, key, owner, counter, ttl, "")
}

// StealNote holds the first steal of a shard's lease, with a note or without: an empty note
// is a Steal.
func (b *blockedSteal) StealNote(ctx context.Context, key, owner string, counter int64, ttl time.Duration, note string) (bool, error) {
	steal := func(ctx context.Context) (bool, error) {
		if note == "" {
			return b.stealClock.Steal(ctx, key, owner, counter, ttl)
		}
		return b.stealClock.StealNote(ctx, key, owner, counter, ttl, note)
	}
	first := false
	if !strings.Contains(key, "/~") {
		b.once.Do(func() { first = true })
	}
	if first {
		close(b.stealing)
		<-b.proceed
		return steal(context.WithoutCancel(ctx))
	}
	return steal(ctx)
}

// TestStealAnsweredDuringClose: a steal whose answer arrives once Close has begun does not
// start the shard, and the lease is left to expire rather than released: its previous owner
// may still be reading it.
func TestStealAnsweredDuringClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name, ttl = "stealclose", time.Second
		ctx := context.Background()
		clock := &stealClock{Store: lease.NewMemory(), owner: "a", ttl: ttl, stole: map[string]time.Time{}}
		store := &blockedSteal{stealClock: clock, stealing: make(chan struct{}), proceed: make(chan struct{})}
		f := ghostStream(t, clock.Store, name, 2)
		a, err := subscribe(ctx, f, name, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithLeaseTTL(ttl),
			WithBalanceInterval(20*time.Millisecond))...)
		require.NoError(t, err)
		<-store.stealing
		closed := make(chan error, 1)
		go func() { closed <- a.Close(ctx) }() // owned by the test, which waits for it
		synctest.Wait()                        // Close has gone as far as it can while the steal is unanswered
		close(store.proceed)
		require.NoError(t, <-closed)
		clock.mu.Lock()
		defer clock.mu.Unlock()
		require.NotEmpty(t, clock.stole, "the steal went through")
		require.Empty(t, clock.early, "a stolen lease was released before its previous owner had stopped")
		for key := range clock.stole {
			l, err := clock.Read(ctx, key)
			require.NoError(t, err)
			require.Equal(t, "a", baseOwner(l.Owner), "left to expire")
		}
	})
}
