package kinesub

import (
	"context"
	"sync"
	"sync/atomic"
)

// What Process needs from a shard's lifecycle, and nothing else. Process (process.go) never
// looks at a worker's fields: it asks a Message whether its shard moved on (stale), for the
// contexts of its generation (staleContext, runContext), gives back a delivery it will not
// handle (abandon), and publishes what Shards shows (setProcessStatus, processStatus).
//
// The provisional implementation keeps, per shard, the contexts of its current generation,
// made on first use and ended by bump:
//   - the stale context ends as soon as the gate moves past the generation, whatever moved it:
//     Process then stops starting or retrying its records and gives back those it holds, so a
//     drain waiting on the handed-out count can end;
//   - the run context ends at once on a seek or a lost lease, and at the end of the drain on a
//     hand-back or Close (bumpDraining … endDrain), whose drains let running handlers finish.

// procShard is a shard's Process state. Its zero value is ready to use.
type procShard struct {
	mu       sync.Mutex
	cur      *generation   // the current generation's contexts; nil until asked for
	draining []*generation // generations moved on whose handlers may run until the drain ends
	drain    bool          // a hand-back or Close is draining the shard

	status atomic.Pointer[FailingRecord] // written by Process, read by Shards
}

// generation is one generation of a shard as Process sees it.
type generation struct {
	gen              uint64
	stale, run       context.Context
	endStale, endRun context.CancelFunc
}

// doneCtx is an ended context: the contexts of a generation already moved on.
var doneCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// stale reports whether m's shard moved on since m was fetched (a seek, a lost lease, a
// hand-back, Close): m must not be started.
func (m *Message) stale() bool {
	w := m.shard()
	return w != nil && m.pg.gen != w.gate.Load()
}

// staleContext returns a context that ends once m is stale.
func (m *Message) staleContext() context.Context {
	if g := m.generation(); g != nil {
		return g.stale
	}
	return doneCtx
}

// runContext returns a context that ends when the running work of m's generation must stop:
// at once on a seek or a lost lease, at the end of the drain on a hand-back or Close.
func (m *Message) runContext() context.Context {
	if g := m.generation(); g != nil {
		return g.run
	}
	return doneCtx
}

// generation returns the contexts of m's generation, or nil when m is stale.
func (m *Message) generation() *generation {
	w := m.shard()
	if w == nil {
		return nil
	}
	p := &w.proc
	p.mu.Lock()
	defer p.mu.Unlock()
	// Under p.mu, so that endGeneration, which takes it after the gate moved, ends what is
	// made here: a generation is only made while it is the gate's.
	if m.pg.gen != w.gate.Load() {
		return nil
	}
	if p.cur != nil && p.cur.gen != m.pg.gen {
		// The gate moved and endGeneration has not run yet: it will end this one's run.
		p.cur.endStale()
		p.draining = append(p.draining, p.cur)
		p.cur = nil
	}
	if p.cur == nil {
		g := &generation{gen: m.pg.gen}
		g.stale, g.endStale = context.WithCancel(context.Background())
		g.run, g.endRun = context.WithCancel(context.Background())
		p.cur = g
	}
	return p.cur
}

// endGeneration is bump's hook: the gate just moved to gen. The older generation's stale
// context ends now; its run context too, unless a hand-back or Close drains the shard (then at
// endDrain), or the lease was lost.
func (w *worker) endGeneration(gen uint64) {
	p := &w.proc
	p.mu.Lock()
	defer p.mu.Unlock()
	if g := p.cur; g != nil && g.gen < gen {
		p.cur = nil
		g.endStale()
		p.draining = append(p.draining, g)
	}
	if !p.drain || w.lost.Load() {
		p.endRuns()
	}
}

// bumpDraining moves the gate for a hand-back or Close: running handlers of the generation
// moved on keep their context until endDrain.
func (w *worker) bumpDraining() uint64 {
	w.proc.mu.Lock()
	w.proc.drain = true
	w.proc.mu.Unlock()
	return w.bump()
}

// endDrain ends the drain that bumpDraining began: the handlers still running are cancelled.
func (w *worker) endDrain() {
	p := &w.proc
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drain = false
	p.endRuns()
}

// endRuns ends the run contexts of the generations moved on. Called with p.mu held.
func (p *procShard) endRuns() {
	for _, g := range p.draining {
		g.endRun()
	}
	p.draining = nil
}

// abandon gives back a delivery that will not be handled (stale, or never started when Process
// ended), as a pull loop that leaves it does: it no longer counts as handed out, so a drain
// waiting for the consumer can end. It stays unhandled: the watermark cannot pass it. A later
// Ack or Nack of m returns ErrAlreadySettled.
func (m *Message) abandon() {
	if !atomic.CompareAndSwapUint32(&m.settled, 0, 1) {
		return
	}
	if w := m.shard(); w != nil {
		w.handedOut.Add(-1)
	}
}

// setProcessStatus publishes the shard's failing record for Shards; nil when none.
func (w *worker) setProcessStatus(f *FailingRecord) { w.proc.status.Store(f) }

// processStatus is what Shards shows of Process on this shard: its longest-failing record, or
// nil.
func (w *worker) processStatus() *FailingRecord { return w.proc.status.Load() }
