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

// StealNote is how a subscriber renews its heartbeat row.
func (c *cutBeats) StealNote(ctx context.Context, key, owner string, counter int64, ttl time.Duration, note string) (bool, error) {
	if c.cut.Load() && strings.Contains(key, "/"+ownerRowPrefix) {
		return false, errors.New("heartbeat renewal cut off")
	}
	return c.Store.StealNote(ctx, key, owner, counter, ttl, note)
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

// holdDrop is a lease store that, once it has dropped owner's heartbeat row, says so on
// dropped and holds the answer until resume is closed.
type holdDrop struct {
	lease.Store
	owner           string
	dropped, resume chan struct{}
}

func (h *holdDrop) Release(ctx context.Context, key string, t lease.Tenure) (bool, error) {
	ok, err := h.Store.Release(ctx, key, t)
	if strings.Contains(key, "/"+ownerRowPrefix+h.owner+"#") {
		close(h.dropped)
		<-h.resume
	}
	return ok, err
}

// TestCloseDuringHandBackHandsOutNothing: Close drops the heartbeat row, after which peers take
// every shard bound to it at once, also one this subscriber is still draining after a
// hand-back. From the drop on nothing is handed out, not even a Process job that fills a gap
// in that drain (k0/1, behind a k0/0 whose handler ignores its ctx and returns just then).
func TestCloseDuringHandBackHandsOutNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("close-handback", 2)
		for i := range 2 {
			addKeyed(f, i, 9, 3, map[string]int{})
		}
		store := &holdDrop{Store: lease.NewMemory(), owner: "a", dropped: make(chan struct{}), resume: make(chan struct{})}
		a := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithInitialPosition(Horizon()))...)
		eventually(t, 5*time.Second, "a reads both", func() bool { return reading(a) == 2 })
		var mu sync.Mutex
		var back string
		started := map[string][]string{}
		returned := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		processed := make(chan error, 1)
		go func() {
			processed <- a.Process(ctx, func(ctx context.Context, m *Message) error {
				mu.Lock()
				started[m.ShardID()] = append(started[m.ShardID()], string(m.Data()))
				mu.Unlock()
				if string(m.Data()) != "k0/0" {
					return nil
				}
				for !handingBack(a, m.ShardID()) {
					mu.Lock()
					other := back != ""
					mu.Unlock()
					if other {
						return nil // the shard kept: it closes at once
					}
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(time.Millisecond):
					}
				}
				mu.Lock()
				back = m.ShardID()
				mu.Unlock()
				<-returned // a downstream that ignores ctx
				return nil
			}, WithOrderKey(func(m *Message) string {
				return m.ShardID() + "/" + m.PartitionKey() // the other shard's k0 is not held by this one's
			}))
		}()
		synctest.Wait()
		subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("b"))...)
		eventually(t, 10*time.Second, "a hands one back", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return back != ""
		})
		t0 := time.Now()
		closed := make(chan error, 1)
		go func() { closed <- a.Close(context.Background()) }()
		<-store.dropped
		close(returned) // k0/0 returns: k0/1 would fill the gap below k1/2 and k2/2
		synctest.Wait()
		mu.Lock()
		got := started[back]
		mu.Unlock()
		t.Logf("the heartbeat row dropped %v after Close began; started on the shard handed back: %v", time.Since(t0), got)
		require.NotContains(t, got, "k0/1", "a job started after the heartbeat row was dropped")
		close(store.resume)
		require.NoError(t, <-closed)
		require.ErrorIs(t, <-processed, ErrClosed)
	})
}
