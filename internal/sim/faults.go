package sim

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Gate is what an instance's calls pass through: while the instance is paused, nothing of it
// runs (a call waits to be sent, an answer waits to be seen); cut off, its calls fail at once
// or hang until their context ends; crashed, they fail for good. The Kinesis transport and the
// probes of a simulated instance go through the same gate as its lease table calls.
type Gate struct {
	mu     sync.Mutex
	resume chan struct{} // non-nil while paused; closed on resuming
	began  []time.Time   // when each pause began, in order
	cut    bool
	hang   bool
	dead   bool
	// storeCut: only the lease table is out of reach (storeHang: its calls hang), while
	// Kinesis still answers, so the instance goes on reading and handing out records.
	storeCut  bool
	storeHang bool
	// cpThrottled: the lease table refuses the instance's checkpoint writes (throttling its shard
	// rows) while it still answers its other calls.
	cpThrottled bool
}

// Pause stops the instance until Resume.
func (g *Gate) Pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.resume == nil {
		g.resume = make(chan struct{})
		g.began = append(g.began, time.Now())
	}
}

// Resume lets a paused instance run again: everything that waited runs at once.
func (g *Gate) Resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.resume != nil {
		close(g.resume)
		g.resume = nil
	}
}

// PauseBegan reports whether a pause of the instance began between from and to (both included).
func (g *Gate) PauseBegan(from, to time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, b := range g.began {
		if !b.Before(from) && !b.After(to) {
			return true
		}
	}
	return false
}

// Cut cuts the instance off (hang: its calls block until their context ends; else they fail
// at once), or reconnects it.
func (g *Gate) Cut(cut, hang bool) {
	g.mu.Lock()
	g.cut, g.hang = cut, hang
	g.mu.Unlock()
}

// CutStore cuts the instance off the lease table alone (cut), or ends that; hang: calls hang
// until their context ends rather than fail at once. Kinesis calls go on.
func (g *Gate) CutStore(cut, hang bool) {
	g.mu.Lock()
	g.storeCut, g.storeHang = cut, hang
	g.mu.Unlock()
}

// Crash makes every later call fail, and wakes a paused instance for good.
func (g *Gate) Crash() {
	g.mu.Lock()
	g.dead = true
	if g.resume != nil {
		close(g.resume)
		g.resume = nil
	}
	g.mu.Unlock()
}

// Dead reports whether the instance crashed.
func (g *Gate) Dead() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dead
}

// Hold blocks while the instance is paused: the goroutine calling it is the instance's.
func (g *Gate) Hold() {
	for {
		g.mu.Lock()
		ch := g.resume
		g.mu.Unlock()
		if ch == nil {
			return
		}
		<-ch
	}
}

// enter is a call about to be sent.
func (g *Gate) enter(ctx context.Context) error {
	g.Hold()
	g.mu.Lock()
	dead, cut, hang := g.dead, g.cut, g.hang
	g.mu.Unlock()
	switch {
	case dead:
		return ErrUnavailable
	case cut && hang:
		<-ctx.Done()
		return ctx.Err()
	case cut:
		return ErrUnavailable
	}
	return ctx.Err()
}

// ThrottleCheckpoints makes the lease table refuse the instance's checkpoint writes at once,
// unapplied (on), or ends that; its other calls go on. So the instance learns that a shard was
// stolen from it from the change row and its readings of the leases alone, not from a
// checkpoint write that the new holding fenced off.
func (g *Gate) ThrottleCheckpoints(on bool) {
	g.mu.Lock()
	g.cpThrottled = on
	g.mu.Unlock()
}

// throttled reports whether checkpoint writes are refused.
func (g *Gate) throttled() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cpThrottled
}

// enterStore is a lease table call about to be sent.
func (g *Gate) enterStore(ctx context.Context) error {
	if err := g.enter(ctx); err != nil {
		return err
	}
	g.mu.Lock()
	cut, hang := g.storeCut, g.storeHang
	g.mu.Unlock()
	switch {
	case cut && hang:
		<-ctx.Done()
		return ctx.Err()
	case cut:
		return ErrUnavailable
	}
	return nil
}

// leave is a call's answer arriving: seen once the instance runs.
func (g *Gate) leave(_ context.Context, err error) error {
	g.Hold()
	return err
}

// Enter and Leave are enter and leave for calls other than the lease table's (Kinesis).
func (g *Gate) Enter(ctx context.Context) error { return g.enter(ctx) }

// Leave: see Enter.
func (g *Gate) Leave() { g.Hold() }

// outcome is what becomes of one call.
type outcome uint8

const (
	ok   outcome = iota
	fail         // refused at once: not applied
	lost         // applied, the answer lost: the caller sees a timeout
	late         // the caller sees a timeout; applied after delay
)

type fault struct {
	latency time.Duration
	delay   time.Duration // late: when the write is applied, after the caller was answered
	lag     time.Duration // a listing misses items that entered the index this recently
	outcome outcome
}

// StoreFaults is one instance's seeded schedule of lease table faults: each call draws from
// it in turn. Faults apply only while On; latency always does (a base of a millisecond or
// two, so that calls of several instances interleave).
type StoreFaults struct {
	On atomic.Bool

	Latency   time.Duration // up to this much more latency per call while On
	Fail      float64       // share of calls refused at once
	Lost      float64       // share of writes applied whose answer is lost
	Late      float64       // share of writes answered with a timeout and applied later
	LateDelay time.Duration // up to this long later
	IndexLag  time.Duration // listings miss items that entered the index up to this recently

	mu  sync.Mutex
	rng *rand.Rand
}

// NewStoreFaults returns a schedule drawn from seed.
func NewStoreFaults(seed uint64) *StoreFaults {
	return &StoreFaults{rng: rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))}
}

func (f *StoreFaults) draw(write bool) fault {
	if f == nil {
		return fault{}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	x := fault{latency: time.Millisecond + time.Duration(f.rng.Int64N(int64(time.Millisecond)))}
	p := f.rng.Float64()
	extra, delay, lag := f.rng.Float64(), f.rng.Float64(), f.rng.Float64()
	if !f.On.Load() {
		return x
	}
	x.latency += time.Duration(extra * float64(f.Latency))
	x.lag = time.Duration(lag * float64(f.IndexLag))
	switch {
	case p < f.Fail:
		x.outcome = fail
	case !write:
	case p < f.Fail+f.Lost:
		x.outcome = lost
	case p < f.Fail+f.Lost+f.Late:
		x.outcome = late
		x.delay = time.Duration(delay * float64(f.LateDelay))
	}
	return x
}

// coin draws a fair coin.
func (f *StoreFaults) coin() bool {
	if f == nil {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.IntN(2) == 0
}

// later applies a write after d, as a request the sender stopped waiting for.
func (t *Table) later(d time.Duration, writer string, o op) {
	t.pending.Add(1)
	go func() { // owned by the table: Settle waits for it
		defer t.pending.Done()
		time.Sleep(d)
		t.write(writer, o, true)
	}()
}

// Settle waits until every write still in flight was applied.
func (t *Table) Settle() { t.pending.Wait() }
