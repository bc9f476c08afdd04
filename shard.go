package kinesub

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// worker reads one leased shard and keeps its lease and checkpoint.
type worker struct {
	sub        *Subscriber
	id         string
	key        string
	log        *slog.Logger
	start      Position  // where the reader opens the shard
	startCkpt  bool      // start is the stored checkpoint
	markAt     *Position // the shard has no checkpoint: the reader records where it opens
	startDelay time.Duration

	gate atomic.Uint64 // current generation; deliveries stamped otherwise are stale

	mu      sync.Mutex
	wm      watermark
	gen     uint64 // generation of wm
	dirty   bool   // wm.mark not yet written
	lastSeq string // newest sequence number fetched in this generation

	flushSem   chan struct{}           // held while a checkpoint write runs; waits end with ctx
	written    string                  // newest checkpoint in the store as far as this worker knows
	writtenSub int                     // its sub-sequence (lease.Lease.SubSequence)
	shown      atomic.Pointer[written] // written, for Shards, which must not wait on a write

	handedOut   atomic.Int64 // handed to the consumer, not yet settled
	waitingRoom atomic.Bool
	room        chan struct{}

	seekMu   sync.Mutex
	seekReq  *seekCmd
	seekNote chan struct{}

	readCtx    context.Context // ends when the reader must stop
	cancelRead context.CancelFunc
	readerDone chan struct{}
	keeperStop chan struct{}
	keeperDone chan struct{}
	stopOnce   sync.Once
	lost       atomic.Bool
	ended      atomic.Bool  // read to SHARD_END and checkpointed
	leaving    atomic.Bool  // being handed back for balance
	lastRenew  atomic.Int64 // when the last successful renewal (or the acquiring write) was sent
	starting   atomic.Bool  // waiting out a stolen lease's previous owner (stealWait)
	rejected   atomic.Bool  // Kinesis refuses the stored checkpoint (ErrCheckpointRejected)

	proc procShard // Process's view of the shard: its generations' contexts, its failing record (process_seam.go)

	stats        *shardStats // metrics
	millisBehind atomic.Int64
	throttled    atomic.Bool
	checkpoints  atomic.Int64
}

func newWorker(s *Subscriber, id string, acquired time.Time) *worker {
	w := &worker{
		sub:        s,
		id:         id,
		key:        s.leaseKey(id),
		log:        s.log.With(logShard, id),
		room:       make(chan struct{}, 1),
		seekNote:   make(chan struct{}, 1),
		flushSem:   make(chan struct{}, 1),
		readerDone: make(chan struct{}),
		keeperStop: make(chan struct{}),
		keeperDone: make(chan struct{}),
		stats:      s.metrics.shard(id),
	}
	w.lastRenew.Store(acquired.UnixNano())
	return w
}

// bump starts a new generation of the shard: every delivery stamped with an older one is stale
// from now on and is dropped instead of handed out. It is the only place the gate moves.
func (w *worker) bump() uint64 {
	gen := w.gate.Add(1)
	w.endGeneration(gen) // Process: stop what the older generation runs (process_seam.go)
	return gen
}

// setWritten records the newest checkpoint written; called with the flush lock held (or
// before the worker starts).
func (w *worker) setWritten(seq string, sub int) {
	w.written, w.writtenSub = seq, sub
	w.shown.Store(&written{seq, sub})
}

// written is a checkpoint as Shards shows it.
type written struct {
	seq string
	sub int
}

// closed reports whether the subscription's Close has finished: its checkpoints are written
// and its leases released, so a settlement can no longer count.
func (w *worker) closed() bool {
	select {
	case <-w.sub.done:
		return true
	default:
		return false
	}
}

func (w *worker) stopKeeper() { w.stopOnce.Do(func() { close(w.keeperStop) }) }

// settle records the consumer's verdict on m.
func (w *worker) settle(ctx context.Context, m *Message, handled bool) error {
	w.handedOut.Add(-1)
	if !handled {
		return nil
	}
	w.mu.Lock()
	if m.pg.gen != w.gen {
		w.mu.Unlock()
		return nil
	}
	advanced := w.wm.settle(m.index())
	roomy := w.noteSettled(advanced)
	w.mu.Unlock()
	return w.settled(ctx, advanced, roomy)
}

// noteSettled marks the watermark for the flusher when acks advanced it, and reports whether
// the shard has room to read again. Called with w.mu held.
func (w *worker) noteSettled(advanced bool) bool {
	if advanced {
		w.dirty = true
	}
	return w.hasRoom()
}

// settled follows up on acks, outside w.mu: it wakes a reader waiting for room, and writes at
// once with WithCheckpointInterval(0). A waiting reader is woken only once the room it waits for
// is there (which includes every delivery settled, what a finishing reader waits for), not by
// every ack.
func (w *worker) settled(ctx context.Context, advanced, roomy bool) error {
	if roomy && w.waitingRoom.Load() {
		select {
		case w.room <- struct{}{}:
		default:
		}
	}
	if advanced && w.sub.cfg.checkpointInterval == 0 {
		return w.flush(ctx)
	}
	return nil
}

// run reads the shard until it ends, the lease is lost or the subscription stops.
func (w *worker) run() {
	s := w.sub
	defer s.readers.Done()
	defer close(w.readerDone)
	defer w.cancelRead()
	waited := true
	if w.startDelay > 0 {
		t := time.NewTimer(w.startDelay)
		select {
		case <-t.C:
		case <-w.readCtx.Done():
			waited = false // still starting: Close must not release the lease (retire)
		}
		t.Stop()
	}
	if waited {
		w.starting.Store(false)
	}
	// Until a response shows their size, records count as the largest the service takes.
	src := w.sub.sourceFor(w)
	defer src.close()
	r := reader{w: w, src: src, ctx: w.readCtx, gen: w.gate.Load(), start: w.start, fromCheckpoint: w.startCkpt, recordSize: maxRecordBytes,
		ask: int(w.sub.cfg.batchSize)}
	finished := r.loop()
	switch {
	case finished:
		w.ended.Store(true)
		w.stopKeeper()
		<-w.keeperDone
		w.releaseFinished()
		s.forget(w, true)
	case w.lost.Load():
		// A checkpoint write still in flight must end before the shard can be taken again:
		// landing after a new reader's writes, it would move the checkpoint back.
		<-w.keeperDone
		s.forget(w, false)
	}
}

// refill is the room below its cap that a shard's reader waits for before it fetches again:
// a batch, or half the cap when that is smaller. Fetches never carry a shard past its cap, and
// a consumer at the cap that acks one record at a time does not turn into one small GetRecords
// call (of the shard's 5 per second) per ack.
func (s *Subscriber) refill() int { return min(int(s.cfg.batchSize), max(s.cfg.maxInFlight/2, 1)) }

// hasRoom reports whether the shard is far enough below both of its caps to fetch again: refill
// deliveries below WithMaxInFlight, and at most half of WithMaxInFlightBytes held. Called with
// w.mu held.
func (w *worker) hasRoom() bool {
	c := &w.sub.cfg
	return c.maxInFlight-w.wm.unsettled() >= w.sub.refill() && w.wm.bytes <= c.maxInFlightBytes/2
}

// describe fills in what this shard's reader knows for Shards: its state and progress. It
// takes only the shard's own lock, so a status read never waits on the subscriber.
func (w *worker) describe(st *ShardStatus) {
	switch {
	case w.leaving.Load():
		st.State = ShardHandingBack
	case w.starting.Load():
		st.State = ShardStarting
	case w.rejected.Load():
		st.State = ShardCheckpointRejected
	default:
		st.State = ShardReading
	}
	w.mu.Lock()
	st.LastDelivered = w.lastSeq
	st.InFlight = w.wm.inFlight()
	st.InFlightBytes = w.wm.bytes
	w.mu.Unlock()
	if p := w.shown.Load(); p != nil {
		st.LastCheckpoint, st.LastCheckpointSubSequence = p.seq, p.sub
	}
	st.MillisBehindLatest = w.millisBehind.Load()
	st.Throttled = w.throttled.Load()
	st.WaitingForAcks = w.waitingRoom.Load()
	st.Checkpoints = w.checkpoints.Load()
	st.Failing = w.processStatus() // Process's longest-failing record (process_seam.go)
}
