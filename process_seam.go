package kinesub

import (
	"context"
	"sync/atomic"
)

// What Process needs from a shard's lifecycle, and nothing else. Process (process.go) never
// looks at a worker's fields: it asks a Message whether its shard moved on (stale), for the
// contexts of its generation (staleContext, runContext), counts a job between its checks and
// its handler's call (handing, handed), gives back a delivery it will not
// handle (abandon), and publishes what Shards shows (setProcessStatus, processStatus). The
// contexts are those of the shard's generation (lifecycle.go): invalidate ends them.

// stale reports whether m's shard moved on since m was fetched (a seek, a lost lease, a
// hand-back, Close): m must not be started.
func (m *Message) stale() bool {
	w := m.shard()
	return w == nil || m.pg.gen != w.gate.Load()
}

// staleContext returns a context that ends once m is stale.
func (m *Message) staleContext() context.Context {
	if w := m.shard(); w != nil {
		return w.staleContext(m.pg.gen)
	}
	return doneContext
}

// runContext returns a context that ends when the running work of m's generation must stop:
// at once on a seek or a lost lease, at the end of the drain on a hand-back or Close.
func (m *Message) runContext() context.Context {
	if w := m.shard(); w != nil {
		return w.workContext(m.pg.gen)
	}
	return doneContext
}

// abandon gives back a delivery that will not be handled (stale, or never started when Process
// ended), as a pull loop that leaves it does: it no longer counts as handed out, so a drain
// waiting for the consumer can end. It stays unhandled: the watermark cannot pass it. A later
// Ack or Nack of m returns ErrAlreadySettled.
func (m *Message) abandon() {
	if !m.markSettled() {
		return
	}
	if w := m.shard(); w != nil {
		w.out.done(1)
	}
}

// handing counts m as a hand-out under way, from before its last checks until its handler has
// it (handed): a drain ends the shard's hand-outs and then waits for none to be under way before
// the lease is released or the heartbeat row dropped (shard.go). Counted before the checks,
// so that a drain that finds none counted knows that any later one checks after the end.
func (m *Message) handing() {
	if w := m.shard(); w != nil {
		w.handing.add(1)
	}
}

// handed ends what handing began: m reached its handler, or failed its checks.
func (m *Message) handed() {
	if w := m.shard(); w != nil {
		w.handing.done(1)
	}
}

// setProcessStatus publishes the shard's failing record for Shards; nil when none.
func (w *worker) setProcessStatus(f *FailingRecord) { w.failing.Store(f) }

// processStatus is what Shards shows of Process on this shard: its longest-failing record, or
// nil.
func (w *worker) processStatus() *FailingRecord { return w.failing.Load() }

// procMarks is Process's mark on a page it took: its deliveries from offset from on are
// Process's, and nacked has a bit per offset, set by a Nack from a handler (nackInProcess).
type procMarks struct {
	from   uint32
	nacked []uint32
}

// own marks page f's deliveries from index from on as Process's.
func (f *fetched) own(from int) {
	f.pg.proc.Store(&procMarks{from: f.at(from).off, nacked: make([]uint32, len(f.pg.settled))})
}

// nackInProcess notes a Nack of m, unsettled and held by Process, for Process to take as its
// handler's failure (takeNack), and reports whether it did: such a Nack settles nothing.
func (m *Message) nackInProcess() bool {
	if m.pg == nil {
		return false
	}
	pm := m.pg.proc.Load()
	if pm == nil || m.off < pm.from || m.isSettled() {
		return false
	}
	atomic.OrUint32(&pm.nacked[m.off/32], 1<<(m.off%32))
	return true
}

// takeNack reports whether m was nacked by its handler since the last call, and clears that.
func (m *Message) takeNack() bool {
	pm := m.pg.proc.Load()
	if pm == nil || m.off < pm.from {
		return false
	}
	bit := uint32(1) << (m.off % 32)
	return atomic.AndUint32(&pm.nacked[m.off/32], ^bit)&bit != 0
}
