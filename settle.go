package kinesub

import (
	"context"
	"errors"
	"fmt"
)

// A record's settlement on its shard: the consumer's verdict taken into the watermark, acks
// that came too late to move a checkpoint, and what a settlement wakes (the reader waiting for
// room, a checkpoint written at once).

// settle records the consumer's verdict on m.
//
// The delivery counts as settled (out.done) only after the watermark took it and its lateness
// was judged: a drain woken by this settlement writes a last checkpoint that includes it, and
// the shard is not yet released when the ack is judged, so an ack in time is never called late.
func (w *worker) settle(ctx context.Context, m *Message, handled bool) error {
	if !handled {
		w.out.done(1)
		return nil
	}
	w.mu.Lock()
	if m.pg.gen != w.wmGen {
		w.mu.Unlock()
		late := w.lateAcks(1, true)
		w.out.done(1)
		return late
	}
	advanced := w.wm.settle(m.index())
	roomy := w.noteSettled(advanced)
	w.mu.Unlock()
	late := w.lateAcks(1, false)
	w.out.done(1)
	return errors.Join(late, w.settled(ctx, advanced, roomy))
}

// lateAcks counts n acks that moved no checkpoint and returns the error their Ack reports
// (ErrAckedLate), or nil when they came in time: sought says their generation was sought away
// from; otherwise they are late when the shard's lease was lost or released meanwhile, since
// no checkpoint is written any more.
func (w *worker) lateAcks(n int, sought bool) error {
	var err error
	switch st := w.state(); {
	case sought:
		err = fmt.Errorf("%w: the shard was sought", ErrAckedLate)
	case st == stateLost:
		err = fmt.Errorf("%w: %w", ErrAckedLate, ErrLeaseLost)
	case st == stateReleased:
		err = fmt.Errorf("%w: the shard was handed back", ErrAckedLate)
	default:
		return nil
	}
	for range n {
		w.stats.ackedLate()
	}
	return &ShardError{Stream: w.env.stream, Shard: w.id, Op: OpAck, Err: err}
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
		w.wakeReader()
	}
	if advanced && w.env.cfg.checkpointInterval == 0 {
		return w.flush(ctx)
	}
	return nil
}

// wakeReader wakes the reader if it waits for room.
func (w *worker) wakeReader() {
	select {
	case w.room <- struct{}{}:
	default:
	}
}

// closed reports whether the subscription's Close has finished: its checkpoints are written
// and its leases released, so a settlement can no longer count.
func (w *worker) closed() bool {
	select {
	case <-w.env.done:
		return true
	default:
		return false
	}
}

// refill is the room below its cap that a shard's reader waits for before it fetches again:
// a batch, or half the cap when that is smaller. Fetches never carry a shard past its cap, and
// a consumer at the cap that acks one record at a time does not turn into one small GetRecords
// call (of the shard's 5 per second) per ack.
func (c *config) refill() int { return min(c.batchSize, max(c.maxInFlight/2, 1)) }

// hasRoom reports whether the shard is far enough below both of its caps to fetch again: refill
// deliveries below WithMaxInFlight, and at most half of WithMaxInFlightBytes held. Called with
// w.mu held.
func (w *worker) hasRoom() bool {
	c := w.env.cfg
	return c.maxInFlight-w.wm.unsettled() >= c.refill() && w.wm.bytes <= c.maxInFlightBytes/2
}
