package kinesub

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// cutBeats is a lease store whose heartbeat renewals fail while cut is set.
type cutBeats struct {
	lease.Store
	cut atomic.Bool
}

func (c *cutBeats) Steal(ctx context.Context, key, owner string, counter int64, ttl time.Duration) (bool, error) {
	if c.cut.Load() && strings.Contains(key, "/"+ownerRowPrefix) {
		return false, errors.New("heartbeat renewal cut off")
	}
	return c.Store.Steal(ctx, key, owner, counter, ttl)
}

func (c *cutBeats) ListPrefix(ctx context.Context, prefix string) ([]lease.Lease, error) {
	return c.Store.(lease.PrefixLister).ListPrefix(ctx, prefix)
}

// TestPausedPastDeadlineHandsOutNothing: a process paused past its readers' deadline (every
// goroutine of it standing still where a paused process would, the deadline's timer too)
// hands out nothing under the holding it had when it resumes, whatever runs first: each
// hand-out checks the deadline on the monotonic clock (docs/leases.md), not only a timer or the
// shard's generation. It reads the shard again only once it was given up and taken anew.
func TestPausedPastDeadlineHandsOutNothing(t *testing.T) {
	for _, style := range []string{"messages", "all", "process"} {
		t.Run(style, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { pausedPastDeadline(t, style) })
		})
	}
}

func pausedPastDeadline(t *testing.T, style string) {
	f := newFakeStream("paused-"+style, 1)
	store := &cutBeats{Store: lease.NewMemory()}
	var paused atomic.Bool
	resume := make(chan struct{})
	type handOut struct {
		counter int64
		at      time.Time
	}
	var mu sync.Mutex
	var outs []handOut
	pr := &probeSet{
		pause: func() {
			if paused.Load() {
				<-resume
			}
		},
		handedOut: func(m *Message, _ time.Time) {
			mu.Lock()
			outs = append(outs, handOut{m.Tenure().Counter, time.Now()})
			mu.Unlock()
		},
	}
	const ttl = 600 * time.Millisecond
	sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithLeaseTTL(ttl),
		WithInitialPosition(Horizon()), withProbes(pr))...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		switch style {
		case "messages":
			for {
				select {
				case <-ctx.Done():
					return
				case m, ok := <-sub.Messages():
					if !ok {
						return
					}
					_ = m.Ack(ctx)
				}
			}
		case "all":
			for m, err := range sub.All(ctx) {
				if err != nil {
					return
				}
				_ = m.Ack(ctx)
			}
		case "process":
			_ = sub.Process(ctx, func(context.Context, *Message) error { return nil })
		}
	}()
	defer wg.Wait()
	defer cancel()

	f.add(0, time.Now(), "before")
	eventually(t, 5*time.Second, "the first record handed out", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(outs) == 1
	})
	mu.Lock()
	held := outs[0].counter
	mu.Unlock()

	// The process stands still, and its heartbeat renewals fail: its deadline passes while
	// records wait to be handed out.
	paused.Store(true)
	store.cut.Store(true)
	f.add(0, time.Now(), "during 1", "during 2", "during 3")
	time.Sleep(3 * ttl)
	store.cut.Store(false)
	resumedAt := time.Now()
	paused.Store(false)
	close(resume)

	eventually(t, 10*time.Second, "the records read again under a new holding", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(outs) >= 4 && outs[len(outs)-1].counter > held
	})
	mu.Lock()
	defer mu.Unlock()
	for _, o := range outs {
		if !o.at.Before(resumedAt) {
			require.Greater(t, o.counter, held, "handed out after the deadline under the holding it had when paused")
		}
	}
}
