package kinesub

import (
	"context"
	"errors"
	"iter"
	"sync/atomic"
)

// All returns an iterator over the delivered records, one at a time, run in the caller's
// goroutine: no channel operation per record.
//
//	for m, err := range sub.All(ctx) {
//		if err != nil { … } // the subscription ended with a fatal error (Err)
//		handle(m)
//		m.Ack(ctx)
//	}
//
// The loop ends when ctx is done or the subscription is closed; a fatal error is yielded once
// first. Leaving the loop early loses nothing: what was fetched and not yet yielded stays
// queued for the next All, Batches or Messages. Only one consumer pulls at a time: All while
// another All or Batches loop runs, or after Messages was called, yields ErrConsumerBusy at
// once. As with Messages, nothing fetched before a Seek returns is yielded after it: each
// record is checked against its shard's position when it is pulled. A nil ctx yields an error
// wrapping ErrInvalidOption once, and the loop ends.
func (s *Subscriber) All(ctx context.Context) iter.Seq2[*Message, error] {
	return func(yield func(*Message, error) bool) {
		if ctx == nil {
			yield(nil, nilContext("All"))
			return
		}
		pr, h := s.cfg.probes, s.del.hand
		s.pull(ctx, func() pullState {
			for {
				pr.hold()
				if !h.ready(ctx, s.done) {
					return pullEnded
				}
				m := h.take()
				if m == nil {
					return pullWait
				}
				// Counted as a hand-out under way, then checked again: a drain that ended the
				// shard's hand-outs releases its lease only once none is counted (shard.go).
				m.handing()
				if m.stale() {
					m.handed()
					abandonSpan(m)
					m.abandon()
					continue
				}
				pr.passed(m)
				pr.handOut(m)
				m.handed()
				s.metrics.consumed(m)
				if !yield(m, nil) {
					return pullLeft
				}
			}
		}, func(err error) { yield(nil, err) })
	}
}

// Batches returns an iterator over the delivered records a batch at a time: each Batch holds
// consecutive records of one shard, in order (up to one GetRecords page). It behaves as All
// does (ending, errors, leaving early, one consumer at a time, seeks), with the check made once
// a batch. A nil ctx yields an error wrapping ErrInvalidOption once, and the loop ends.
func (s *Subscriber) Batches(ctx context.Context) iter.Seq2[*Batch, error] {
	return func(yield func(*Batch, error) bool) {
		if ctx == nil {
			yield(nil, nilContext("Batches"))
			return
		}
		pr, h := s.cfg.probes, s.del.hand
		s.pull(ctx, func() pullState {
			pr.hold()
			if !h.ready(ctx, s.done) {
				return pullEnded
			}
			f, from := h.takeRest()
			if f == nil {
				return pullWait
			}
			// Counted as a hand-out under way, then checked again, as in All.
			w := f.pg.shard
			w.handing.add(1)
			if f.pg.gen != w.gate.Load() {
				w.handing.done(1)
				w.out.done(int64(f.n - from))
				return pullWait
			}
			if pr != nil {
				pr.passed(f.at(from))
				for i := from; i < f.n; i++ {
					pr.handOut(f.at(i))
				}
			}
			w.handing.done(1)
			s.metrics.consumedPage(f, from)
			traceHandOutPage(f, from)
			if !yield(&Batch{msgs: f.messages(from)}, nil) {
				return pullLeft
			}
			return pullWait
		}, func(err error) { yield(nil, err) })
	}
}

// pullState is what a pull loop's drain reports.
type pullState uint8

const (
	pullWait  pullState = iota // the hand-off's current page is done: wait for the next
	pullLeft                   // the caller left the loop
	pullEnded                  // ctx or the subscription ended while records were held back
)

// pull runs a pull loop: drain takes and yields what the hand-off holds, and says what follows;
// it is called again after each new page. fail yields an error.
func (s *Subscriber) pull(ctx context.Context, drain func() pullState, fail func(error)) {
	select {
	case <-s.del.hand.token:
	default:
		fail(ErrConsumerBusy)
		return
	}
	defer func() { s.del.hand.token <- struct{}{} }()
	for {
		switch drain() {
		case pullLeft:
			return
		case pullWait:
			if s.del.hand.await(ctx, s.done) {
				continue
			}
		}
		if ctx.Err() == nil {
			if err := s.Err(); err != nil {
				fail(err)
			}
		}
		return
	}
}

// Batch is consecutive records of one shard, in order, as Batches yields them. It is safe for
// concurrent use.
type Batch struct {
	msgs []*Message
}

// ShardID returns the id of the shard the batch's records were read from.
func (b *Batch) ShardID() string { return b.msgs[0].ShardID() }

// Messages returns the batch's records, in order. Each can be settled on its own (Ack, Nack).
func (b *Batch) Messages() []*Message { return b.msgs }

// Ack acks every message of the batch not yet settled, at the cost of about one Ack: the
// shard's watermark is updated once. It returns ErrClosed once Close has returned, an error
// matching ErrAckedLate when the shard's reading ended before the ack (the batch is delivered
// again), and with WithCheckpointInterval(0) the checkpoint write's error. A nil ctx is context.Background(),
// as for Message.Ack.
func (b *Batch) Ack(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	w := b.msgs[0].pg.shard
	err := w.settleAll(ctx, b.msgs)
	if w.tracing() != nil {
		for _, m := range b.msgs {
			m.endReceive(false, err) // a span ended by the message's own Ack stays as it ended
		}
	}
	return err
}

// settleAll acks every message of ms not yet settled; all are of this shard.
func (w *worker) settleAll(ctx context.Context, ms []*Message) error {
	if w.closed() {
		return ErrClosed
	}
	n, untimed := 0, int64(0)
	advanced := false
	w.mu.Lock()
	current := ms[0].pg.gen == w.wmGen // a batch is one page: one generation
	for _, m := range ms {
		if !m.markSettled() {
			continue
		}
		n++
		if h := m.handedAt(); h != nil && atomic.LoadInt64(h) != 0 {
			w.stats.settled(ctx, m, false) // sampled for the settle-time histogram
		} else {
			untimed++
		}
		if current && w.wm.settle(m.index()) {
			advanced = true
		}
	}
	roomy := w.noteSettled(advanced)
	w.mu.Unlock()
	if w.stats != nil {
		w.stats.acked.Add(untimed) // counted at once, as the others would be one by one
	}
	var late error
	if n > 0 {
		late = w.lateAcks(n, !current) // judged before the drain may wake, as in settle
	}
	w.out.done(int64(n))
	return errors.Join(late, w.settled(ctx, advanced, roomy))
}
