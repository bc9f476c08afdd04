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

// work runs ready jobs until Process ends.
func (p *processor) work() {
	defer p.workers.Done()
	p.mu.Lock()
	p.wakes-- // the wake that started this worker
	for {
		var j *job
		if !p.closing {
			j = p.pop()
		}
		if j == nil {
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
		j.state = jobRunning
		p.running++
		if p.ready.len() > 0 && p.wakes == 0 {
			p.wake()
		}
		p.mu.Unlock()
		settled, err := p.attempt(j)
		p.mu.Lock()
		p.running--
		p.after(j, settled, err)
	}
}

// attempt runs the handler (or the dead-letter function) on j and, when it succeeds, acks j. It
// reports whether j is settled, and the attempt's error. It runs without p.mu: j is this
// worker's while it runs.
func (p *processor) attempt(j *job) (bool, error) {
	m := j.m
	err := p.call(j)
	if atomic.LoadUint32(&m.settled) != 0 {
		return true, nil // the handler acked or nacked it itself
	}
	if err != nil {
		return false, err
	}
	if j.fail != nil && j.fail.deadLetter {
		p.met.deadLettered(m)
	}
	switch aerr := m.Ack(p.ackCtx); {
	case aerr == nil, errors.Is(aerr, ErrClosed), errors.Is(aerr, ErrAlreadySettled):
	default:
		p.s.reportAll(aerr) // the checkpoint write of WithCheckpointInterval(0); the ack counts
	}
	return true, nil
}

// call runs the handler or the dead-letter function, turning a panic into the attempt's error.
func (p *processor) call(j *job) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	if f := j.fail; f != nil && f.deadLetter {
		return p.cfg.deadLetter(j.gs.ctx, j.m, f.lastErr)
	}
	return p.handle(j.gs.ctx, j.m)
}

// after decides what follows an attempt: the key goes on, or j is retried after its backoff
// (or at once, for its dead letter), or given back. Called with p.mu held.
func (p *processor) after(j *job, settled bool, err error) {
	switch {
	case settled:
		p.retire(j)
		p.advance(j)
		return
	case p.closing:
		j.state = jobWaiting // collected by stop: Process ended, the attempt was likely cancelled
		return
	case j.m.stale():
		// Cancelled by a seek, a lost lease or the end of a drain: the shard's next reader
		// delivers it again, and nothing here retries it.
		p.drop(j)
		p.advance(j)
		return
	}
	p.noteFailure(j, err)
	p.report(j, err)
	f := j.fail
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
	f := j.fail
	if f == nil {
		f = &failure{since: time.Now()}
		j.fail = f
		l := j.gs.lane
		l.failing = append(l.failing, j)
	}
	f.attempts++
	f.failErr = err
	if !f.deadLetter {
		f.lastErr = err
	}
	p.publish(j.gs.lane, j.m.shard())
}

// report sends a failed attempt to Errors and counts it. Called with p.mu held; neither waits.
func (p *processor) report(j *job, err error) {
	m := j.m
	p.met.failed(m)
	f := j.fail
	perr := &ProcessError{SequenceNumber: m.SequenceNumber(), SubSequenceNumber: m.SubSequenceNumber(), Attempt: f.attempts, DeadLetter: f.deadLetter, Err: err}
	p.s.report(&ShardError{Stream: p.s.stream, Shard: m.ShardID(), Op: OpProcess, Err: perr})
	if p.s.log != nil {
		p.s.log.LogAttrs(context.Background(), slog.LevelDebug, "retrying record", slog.String(logShard, m.ShardID()),
			slog.String("sequence", m.SequenceNumber()), slog.Int("attempt", f.attempts))
	}
}
