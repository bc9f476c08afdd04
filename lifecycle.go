package kinesub

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gostream/kinesub/lease"
)

// A shard held here lives through one value of shardState, which moveTo alone changes, and
// ends early only through invalidate:
//
//	starting ──▶ reading ──▶ ended                 read to SHARD_END and checkpointed
//	    │           │
//	    └───────────┴──▶ draining ──▶ released      hand-back or Close: settle, checkpoint, release
//	    │           │       │
//	    └───────────┴───────┴──▶ lost               the lease was lost: no further write
//
// Everything that asks whether the shard may read, checkpoint or be handed back asks the state.
type shardState uint32

const (
	// stateStarting: the lease was stolen from a live owner; the reader waits until that owner
	// has surely stopped reading (stealWait).
	stateStarting shardState = iota + 1
	// stateReading: the reader reads; the keeper renews the lease and writes checkpoints.
	stateReading
	// stateDraining: handed back or closing: nothing more is read; the deliveries handed out
	// may settle, then the last checkpoint is written and the lease released.
	stateDraining
	// stateReleased: given up cleanly (or, stolen and never read, left to expire).
	stateReleased
	// stateLost: the lease was taken over or not renewed in time: nothing more is delivered or
	// written; the next owner replays from the last checkpoint.
	stateLost
	// stateEnded: read to its end; SHARD_END is written, so its children may start.
	stateEnded
)

func (st shardState) String() string {
	switch st {
	case stateStarting:
		return "starting"
	case stateReading:
		return "reading"
	case stateDraining:
		return "draining"
	case stateReleased:
		return "released"
	case stateLost:
		return "lost"
	case stateEnded:
		return "ended"
	}
	return fmt.Sprintf("shardState(%d)", uint32(st))
}

// next lists the states each state may move to.
var next = map[shardState][]shardState{
	stateStarting: {stateReading, stateDraining, stateLost},
	stateReading:  {stateDraining, stateLost, stateEnded},
	stateDraining: {stateReleased, stateLost, stateEnded},
}

// terminal reports whether st is final: the shard is given up here.
func (st shardState) terminal() bool { return len(next[st]) == 0 }

// mayCheckpoint reports whether a shard in state st may write its checkpoint.
func (st shardState) mayCheckpoint() bool { return st == stateReading || st == stateDraining }

// state returns the shard's state.
func (w *worker) state() shardState { return shardState(w.st.Load()) }

// moveTo moves the shard to state to, for the reason why, and reports whether it did: a
// transition the diagram lacks (from a terminal state, or a second loss) changes nothing.
// It is the only place the state changes; the metrics, the log lines and the ErrLeaseLost
// report of a transition are made here.
func (w *worker) moveTo(to shardState, why string) bool {
	w.lifeMu.Lock()
	ok := w.moveLocked(to)
	w.lifeMu.Unlock()
	if ok {
		w.noteTransition(to, why)
	}
	return ok
}

// moveLocked changes the state, with lifeMu held, and reports whether it did.
func (w *worker) moveLocked(to shardState) bool {
	from := w.state()
	for _, st := range next[from] {
		if st == to {
			w.st.Store(uint32(to))
			if to == stateLost {
				close(w.lost)
			}
			return true
		}
	}
	return false
}

// noteTransition reports a transition to to: metrics, log, Errors. Giving a lease up is logged
// by the caller, which knows whether the release was written.
func (w *worker) noteTransition(to shardState, why string) {
	switch to {
	case stateReading:
		w.log.Info("reading", "why", why)
	case stateLost:
		w.stats.transition(transLost)
		w.log.Info("lease lost", "why", why)
		w.env.report(&ShardError{Stream: w.env.stream, Shard: w.id, Op: OpLease, Err: fmt.Errorf("%w: %s", ErrLeaseLost, why)})
	case stateEnded:
		w.log.Info("shard finished")
	}
}

// cause is why a shard's current generation ends.
type cause uint8

const (
	// causeSeek: a Seek moved the shard; it goes on reading from the new position.
	causeSeek cause = iota + 1
	// causeLoss: the lease was lost; nothing more is delivered or written.
	causeLoss
	// causeHandBack: balancing hands the lease back: drain, checkpoint, release.
	causeHandBack
	// causeClose: the subscription closes: drain, checkpoint, release.
	causeClose
)

// ending is how a draining shard ends: what it waits for and what bounds its last writes.
type ending struct {
	cause cause
	why   string
	// drain bounds the wait for the deliveries handed out to settle; write bounds the last
	// checkpoint and the release. nil for a hand-back, whose shard makes its own from
	// handBackDrain and the request timeout.
	drain, write context.Context
	// Close only: each closing shard calls drained.Done once its deliveries settled (or drain
	// ended), nothing it handed out is still on its way to the consumer (worker.handing) and
	// its last checkpoint was written, then releases its lease once release is closed: the
	// subscriber drops its heartbeat row in between, so that peers take every shard at once
	// when they see the releases. A shard still draining after a hand-back joins drained too,
	// and calls Done once its lease is released (passBarrier). errs collects the last writes'
	// errors for Close's result.
	drained *sync.WaitGroup
	release <-chan struct{}
	errs    *errList
	// gen, if not 0, is the only generation a seek ends: a shard that moved on since is left.
	gen uint64
}

// errList collects errors from several goroutines.
type errList struct {
	mu   sync.Mutex
	errs []error
}

func (l *errList) add(err error) {
	if err == nil {
		return
	}
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

// invalidate ends the current generation of each shard of ws for the cause end.cause, and
// returns once nothing fetched in those generations can reach the consumer any more: the
// gate of each is moved (a pull loop drops what it takes of the old generation), and the
// Messages dispatcher has re-checked the delivery it holds (Messages has no buffer). It is
// the one way a generation ends, and so the one place a gate moves:
//
//   - causeSeek: the reader is told to reopen (reposition, in seek.go), and the handlers of
//     the old generation's records are told to stop (workContext).
//   - causeLoss: the shard is lost: its reader stops, and so do its handlers and keeper.
//   - causeHandBack, causeClose: the shard drains: its reader stops; its handlers may finish,
//     and the deliveries handed out settle, until end.drain ends; then, once nothing that
//     passed its checks is still on its way to the consumer, the shard's life writes the last
//     checkpoint and releases the lease (drain). Close also waits for a shard that was handed
//     back earlier and still drains, before it drops the heartbeat row.
//
// It returns each shard's new generation, or 0 for a shard whose state the cause does not
// apply to (already lost, finished, given up; or, for a seek, draining; for a hand-back, not
// reading).
func (env *shardEnv) invalidate(ws []*worker, end *ending) []uint64 {
	gens := make([]uint64, len(ws))
	moved := false
	for i, w := range ws {
		gens[i] = w.endGeneration(end)
		moved = moved || gens[i] != 0
	}
	if moved {
		env.fence()
	}
	if end.cause == causeLoss {
		// Reported once nothing of the shard can reach the consumer any more.
		for i, w := range ws {
			if gens[i] != 0 {
				w.noteTransition(stateLost, end.why)
			}
		}
	}
	return gens
}

// endGeneration applies end to the shard's state and moves its gate; see invalidate.
func (w *worker) endGeneration(end *ending) uint64 {
	w.lifeMu.Lock()
	st := w.state()
	ok := false
	switch end.cause {
	case causeSeek:
		ok = (st == stateStarting || st == stateReading) && (end.gen == 0 || end.gen == w.gate.Load())
	case causeLoss:
		ok = w.moveLocked(stateLost)
	case causeHandBack:
		ok = st == stateReading && w.moveLocked(stateDraining)
	case causeClose:
		ok = (st == stateStarting || st == stateReading) && w.moveLocked(stateDraining)
		if !ok && st == stateDraining && end.drained != nil {
			// Handed back and still draining: Close drops the heartbeat row only once that
			// drain wrote its last checkpoint and released the lease (drain passes the barrier).
			w.joinBarrier(end.drained)
		}
	}
	if !ok {
		w.lifeMu.Unlock()
		return 0
	}
	gen := w.gate.Add(1)
	w.work.endStale()
	switch end.cause {
	case causeSeek, causeLoss:
		w.work.cancel()
		w.work = newWork(gen)
	default:
		w.end = end
		if end.drained != nil {
			w.joinBarrier(end.drained)
		}
	}
	w.lifeMu.Unlock()
	if end.cause != causeSeek {
		w.cancelRead()
	}
	return gen
}

// joinBarrier makes a closing subscription's barrier wait for this shard (passBarrier), unless
// the shard passed already. Called with lifeMu held.
func (w *worker) joinBarrier(b *sync.WaitGroup) {
	if w.passed || w.barrier != nil {
		return
	}
	w.barrier = b
	b.Add(1)
}

// lose ends the shard after its lease was lost: no further checkpoint, and nothing more
// delivered from it, not even what the dispatcher holds. The new owner replays from the last
// checkpoint.
func (w *worker) lose(why string) {
	w.env.invalidate([]*worker{w}, &ending{cause: causeLoss, why: why})
}

// work is what the running work (Process's handlers) on one generation's records is told
// through: stale ends as soon as the generation ends, whatever ends it (nothing more of it may
// start); ctx ends when its running work must stop, at once on a seek or a lost lease, at the
// end of the drain on a hand-back or Close.
type work struct {
	gen      uint64
	ctx      context.Context
	cancel   context.CancelFunc
	stale    context.Context
	endStale context.CancelFunc
}

func newWork(gen uint64) *work {
	wk := &work{gen: gen}
	wk.ctx, wk.cancel = context.WithCancel(context.Background())
	wk.stale, wk.endStale = context.WithCancel(context.Background())
	return wk
}

// workContext returns the context for running work on a record of generation gen: done at once
// when that generation was sought away from or the lease lost, and, for a hand-back or Close,
// once their drain ends.
func (w *worker) workContext(gen uint64) context.Context {
	w.lifeMu.Lock()
	defer w.lifeMu.Unlock()
	if w.work.gen != gen {
		return doneContext
	}
	return w.work.ctx
}

// staleContext returns a context that ends once generation gen ended (done already if it has).
func (w *worker) staleContext(gen uint64) context.Context {
	w.lifeMu.Lock()
	defer w.lifeMu.Unlock()
	if w.work.gen != gen {
		return doneContext
	}
	return w.work.stale
}

// stopWork tells the running work of the current generation to stop: a drain has ended, or
// the shard's life here (its last call, in a final state).
func (w *worker) stopWork() {
	w.lifeMu.Lock()
	w.work.endStale()
	w.work.cancel()
	final := w.state().terminal()
	w.lifeMu.Unlock()
	if final {
		w.letGo()
	}
}

// letGo drops the shard's record of its deliveries once nothing is written for it any more:
// a Message kept after that (after Close, or once its lease was lost or given up) keeps its
// own record and this worker, not the watermark's entry for every record fetched since the
// last seek and the decoded blocks their sequence numbers point into. A late Ack finds nothing
// to move.
func (w *worker) letGo() {
	w.mu.Lock()
	w.wm = watermark{}
	w.lastSeq = ""
	w.mu.Unlock()
}

// doneContext is a context that is already done.
var doneContext = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// outstanding counts a shard's deliveries handed to the consumer and not yet settled
// (worker.out), or its hand-outs under way (worker.handing). A drain waits on a condition, not
// a poll: the decrement that brings the count to zero wakes it.
type outstanding struct {
	n    atomic.Int64
	zero atomic.Pointer[chan struct{}] // set by a waiting drain; closed by whoever reaches zero
}

// add counts n deliveries handed out.
func (o *outstanding) add(n int64) { o.n.Add(n) }

// done counts n deliveries settled (or taken back), and wakes a drain at zero.
func (o *outstanding) done(n int64) {
	if o.n.Add(-n) == 0 {
		if ch := o.zero.Swap(nil); ch != nil {
			close(*ch)
		}
	}
}

// count returns the deliveries handed out and not settled.
func (o *outstanding) count() int64 { return o.n.Load() }

// awaitZero blocks until no delivery is outstanding, or stop or ctx ends first (false).
// One goroutine waits at a time.
func (o *outstanding) awaitZero(ctx context.Context, stop <-chan struct{}) bool {
	for {
		ch := make(chan struct{})
		o.zero.Store(&ch)
		// Stored before the count is read: a done that reaches zero after this read sees
		// the channel and closes it.
		if o.n.Load() == 0 {
			o.zero.CompareAndSwap(&ch, nil)
			return true
		}
		select {
		case <-ch:
		case <-stop:
			o.zero.CompareAndSwap(&ch, nil)
			return false
		case <-ctx.Done():
			o.zero.CompareAndSwap(&ch, nil)
			return false
		}
	}
}

// tenureOf returns the holding a shard's writes are conditional on.
func (w *worker) tenureOf() lease.Tenure { return *w.tenure.Load() }
