package kinesub

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// fleetRun is a fleet of subscribers to a fake stream fed at a steady rate, each with its own
// meter provider, in a synctest bubble: time advances only when every goroutine waits, so a
// consumer that takes 50ms a record takes exactly that.
type fleetRun struct {
	t     *testing.T
	f     *fakeStream
	store lease.Store
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
	subs  []*Subscriber
	mts   []*meters
}

// newFleetRun starts feeding each of shards shards a record every 10ms until the test ends.
func newFleetRun(t *testing.T, shards int) *fleetRun {
	r := &fleetRun{t: t, f: newFakeStream("scale", shards), store: lease.NewMemory()}
	r.ctx, r.stop = context.WithCancel(context.Background())
	r.wg.Add(1)
	go func() { // waited for by end
		defer r.wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-r.ctx.Done():
				return
			case <-tick.C:
			}
			for i := range shards {
				r.f.add(i, time.Now(), strconv.Itoa(n))
			}
		}
	}()
	return r
}

// join subscribes one more instance and runs consume in a goroutine of its own until the test
// ends.
func (r *fleetRun) join(consume func(ctx context.Context, sub *Subscriber)) {
	mt := newMeters(r.t)
	sub, err := subscribe(context.Background(), r.f, r.f.stream, fakeOpts(WithLeaseStore(r.store), WithPollInterval(50*time.Millisecond),
		WithInitialPosition(Horizon()), WithMaxInFlight(200), WithMeterProvider(mt.provider))...)
	require.NoError(r.t, err)
	r.subs, r.mts = append(r.subs, sub), append(r.mts, mt)
	r.wg.Add(1)
	go func() { // waited for by end
		defer r.wg.Done()
		consume(r.ctx, sub)
	}()
}

// figures returns what instance i reports: its consumer's utilization and the instances the
// fleet needs (0: not reported yet).
func (r *fleetRun) figures(i int) (util, needed float64) {
	u, unit := r.mts[i].collect("kinesub.consumer.utilization")
	n, _ := r.mts[i].collect("kinesub.fleet.instances_needed")
	if len(u) != 1 || len(n) != 1 {
		return 0, 0
	}
	require.Equal(r.t, "1", unit)
	for _, p := range append(u, n...) {
		require.Equal(r.t, r.f.stream, p.attrs["messaging.destination.name"], "the stream attribute")
	}
	return u[0].value, n[0].value
}

// waitFor waits, in steps of 100ms of the bubble's time and for at most a minute of it, until
// every instance's figures satisfy ok (i: the instance), and fails with the last figures otherwise.
func (r *fleetRun) waitFor(what string, ok func(i int, util, needed float64) bool) {
	var last []float64
	for range 600 {
		time.Sleep(100 * time.Millisecond)
		last = last[:0]
		all := true
		for i := range r.subs {
			u, n := r.figures(i)
			last = append(last, u, n)
			all = all && n > 0 && ok(i, u, n)
		}
		if all {
			r.t.Logf("%s at %v: %v", what, time.Now(), last)
			return
		}
	}
	r.t.Fatalf("%s: figures (utilization, instances needed) by instance: %v", what, last)
}

// end stops the feed, closes every subscription and waits for the consumers.
func (r *fleetRun) end() {
	r.stop()
	for _, sub := range r.subs {
		require.NoError(r.t, sub.Close(context.Background()))
	}
	r.wg.Wait()
}

func slowly(ctx context.Context, m *Message) {
	time.Sleep(50 * time.Millisecond)
	_ = m.Ack(ctx)
}

// TestScaleSignalSlowConsumers: two instances whose consumers take 50ms a record, where 400
// records a second arrive, are busy all the time, and both report that the fleet needs
// ceil(2 × 1 / 0.7) = 3 instances: more than the two there are. One consumes through Messages,
// the other through All.
func TestScaleSignalSlowConsumers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRun(t, 4)
		r.join(func(ctx context.Context, sub *Subscriber) {
			for m := range sub.Messages() {
				slowly(ctx, m)
			}
		})
		r.join(func(ctx context.Context, sub *Subscriber) {
			for m, err := range sub.All(ctx) {
				if err != nil {
					return
				}
				slowly(ctx, m)
			}
		})
		r.waitFor("busy consumers, a fleet that needs 3", func(_ int, u, n float64) bool { return u >= 0.9 && n == 3 })
		r.end()
	})
}

// TestScaleSignalFastConsumers: instances whose consumers keep up wait for records nearly all
// the time, and report that one instance would do: one instance for each way of consuming.
func TestScaleSignalFastConsumers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRun(t, 4)
		r.join(func(ctx context.Context, sub *Subscriber) {
			for m := range sub.Messages() {
				_ = m.Ack(ctx)
			}
		})
		r.join(func(ctx context.Context, sub *Subscriber) {
			for m, err := range sub.All(ctx) {
				if err != nil {
					return
				}
				_ = m.Ack(ctx)
			}
		})
		r.join(func(ctx context.Context, sub *Subscriber) {
			for b, err := range sub.Batches(ctx) {
				if err != nil {
					return
				}
				_ = b.Ack(ctx)
			}
		})
		r.join(func(ctx context.Context, sub *Subscriber) {
			_ = sub.Process(ctx, func(context.Context, *Message) error { return nil })
		})
		// Two windows (1.2s each at this TTL) with records flowing to every instance.
		r.waitFor("every instance consuming", func(i int, _, _ float64) bool {
			return r.mts[i].sum("messaging.client.consumed.messages") > 0
		})
		time.Sleep(2400 * time.Millisecond)
		r.waitFor("idle consumers, a fleet that needs 1", func(_ int, u, n float64) bool { return u <= 0.1 && n == 1 })
		r.end()
	})
}

// TestScaleSignalProcessWorkers: Process's utilization is the share of its workers busy; with
// one worker and a slow handler, it is 1, and the fleet of one needs ceil(1 / 0.7) = 2.
func TestScaleSignalProcessWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRun(t, 2)
		r.join(func(ctx context.Context, sub *Subscriber) {
			_ = sub.Process(ctx, func(context.Context, *Message) error {
				time.Sleep(50 * time.Millisecond)
				return nil
			}, WithConcurrency(1))
		})
		r.waitFor("a busy worker, a fleet that needs 2", func(_ int, u, n float64) bool { return u >= 0.9 && n == 2 })
		r.end()
	})
}

// TestScaleSignalInstanceWithoutUtilization: a live instance whose heartbeat note carries its
// load and no utilization (a version before the utilization was noted) counts at the mean of
// those that do: beside a busy instance, it makes the fleet's sum 2 and the instances needed
// ceil(2 / 0.7) = 3.
func TestScaleSignalInstanceWithoutUtilization(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRun(t, 4)
		r.earlierPeer("earlier-version", "load/1 1000 10")
		r.join(func(ctx context.Context, sub *Subscriber) {
			for m, err := range sub.All(ctx) {
				if err != nil {
					return
				}
				slowly(ctx, m)
			}
		})
		r.waitFor("a busy instance and one counted at its mean, a fleet that needs 3", func(_ int, u, n float64) bool { return u >= 0.9 && n == 3 })
		r.end()
	})
}

// earlierPeer keeps owner's heartbeat row live, as a subscriber that notes note on it with each
// renewal, until the run ends.
func (r *fleetRun) earlierPeer(owner, note string) {
	key := r.f.stream + "/" + ownerRowPrefix + owner
	ok, err := r.store.Acquire(context.Background(), key, owner, time.Hour)
	require.NoError(r.t, err)
	require.True(r.t, ok)
	r.wg.Add(1)
	go func() { // waited for by end
		defer r.wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-r.ctx.Done():
				return
			case <-tick.C:
			}
			if l, err := r.store.Read(r.ctx, key); err == nil && l.Owner == owner {
				_, _ = r.store.StealNote(r.ctx, key, owner, l.Counter, time.Hour, note)
			}
		}
	}()
}
