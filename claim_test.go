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

// lateRenewals is a lease store whose shard renewals, while late is set, reach the table one
// lease TTL after they were sent, as those of a keeper starved of CPU do: the row lapses
// meanwhile though its reader goes on. Heartbeat rows are renewed on time.
type lateRenewals struct {
	lease.Store
	late atomic.Bool
	ttl  time.Duration
}

func (l *lateRenewals) Renew(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if l.late.Load() && !strings.Contains(key, "/"+ownerRowPrefix) {
		time.Sleep(l.ttl)
		ctx = context.WithoutCancel(ctx)
	}
	return l.Store.Renew(ctx, key, owner, ttl)
}

// TestClaimCountsRunningReaders: a subscriber counts the shards it reads toward its fair share
// whether or not their rows look held in the table, so a renewal that lands late does not make
// it take shards beyond its share.
func TestClaimCountsRunningReaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name, ttl = "late", 300 * time.Millisecond
		store := &lateRenewals{Store: lease.NewMemory(), ttl: ttl}
		ok, err := store.Acquire(context.Background(), name+"/"+ownerRowPrefix+"peer", "peer", time.Hour)
		require.NoError(t, err)
		require.True(t, ok)
		f := newFakeStream(name, 6)
		sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithLeaseTTL(ttl),
			WithBalanceInterval(time.Hour))...)
		time.Sleep(ttl)
		require.Equal(t, 3, reading(sub), "share with one live peer")

		store.late.Store(true)
		for range 20 {
			time.Sleep(ttl / 4)
			require.Equal(t, 3, reading(sub), "shards taken while renewals were late")
		}
		store.late.Store(false)
		time.Sleep(2 * ttl)
		require.Equal(t, 3, reading(sub))
	})
}
