package kinesub

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// Process's handler goroutines ("workers") are started as ready jobs need them, up to
// WithConcurrency, and each runs one handler at a time. A worker that finishes a handler takes
// the next ready job itself; an idle one is woken only when no other is already on its way to
// the ready queue (wakes), and a worker that starts a job while more are ready wakes the next.
// So a burst of ready jobs brings in as many workers as it keeps busy, one after another,
// without waking all of them for every job.
//
// A worker whose handlers return quickly (a cache, a filter, records it skips) takes several
// ready jobs at a time (a run), up to maxRun, and runs them one after another: one lock for
// the run instead of one per record, and one watermark update per shard (as Batch.Ack does).
// The run doubles while its handlers average under fastHandler, and falls back to one job as
// soon as they do not, so that slow handlers (I/O) keep every job on a worker of its own; and
// it takes no more than a worker's share of the ready jobs, which would have waited for a
// worker anyway.

const (
	maxRun      = 128
	fastHandler = 20 * time.Microsecond
)

// wake brings one more worker to the ready queue: an idle one, or a new one while fewer than
// WithConcurrency were started. Called with p.mu held.
func (p *processor) wake() {
	if p.idle > p.wakes {
		p.wakes++
		p.cond.Signal()
		return
	}
	if p.started < p.cfg.concurrency {
		p.started++
		p.wakes++
		p.workers.Add(1)
		go p.work() // owned by the processor, which waits for it (workers) before Process returns
	}
}

// runJob is a job of a run: what its attempt needs, read under p.mu as the run is taken, and
// how the attempt went.
type runJob struct {
	*job
	ctx *handlerContext // its generation's handlers'
	// fail is how its earlier attempts went, nil when there were none. The attempt reads it
	// without p.mu: only the worker that runs the job writes it (after, under p.mu, before the
	// job can be taken again), and it is taken under p.mu.
	fail *failure
	result
}

// result is how a job of a run went.
type result struct {
	settled bool  // acked (or settled by the handler)
	skipped bool  // its shard moved on before it started
	err     error // the attempt's
}

// work runs ready jobs until Process ends.
//
// Its scratch slices are not cleared after every run: clearing memory that holds pointers
// costs a write barrier per pointer while the collector marks, about as much again as the
// writes that fill it. What a run leaves is overwritten by the next, and cleared when the worker
// goes idle, so an idle worker holds no record.
func (p *processor) work() {
	defer p.workers.Done()
	size := 1
	var run []runJob
	var acks []*Message
	p.mu.Lock()
	p.wakes-- // the wake that started this worker
	for {
		run = run[:0]
		// A run only out of a backlog: its jobs would have waited for a worker anyway.
		n := min(size, max(1, p.ready.len()/p.cfg.concurrency))
		for !p.closing && len(run) < n {
			j := p.pop()
			if j == nil {
				break
			}
			j.state = jobRunning
			if len(run) < cap(run) {
				run = run[:len(run)+1] // its fields, a past run's, are all set below
			} else {
				run = append(run, runJob{})
			}
			r := &run[len(run)-1]
			r.job, r.ctx, r.fail, r.result = j, p.genOfJob(j).ctx, nil, result{}
			if j.failed {
				r.fail = p.fails[j]
			}
		}
		if len(run) == 0 {
			clear(run[:cap(run)])
			clear(acks[:cap(acks)])
			if p.closing {
				p.mu.Unlock()
				return
			}
			p.idle++
			p.cond.Wait()
			p.idle--
			if p.wakes > 0 {
				p.wakes--
			}
			continue
		}
		p.running++
		start := time.Now()
		p.util.set(p.cfg.concurrency, p.cfg.concurrency-p.running, start)
		if p.ready.len() > 0 && p.wakes == 0 {
			p.wake()
		}
		p.mu.Unlock()

		acks = acks[:0]
		var rs *runShare
		if len(run) > 1 {
			rs = p.shareRun(run)
		}
		owned := len(run) // the jobs of the run this worker settles: all, unless handed over
		for i := range run {
			if rs != nil && !rs.claim(i) {
				owned = i // handed over: only the job that was running is this worker's
				break
			}
			j := &run[i]
			// Nothing starts once the lease deadline passed, until every shard held then was
			// given up: its jobs are stale by then.
			p.s.cfg.probes.hold()
			waited := !p.s.tenure.mayHandOut()
			if waited && !p.s.del.hand.ready(p.ctx, p.s.done) {
				j.result = result{skipped: true}
				continue
			}
			// Counted as a hand-out under way before its checks, until the handler has it: a
			// drain that ended the shard's hand-outs releases the lease only once none is
			// counted (process_seam.go).
			j.m.handing()
			// Checked again as it starts, whatever was checked as it was taken: a seek since
			// must find it not started. Only one in the instant between this check and the
			// handler's call starts, with its ctx already ended (the seek ended it first).
			if !p.s.tenure.mayHandOut() || j.m.stale() && !p.mayStartLocked(j.job) {
				j.m.handed()
				j.result = result{skipped: true}
				continue
			}
			p.s.cfg.probes.passed(j.m)
			j.result = p.attempt(j)
		}
		first := 0
		if rs != nil && !rs.close(p, len(run)) {
			first = owned - 1 // the others were handed over while it ran
		}
		for i := first; i < owned; i++ {
			if j := &run[i]; j.settled && !j.m.isSettled() {
				acks = append(acks, j.m)
			}
		}
		p.ack(acks)
		took := time.Since(start)
		if first == 0 && took < time.Duration(len(run))*fastHandler {
			size = min(2*size, maxRun)
		} else {
			size = 1
		}

		p.mu.Lock()
		p.running--
		p.util.set(p.cfg.concurrency, p.cfg.concurrency-p.running, start.Add(took))
		for i := first; i < owned; i++ {
			r := &run[i]
			if r.skipped {
				p.drop(r.job)
				p.advance(r.job)
				continue
			}
			p.after(r.job, r.settled, r.err)
		}
	}
}

// runShare lets a run's other jobs go on while one of its handlers runs long: a run is taken
// for handlers that return at once, and one that does not (a stuck call, a record that waits
// for its ctx) must hold back only its own key. The worker claims each job as it starts it;
// once no job was claimed for a whole handOverAfter, handOver settles the jobs that finished
// (their keys go on) and puts the ones not started back in the ready queue, for other workers.
type runShare struct {
	pos   atomic.Int32 // jobs claimed by the worker, or runClosed, runHandedOver
	run   []runJob
	timer atomic.Pointer[time.Timer]
	seen  int32 // pos at handOver's last look; under p.mu
}

const (
	handOverAfter = time.Millisecond
	runClosed     = -1 // the worker settles the whole run
	runHandedOver = -2 // the worker settles only the job it was running
)

// shareRun arms the hand-over of run. The timer is counted in p.aux until it ends.
func (p *processor) shareRun(run []runJob) *runShare {
	rs := &runShare{run: run, seen: -1}
	p.aux.Add(1) // owned by the processor: close or handOver ends it, stop waits for it
	rs.timer.Store(time.AfterFunc(handOverAfter, func() { p.handOver(rs) }))
	return rs
}

// claim reports whether the worker may start job i of the run (not handed over).
func (rs *runShare) claim(i int) bool { return rs.pos.CompareAndSwap(int32(i), int32(i+1)) }

// close ends the sharing of a run of n jobs all claimed, and reports whether the worker
// settles all of them (false: only the last, the others were handed over).
func (rs *runShare) close(p *processor, n int) bool {
	ok := rs.pos.CompareAndSwap(int32(n), runClosed)
	if rs.timer.Load().Stop() {
		p.aux.Done()
	}
	return ok
}

// handOver looks at a shared run: while its worker goes on it looks again later; once the
// worker spent a whole handOverAfter on one job, every other job of the run leaves it.
func (p *processor) handOver(rs *runShare) {
	p.mu.Lock()
	c := rs.pos.Load()
	if c >= 0 && !p.stopped && (c != rs.seen || c == 0 || !rs.pos.CompareAndSwap(c, runHandedOver)) {
		rs.seen = rs.pos.Load()
		p.mu.Unlock()
		if t := rs.timer.Load(); t != nil {
			t.Reset(handOverAfter) // still counted in p.aux
			return
		}
		p.aux.Done()
		return
	}
	defer p.aux.Done()
	if c < 0 || p.stopped {
		p.mu.Unlock()
		return
	}
	// Jobs c.. were not started: other workers take them. Job c-1 runs: the worker keeps it.
	for k := int(c); k < len(rs.run); k++ {
		p.makeReady(rs.run[k].job)
	}
	done := append([]runJob(nil), rs.run[:c-1]...)
	p.mu.Unlock()
	var acks []*Message
	for i := range done {
		if j := &done[i]; j.settled && !j.m.isSettled() {
			acks = append(acks, j.m)
		}
	}
	p.ack(acks)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return // stop gave them back
	}
	for i := range done {
		r := &done[i]
		if r.skipped {
			p.drop(r.job)
			p.advance(r.job)
			continue
		}
		p.after(r.job, r.settled, r.err)
	}
}

// errHandlerNacked is the error of an attempt whose handler returned nil after nacking its
// record: a Nack fails the attempt (Message.Nack), so the record is retried, never skipped.
var errHandlerNacked = errors.New("kinesub: the handler nacked the record")

// attempt runs the handler (or the dead-letter function) on j. The job counts as settled when
// the handler succeeded (the caller acks it) or acked it itself; a Nack fails the attempt. It
// runs without p.mu: j is this worker's while it runs.
func (p *processor) attempt(j *runJob) result {
	err := p.call(j)
	nacked := j.m.takeNack()
	if j.m.isSettled() {
		return result{settled: true} // the handler acked it itself
	}
	if nacked && err == nil {
		err = errHandlerNacked
	}
	if err != nil {
		return result{err: err}
	}
	if j.dead() {
		p.met.deadLettered(j.m)
	}
	return result{settled: true}
}

// ack acks the messages a run handled, each consecutive series of one shard and generation
// with one watermark update.
func (p *processor) ack(ms []*Message) {
	for len(ms) > 0 {
		n := 1
		for n < len(ms) && ms[n].pg.shard == ms[0].pg.shard && ms[n].pg.gen == ms[0].pg.gen {
			n++
		}
		var err error
		if n == 1 {
			err = ms[0].Ack(p.ackCtx)
		} else {
			err = ms[0].pg.shard.settleAll(p.ackCtx, ms[:n])
		}
		switch {
		case err == nil, errors.Is(err, ErrClosed), errors.Is(err, ErrAlreadySettled):
		case errors.Is(err, ErrAckedLate):
			// The handler's ctx ended with the shard's reading; the next holder handles the
			// record again, as kinesub.records.acked_late counts.
		default:
			p.s.reportAll(err) // the checkpoint write of WithCheckpointInterval(0); the acks count
		}
		ms = ms[n:]
	}
}

// dead reports whether j's attempt is the dead-letter function's.
func (j *runJob) dead() bool { return j.fail != nil && j.fail.deadLetter }

// call runs the handler or the dead-letter function, turning a panic into the attempt's error.
func (p *processor) call(j *runJob) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	if j.dead() {
		j.m.handed()
		return p.cfg.deadLetter(j.ctx, j.m, j.fail.lastErr)
	}
	p.s.cfg.probes.handOut(j.m)
	j.m.handed()
	if t := p.s.env.tracing(); t != nil {
		return t.process(j.ctx, j.m, p.handle)
	}
	return p.handle(j.ctx, j.m)
}

// after decides what follows an attempt: the key goes on, or j is retried after its backoff
// (or at once, for its dead letter), or given back. Called with p.mu held.
func (p *processor) after(j *job, settled bool, err error) {
	switch {
	case settled:
		p.noteAcked(j)
		p.retire(j)
		p.advance(j)
		return
	case p.closing:
		j.state = jobWaiting // collected by stop: Process ended, the attempt was likely cancelled
		return
	case !p.mayStart(j):
		// Cancelled by a seek, a lost lease or the end of a drain, or failed in a drain that
		// need not run it: the shard's next reader delivers it again, and nothing here retries
		// it. (A failure that fills a gap in a drain is tried again as usual.)
		p.drop(j)
		p.advance(j)
		return
	}
	p.noteFailure(j, err)
	p.report(j, err)
	f := p.fails[j]
	exhausted := p.cfg.maxAttempts > 0 && f.attempts >= p.cfg.maxAttempts
	if exhausted && p.cfg.deadLetter != nil && !f.deadLetter {
		f.deadLetter = true // its attempts are used: the dead letter, at once
		p.makeReady(j)
		return
	}
	wait := p.cfg.backoffMax
	if !exhausted || f.deadLetter {
		wait = p.cfg.backoffBase << min(f.attempts-1, 30)
		if wait > p.cfg.backoffMax || wait <= 0 {
			wait = p.cfg.backoffMax
		}
	}
	wait = wait/2 + rand.N(wait/2+1)
	j.state = jobWaiting
	p.aux.Add(1) // owned by the processor: retire stops it, stop waits for it
	f.timer = time.AfterFunc(wait, func() {
		defer p.aux.Done()
		p.retryDue(j)
	})
}

// noteFailure counts a failed attempt of j and shows it among the shard's failing records.
func (p *processor) noteFailure(j *job, err error) {
	f := p.fails[j]
	if f == nil {
		f = &failure{since: time.Now()}
		p.fails[j] = f
		j.failed = true
		l := j.q.lane
		l.failing = append(l.failing, j)
	}
	f.attempts++
	f.failErr = err
	if !f.deadLetter {
		f.lastErr = err
	}
	p.publish(j.q.lane, j.m.shard())
}

// report sends a failed attempt to Errors and counts it. Called with p.mu held; neither waits.
func (p *processor) report(j *job, err error) {
	m := j.m
	p.met.failed(m)
	f := p.fails[j]
	perr := &ProcessError{SequenceNumber: m.SequenceNumber(), SubSequenceNumber: m.SubSequenceNumber(), Attempt: f.attempts, DeadLetter: f.deadLetter, Err: err}
	p.s.report(&ShardError{Stream: p.s.stream, Shard: m.ShardID(), Op: OpProcess, Err: perr})
	if p.s.log != nil {
		p.s.log.LogAttrs(context.Background(), slog.LevelDebug, "retrying record", slog.String(logShard, m.ShardID()),
			slog.String("sequence", m.SequenceNumber()), slog.Int("attempt", f.attempts))
	}
}
