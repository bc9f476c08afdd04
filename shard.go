package kinesub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gostream/kinesub/internal/kinesisiface"
	"github.com/gostream/kinesub/internal/kpl"
	"github.com/gostream/kinesub/internal/protocol"
	"github.com/gostream/kinesub/lease"
)

// shardEnv is what the shards of one subscription share: settings, the lease store, and the
// few services a shard calls on. A shard reaches its subscription only through it.
type shardEnv struct {
	cfg     *config // read only
	store   lease.Store
	client  kinesisiface.Kinesis
	stream  string
	ref     streamRef
	hand    *handoff
	metrics *metrics
	tracer  *tracer      // nil unless WithTracerProvider (tracing.go)
	log     *slog.Logger // the subscription's
	// bgCtx ends at Close's deadline: it bounds every store call a shard makes on its own.
	// runCtx ends when the subscription stops reading.
	bgCtx, runCtx context.Context
	done          <-chan struct{} // closed once Close has finished

	report    func(*ShardError)
	reportAll func(error)
	changed   func(context.Context)       // bumps the change row (changes.go)
	announce  func(context.Context) error // bumps it, and says whether it did
	fence     func()                      // fences the Messages dispatcher (dispatch.go)
	fail      func(error)                 // ends the subscription with a fatal error
	loads     *loadBook                   // what the shards held here fetch (load.go)
	forget    func(w *worker)             // the shard's life is over (coordinator.go)
	source    func(w *worker) shardSource
}

// loggerFor returns the logger of shard id.
func (env *shardEnv) loggerFor(id string) *slog.Logger { return env.log.With(logShard, id) }

// worker is one shard held here: its lifecycle (lifecycle.go), its reader (reader.go), its
// lease keeper (keeper.go) and its watermark and checkpoints (checkpoint.go).
type worker struct {
	env    *shardEnv
	id     string
	key    string                       // its lease's key
	tenure atomic.Pointer[lease.Tenure] // the holding its writes to the lease are conditional on: tenureOf
	log    *slog.Logger
	stats  *shardStats
	load   *shardMeter // what this holding fetches (load.go)

	// Lifecycle: state and gate change only in lifecycle.go.
	lifeMu sync.Mutex
	st     atomic.Uint32 // a shardState, written with lifeMu held
	gate   atomic.Uint64 // the generation; deliveries stamped with another are stale
	work   *work         // the current generation's running work; under lifeMu
	end    *ending       // set when the shard starts draining; under lifeMu
	// barrier is a closing subscription's (ending.drained), set when Close ends the shard or
	// finds it draining after a hand-back; passed: the shard passed it, or will not hold one
	// up. Both under lifeMu.
	barrier    *sync.WaitGroup
	passed     bool
	lost       chan struct{} // closed when the lease is lost
	readCtx    context.Context
	cancelRead context.CancelFunc
	readerDone chan struct{} // closed when the reader has returned (or will never run)
	// The flusher, started and waited for by life: it closes flusherDone when it returns
	// (closed from the start without a flusher).
	flusherDone chan struct{}
	stopKeep    chan struct{}
	stopOnce    sync.Once
	out         outstanding // deliveries handed out, not settled
	// handing counts the hand-outs under way: past their checks and not yet handed to the
	// consumer's code (Process's jobs, the pull loops' records). A drain releases the lease
	// only once it reached zero after the shard's hand-outs ended; leftBound: it did not in
	// time, and the lease was left bound to the heartbeat row, which Close then keeps.
	handing   outstanding
	leftBound atomic.Bool

	// Where the reader opens the shard, chosen when the lease was taken (coordinator.go).
	start     Position
	startCkpt bool      // start is the stored checkpoint
	markAt    *Position // the shard has no checkpoint: the reader records where it opens
	// fromStart: the reader opened at the initial position and no seek moved it since; a
	// shard read to its end so passes that position on to its children (startInput).
	fromStart  atomic.Bool
	stolen     bool // the lease was taken pending: read only after startDelay
	startDelay time.Duration
	// The shard's hash-key range, from the listing, when it is not the whole space: the
	// reader drops user records of KPL aggregates outside it.
	keys *kpl.KeyRange

	// The watermark (checkpoint.go), under mu.
	mu          sync.Mutex
	wm          watermark
	wmGen       uint64 // the generation wm tracks: a seek starts a new one
	dirty       bool   // wm.mark not yet written
	lastSeq     string // newest sequence number fetched in this generation
	waitingRoom atomic.Bool
	room        chan struct{}

	// Checkpoint writes (checkpoint.go).
	flushSem    chan struct{}    // held while a checkpoint write runs; waits end with ctx
	writes      int64            // checkpoint writes sent in this holding (lease.Store.CheckpointOrdered); under flushSem
	endTried    bool             // a SHARD_END write was sent in this holding (finish); under flushSem
	written     lease.Checkpoint // the newest checkpoint in the store, as far as this worker knows
	shown       atomic.Pointer[lease.Checkpoint]
	checkpoints atomic.Int64

	// announce, for a lease stolen for balance: the change row must move before the wait for the
	// previous owner (stealWait) begins, so that the victim notices (tenure.go).
	announce bool

	// Seeks waiting for the reader (seek.go).
	seekMu   sync.Mutex
	seekReq  *seekCmd
	seekNote chan struct{}

	// What the reader saw last, for Shards and the metrics.
	millisBehind atomic.Int64
	throttled    atomic.Bool
	quiet        atomic.Bool // the source polls at the idle poll interval (page.quiet)
	rejected     atomic.Bool // Kinesis refuses the stored checkpoint (ErrCheckpointRejected)

	failing atomic.Pointer[FailingRecord] // the record Process has retried longest; for Shards

	listen listening // the ShardListener's calls so far (listener.go); life's goroutine only
}

// newWorker returns the worker of shard id, taken with lease l. A stolen (pending) lease is
// read only stealWait after a change-row move that landed after the steal: after the move
// known at after (pending.go), or, without one, after a move of its own.
func newWorker(env *shardEnv, id string, l lease.Lease, stolen bool, after time.Time, waitTTL time.Duration) *worker {
	w := &worker{
		env:         env,
		id:          id,
		key:         l.Key,
		log:         env.loggerFor(id),
		stats:       env.metrics.shard(id),
		load:        env.loads.took(id),
		work:        newWork(0),
		lost:        make(chan struct{}),
		readerDone:  make(chan struct{}),
		stopKeep:    make(chan struct{}),
		flusherDone: make(chan struct{}),
		room:        make(chan struct{}, 1),
		seekNote:    make(chan struct{}, 1),
		flushSem:    make(chan struct{}, 1),
	}
	t := l.Tenure()
	w.tenure.Store(&t)
	w.st.Store(uint32(stateReading))
	if stolen {
		w.st.Store(uint32(stateStarting))
		w.stolen = true
		wait := protocol.StealWait(max(waitTTL, env.cfg.leaseTTL))
		w.startDelay = wait
		w.announce = true
		if !after.IsZero() {
			w.startDelay = max(0, wait-time.Since(after))
			w.announce = false
		}
	}
	w.readCtx, w.cancelRead = context.WithCancel(env.runCtx)
	w.setWritten(l.Checkpoint)
	return w
}

// life runs the shard from its lease taken to the shard given up, as its state says: it waits
// out a stolen lease's previous owner, keeps the lease, reads, and then finishes, drains or
// stops. The coordinator starts it and waits for it; it waits for the goroutines it starts.
func (w *worker) life() {
	defer w.env.forget(w)
	defer func() { w.env.loads.ended(w.id, w.load, w.endedBy(causeHandBack)) }()
	read := w.awaitStart()
	// The flusher starts once the holding is settled (a pending lease binds in awaitStart):
	// nothing is fetched, so nothing is written, before.
	if d := w.env.cfg.checkpointInterval; d > 0 && read {
		go w.flushEvery(d) // owned by life, which waits for flusherDone
	} else {
		close(w.flusherDone)
	}
	defer func() { <-w.flusherDone }()
	if read {
		w.shardStarted(w.start, false)
		w.read()
	}
	close(w.readerDone)
	switch w.state() {
	case stateDraining:
		// A lease stolen and never read is left to expire: its previous owner may still read.
		w.drain(w.stolen && !read)
	case stateEnded: // also when a Close came as the shard ended
		w.shardStopped(StopShardEnded) // called by the reader already, before SHARD_END
		w.passBarrier()
		w.stopKeeping(context.Background())
		w.releaseFinished()
	default: // lost
		w.shardStopped(StopLeaseLost)
		w.passBarrier()
		// A checkpoint write still in flight ends before the shard can be taken again here.
		w.stopKeeping(context.Background())
	}
	w.stopWork()
}

// passBarrier tells a closing subscription that this shard will not hold up the drop of its
// heartbeat row (see ending.drained), once: it wrote its last checkpoint and nothing of it is
// handed out any more, or it was lost or finished.
func (w *worker) passBarrier() {
	w.lifeMu.Lock()
	b := w.barrier
	passed := w.passed
	w.passed = true
	w.lifeMu.Unlock()
	if b != nil && !passed {
		b.Done()
	}
}

// awaitStart waits, for a lease stolen from a live owner, until that owner has surely stopped
// reading, and reports whether the shard may be read: false when it was invalidated first. A
// steal for balance first moves the change row, until that succeeds: the victim learns of the
// steal from it, and stops reading at most 2/3 TTL after (tenure.go).
func (w *worker) awaitStart() bool {
	if w.state() != stateStarting {
		return w.state() == stateReading
	}
	w.env.cfg.probes.at("announcing", w.id, w.tenureOf())
	for attempt := 0; w.announce; attempt++ {
		if err := w.env.announce(w.readCtx); err == nil {
			w.env.cfg.probes.at("announced", w.id, w.tenureOf())
			break
		} else if w.readCtx.Err() == nil {
			w.env.report(&ShardError{Stream: w.env.stream, Shard: w.id, Op: OpSteal, Err: fmt.Errorf("change row not moved after the steal, reading waits: %w", err)})
		}
		t := time.NewTimer(backoff(attempt))
		select {
		case <-t.C:
		case <-w.readCtx.Done():
			t.Stop()
			return false
		}
	}
	t := time.NewTimer(w.startDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.readCtx.Done():
		return false
	}
	return w.bind() && w.moveTo(stateReading, "the previous owner has stopped")
}

// bind makes the pending lease the shard's, bound to this subscriber's heartbeat row, so that
// it may read: a Steal at the pending holding's counter without an expiry. A write whose
// outcome is not known is resolved by a strong read; one that did not land is tried again until
// the shard is invalidated. It reports false when the lease went to another holding meanwhile
// (the shard is then lost) or the shard was invalidated.
func (w *worker) bind() bool {
	env := w.env
	t := w.tenureOf()
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(w.readCtx, env.cfg.requestTimeout)
		ok, err := env.store.Steal(ctx, w.key, t.Owner, t.Counter, 0)
		var l lease.Lease
		if err == nil && !ok || err != nil && w.readCtx.Err() == nil {
			var rerr error
			if l, rerr = env.store.Read(ctx, w.key); rerr == nil {
				err = nil
				ok = boundFrom(l, t)
			} else {
				err = errorsJoin(err, rerr)
			}
		}
		cancel()
		switch {
		case ok:
			bound := lease.Tenure{Owner: t.Owner, Counter: t.Counter + 1}
			w.tenure.Store(&bound)
			return true
		case w.readCtx.Err() != nil:
			return false
		case err == nil && l.Tenure() != t:
			w.lose("taken over before it was read")
			return false
		case err != nil:
			env.report(&ShardError{Stream: env.stream, Shard: w.id, Op: OpSteal, Err: fmt.Errorf("lease not bound after its wait, reading waits: %w", err)})
		}
		timer := time.NewTimer(backoff(attempt))
		select {
		case <-timer.C:
		case <-w.readCtx.Done():
			timer.Stop()
			return false
		}
	}
}

// read runs the reader until the shard ends or the reader must stop.
func (w *worker) read() {
	src := w.env.source(w)
	defer src.close()
	// Until a response shows their size, records count as the largest the service takes.
	r := reader{w: w, src: src, ctx: w.readCtx, gen: w.gate.Load(), start: w.start, fromCheckpoint: w.startCkpt,
		recordSize: maxRecordBytes, ask: w.env.cfg.batchSize, keys: w.keys}
	r.loop()
}

// stopKeeping stops the flusher, and waits for it until ctx ends: a flush hung on the store
// ends by itself within the request timeout (life waits for it before it returns).
func (w *worker) stopKeeping(ctx context.Context) {
	w.stopOnce.Do(func() { close(w.stopKeep) })
	select {
	case <-w.flusherDone:
	case <-ctx.Done():
	}
}

// drain ends a shard handed back or closing: once the deliveries handed out settled (or the
// drain's time is up), it writes the last checkpoint and releases the lease, so that the next
// owner resumes right after what was acked, at once; or, with expire, it leaves the lease to
// expire. A record that passed its checks before the drain ended and has not reached the
// consumer yet holds the release up: until it has, the next owner could read the shard while
// it is handed out here. If it does not within the subscription's bound (Close's deadline),
// the lease is left bound to the heartbeat row, which Close then keeps: peers take the shard
// only once the row stood still for 3/4 TTL, by when the record was handed out.
func (w *worker) drain(expire bool) {
	w.lifeMu.Lock()
	end := w.end
	w.lifeMu.Unlock()
	defer w.passBarrier() // a hand-back's: a closing subscription waits for its release
	drain, write := end.drain, end.write
	quietBy := end.write // how long a hand-out under way may hold up the release
	if end.cause == causeHandBack {
		var cancel context.CancelFunc
		drain, cancel = context.WithTimeout(w.env.bgCtx, handBackDrain)
		defer cancel()
		quietBy = w.env.bgCtx
	}
	w.env.cfg.probes.at("draining", w.id, w.tenureOf())
	if n := w.out.count(); n > 0 {
		until, _ := drain.Deadline()
		w.log.Info("waiting for deliveries to be settled before the last checkpoint", "unsettled", n, "why", end.why, "until", until)
		if !w.out.awaitZero(drain, w.lost) {
			w.env.cfg.probes.at("gave-up", w.id, w.tenureOf())
			w.log.Info("gave up waiting for deliveries to be settled: the next owner delivers them again",
				"unsettled", w.out.count(), "why", end.why)
		}
	}
	w.stopWork()
	// Nothing of the shard passes its checks any more (its gate moved, its run is over): what
	// did before and is still on its way is waited for.
	if !w.handing.awaitZero(quietBy, w.lost) && w.state() == stateDraining {
		w.leftBound.Store(true)
		w.log.Warn("a record that passed its checks has not reached the consumer: the lease is left bound to the heartbeat row", "why", end.why)
	}
	if end.cause == causeHandBack { // the last writes' time runs from the drain's end
		var cancel context.CancelFunc
		write, cancel = context.WithTimeout(w.env.bgCtx, 2*w.env.cfg.requestTimeout)
		defer cancel()
	}
	w.stopKeeping(write)
	// The last checkpoint is written before a closing subscriber drops its heartbeat row: from
	// then, peers may take its shards.
	var err error
	if !expire {
		err = w.flush(write)
	}
	// Told before the release, so that the shard's next owner starts after it.
	switch {
	case w.state() != stateDraining:
		w.shardStopped(StopLeaseLost)
	case end.cause == causeHandBack:
		w.shardStopped(StopHandedBack)
	default:
		w.shardStopped(StopClosing)
	}
	if end.drained != nil {
		w.passBarrier()
		select {
		case <-end.release:
		case <-write.Done():
		}
	}
	switch {
	case w.state() != stateDraining:
		// lost meanwhile
	case expire:
		w.log.Info("stolen lease left to its previous owner's end", "ttl", w.env.cfg.leaseTTL)
		w.moveTo(stateReleased, "stolen and not yet read: not released, as its previous owner may still read it")
	case w.leftBound.Load():
		err = errors.Join(err, &ShardError{Stream: w.env.stream, Shard: w.id, Op: OpRelease, Err: errors.New(
			"not released: a record that passed its checks had not reached the consumer; the lease is left bound to the heartbeat row")})
		w.moveTo(stateReleased, "left bound: a record on its way to the consumer")
	default:
		err = errors.Join(err, w.retire(write, end.cause == causeHandBack))
	}
	if end.errs != nil {
		end.errs.add(err)
	} else if err != nil {
		w.env.reportAll(err)
	}
}
