package kinesub

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// skewedView is a lease store whose List, while skewed is set, shows this owner's shard rows as
// lapsed, as a table read by a host whose clock runs ahead, or a row whose renewal has not
// landed yet, shows them. Heartbeat rows are shown as they are.
type skewedView struct {
	lease.Store
	owner  string
	skewed atomic.Bool
}

func (s *skewedView) List(ctx context.Context) ([]lease.Lease, error) {
	ls, err := s.Store.List(ctx)
	if err != nil || !s.skewed.Load() {
		return ls, err
	}
	for i, l := range ls {
		if l.Owner == s.owner && !strings.Contains(l.Key, "/"+ownerRowPrefix) {
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
		ok, err := store.Acquire(context.Background(), name+"/"+ownerRowPrefix+"peer", "peer", time.Hour)
		require.NoError(t, err)
		require.True(t, ok)
		f := newFakeStream(name, 6)
		sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithLeaseTTL(ttl),
			WithBalanceInterval(time.Hour))...)
		time.Sleep(ttl)
		require.Equal(t, 3, reading(sub), "share with one live peer")

		store.skewed.Store(true)
		for range 20 {
			time.Sleep(ttl / 4)
			require.Equal(t, 3, reading(sub), "shards taken while its rows looked lapsed")
		}
		store.skewed.Store(false)
		time.Sleep(2 * ttl)
		require.Equal(t, 3, reading(sub))
	})
}
