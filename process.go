package kinesub

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Process runs handle on every delivered record, many at once, in order per key: records of a
// shard with the same order key (by default the partition key, see WithOrderKey) are handled
// one after another, in delivery order; records of other keys and other shards run at once, up
// to WithConcurrency handlers (default 16) across the subscription.
//
//	err := sub.Process(ctx, func(ctx context.Context, m *kinesub.Message) error {
//		return store.Apply(ctx, m.PartitionKey(), m.Data()) // nil acks the record
//	}, kinesub.WithConcurrency(256), kinesub.WithMaxAttempts(5), kinesub.WithDeadLetter(park))
//
// A handler that returns nil acks its record: the shard's checkpoint advances over the records
// handled, whatever order they finish in, so at-least-once holds and a restart replays from
// the first record not handled. A handler that returns an error (or panics: the attempt fails
// with a *PanicError) is tried again in process after a backoff (WithRetryBackoff), and the
// records of its key wait behind it while other keys go on; each failed attempt is reported on
// Errors as a *ShardError with Op OpProcess wrapping a *ProcessError. After WithMaxAttempts
// attempts the record goes to the dead-letter function (WithDeadLetter); without one it is
// tried again at the maximum backoff until it succeeds, and Shards shows it
// (ShardStatus.Failing). handle need not Ack or Nack: an Ack in handle settles the record as
// handled whatever handle returns, and a Nack fails the attempt as an error does (the record is
// retried, never skipped).
//
// The context a handler gets ends when ctx does, and when its record's shard moves on: at once
// on a Seek or a lost lease; on a hand-back or Close once their drain ends, as the running
// handlers get the drain to finish. A record whose shard moved on is not started, nor retried:
// a worker checks its shard just before it calls the handler, so nothing fetched before Seek
// returns is started after it, except a record checked in the instant between that check and
// the call: its handler gets a context that ended before Seek returned, and what it returns is
// ignored (the record is neither acked nor retried; the new position delivers it again if it
// includes it). A handler that runs on after its shard moved on (it
// ignores its ctx) still holds its key: this Process starts no record of that key from another
// shard (a child after a split or merge) until it returns. WithMaxInFlight and
// WithMaxInFlightBytes bound each shard as for the other styles, counting the records Process
// holds, queued or running, so a slow or stuck key cannot make memory grow: it stops its shard
// at the cap.
//
// Process returns why it stopped, never nil: context.Cause(ctx) when ctx ends (at once if it
// had ended already), the subscription's Err when the subscription ended on its own, ErrClosed
// after Close, or at once ErrConsumerBusy while another consumer pulls (All, Batches, Process,
// or Messages once called). It returns only once every handler it started has returned.
// Records it took and did not handle when ctx ended are not lost: it moves their shards back to
// the first of them (the shard's generation ends at once, and its reader reopens there,
// retrying until it can), so the next consumer of this subscription gets them again, in order,
// before anything later. Invalid options, a nil ctx or a nil handle make it return an error
// wrapping ErrInvalidOption before it takes anything.
func (s *Subscriber) Process(ctx context.Context, handle func(context.Context, *Message) error, opts ...ProcessOption) error {
	if ctx == nil {
		return fmt.Errorf("%w: Process: nil context (pass context.Background())", ErrInvalidOption)
	}
	if handle == nil {
		return fmt.Errorf("%w: Process: nil handler", ErrInvalidOption)
	}
	cfg := defaultProcessConfig()
	for i, o := range opts {
		if o == nil {
			return fmt.Errorf("%w: option %d of Process is nil", ErrInvalidOption, i)
		}
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	select {
	case <-s.del.hand.token:
	default:
		return ErrConsumerBusy
	}
	// The token is given back only once every handler has returned: the next consumer must not
	// start a key's records while one of the key's earlier records still runs here.
	defer func() { s.del.hand.token <- struct{}{} }()
	p, err := newProcessor(ctx, s, cfg, handle)
	if err != nil {
		return err
	}
	for {
		if f, from := s.del.hand.takeRest(); f != nil {
			s.metrics.consumedPage(f, from)
			f.own(from)
			p.add(f, from)
		}
		if !s.del.hand.wait(ctx, s.done) {
			break
		}
	}
	p.stop(ctx.Err() != nil)
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err := s.Err(); err != nil {
		return err
	}
	return ErrClosed
}

// processor is one Process call: the lanes of keys, the ready queue and the workers
// (process_keys.go, process_worker.go). The goroutine that called Process feeds it pages.
type processor struct {
	s      *Subscriber
	cfg    processConfig
	handle func(context.Context, *Message) error
	met    *processMetrics
	util   *utilMeter      // the consumer's utilization: the share of workers running handlers
	ctx    context.Context // Process's: the handlers' contexts carry its values and deadline
	ackCtx context.Context // the acks' (a write with WithCheckpointInterval(0)): not cancelled by stop

	mu       sync.Mutex
	cond     sync.Cond // idle workers wait on it
	lanes    map[string]*lane
	ready    jobRing
	started  int    // workers started
	idle     int    // workers waiting on cond
	wakes    int    // workers woken or started, not yet at the ready queue
	running  int    // handlers running
	rnd      uint64 // sample's state
	closing  bool   // stop began: nothing more starts
	stopped  bool   // stop collected what was left
	shown    map[*worker]bool
	queuedAt map[*job]time.Time // when sampled jobs (timed) queued behind their key
	fails    map[*job]*failure  // how the jobs that failed (failed) went
	lingers  map[string]*linger // per order key, handlers running on after their shard moved on

	workers sync.WaitGroup // the workers
	aux     sync.WaitGroup // backoff timers and the generations' context callbacks
}

func newProcessor(ctx context.Context, s *Subscriber, cfg processConfig, handle func(context.Context, *Message) error) (*processor, error) {
	p := &processor{s: s, cfg: cfg, handle: handle, lanes: map[string]*lane{}, shown: map[*worker]bool{}, lingers: map[string]*linger{},
		queuedAt: map[*job]time.Time{}, fails: map[*job]*failure{}}
	p.cond.L = &p.mu
	p.rnd = rand.Uint64() | 1
	met, err := newProcessMetrics(s.metrics, p.runningNow)
	if err != nil {
		return nil, err
	}
	p.met = met
	p.ctx, p.ackCtx = ctx, context.WithoutCancel(ctx)
	p.util = s.del.hand.util
	p.util.set(cfg.concurrency, cfg.concurrency, time.Now()) // its workers are the consumer
	if cfg.started != nil {
		cfg.started(p)
	}
	return p, nil
}

func (p *processor) runningNow() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running
}

// stop ends the Process call: nothing more starts, the running handlers are cancelled and
// waited for, what is left is given back, and with rewind (ctx ended, the subscription goes
// on) each shard with records left is moved back to the first of them.
func (p *processor) stop(rewind bool) {
	p.mu.Lock()
	p.closing = true
	p.cond.Broadcast()
	for _, l := range p.lanes {
		for _, gs := range l.gens {
			gs.cancel() // the running handlers'
		}
	}
	p.mu.Unlock()
	p.workers.Wait()
	p.util.set(1, 0, time.Now()) // no consumer until the next

	p.mu.Lock()
	p.stopped = true
	var left []*job
	for _, l := range p.lanes {
		for _, q := range l.keys {
			for x := q.head; x != nil; x = x.next {
				if !x.dropped && x.state != jobDone {
					left = append(left, x)
				}
			}
		}
	}
	firsts := map[*worker]*Message{} // each shard's first record left, of its current generation
	for _, j := range left {
		if m := j.m; !m.stale() {
			if f := firsts[m.shard()]; f == nil || m.index() < f.index() {
				firsts[m.shard()] = m
			}
		}
		p.drop(j)
	}
	p.lanes = map[string]*lane{}
	p.unpublish()
	p.mu.Unlock()
	if rewind {
		p.rewind(firsts)
	}
	p.aux.Wait()
	p.met.stop()
}

// rewind moves each shard of firsts back to its record, so that what Process took and did not
// handle is delivered again, in order, to the next consumer. A shard that moved on meanwhile
// (lost, handed back, closed) needs nothing: its next reader reads from the checkpoint.
func (p *processor) rewind(firsts map[*worker]*Message) {
	s := p.s
	if s.seeker == nil || len(firsts) == 0 {
		return
	}
	var wg sync.WaitGroup
	for _, m := range firsts {
		wg.Add(1)
		go func() { // owned by rewind, which waits for it
			defer wg.Done()
			ctx, cancel := context.WithTimeout(p.ackCtx, 2*s.cfg.requestTimeout)
			defer cancel()
			// The shard's generation ends at once, so nothing after m is delivered from where
			// it was; the reader reopens at m, retrying until it can. Its errors (a throttle,
			// ErrSeekPending when ctx ends first) go to Errors from the reader itself.
			_ = s.seeker.rewind(ctx, m)
		}()
	}
	wg.Wait()
}
