package kinesub

import (
	"context"
)

// Dispatcher states, under dispatchMu.
const (
	dispatchIdle    = iota // Messages was never called
	dispatchRunning        // the dispatcher runs (or waits for a pull loop to end)
	dispatchStopped        // Close stopped it, or stopped the subscription before it ran
)

// Messages returns the channel of delivered records. It is closed exactly once, after Close,
// after ctx cancellation or after a fatal error (see Err), so ranging over it always ends.
// Records of one shard arrive in order; records of different shards interleave.
//
// The first call makes the channel this subscription's way of consuming, for good: records
// flow into it once any All or Batches loop running then has ended, and later All or Batches
// calls yield ErrConsumerBusy. Nothing is lost in the change: the channel goes on with what the
// loop left.
func (s *Subscriber) Messages() <-chan *Message {
	s.dispatchMu.Lock()
	defer s.dispatchMu.Unlock()
	if s.dispatchState == dispatchIdle {
		s.dispatchState = dispatchRunning
		s.keepers.Add(1)
		go s.dispatch() // owned by the subscriber; stop ends it and waits (keepers)
	}
	return s.out
}

// outBuffer is the depth of the Messages channel. A buffer lets the dispatcher run ahead of the
// consumer instead of parking on every record; it is small, as a fence takes back what is in it.
const outBuffer = 64

// dispatch hands deliveries to the consumer through Messages, dropping those whose shard has
// moved on (sought, lost, closing) since they were fetched. A fence makes it take back what the
// consumer has not received from the channel's buffer and re-check that and what it holds, so
// nothing fetched before a seek reaches the consumer after it.
func (s *Subscriber) dispatch() {
	defer s.keepers.Done()
	defer close(s.dispatchDone)
	defer close(s.out)
	// Take the hand-off from any pull loop, for good, answering fences meanwhile.
	for taken := false; !taken; {
		select {
		case <-s.hand.token:
			taken = true
		case ack := <-s.fence:
			if ack == nil {
				return
			}
			close(ack)
		}
	}
	// queue holds what was taken and not yet sent, oldest first; a fence puts back in front of
	// it what it takes back from the channel's buffer. Everything in it or in the buffer is
	// counted as handed out, and stops being counted when dropped.
	var queue []*Message
	spare := make([]*Message, 0, 1) // queue's memory while it holds one: no allocation a record
	defer func() { s.reclaim(queue, true) }()
	for {
		if len(queue) == 0 {
			m := s.hand.take()
			if m == nil {
				select {
				case page := <-s.hand.in:
					s.hand.refill(page)
				case ack := <-s.fence:
					if ack == nil {
						return
					}
					queue = s.reclaim(queue, false)
					close(ack)
				}
				continue
			}
			queue = append(spare[:0], m)
		}
		select {
		case s.out <- queue[0]:
			s.metrics.consumed(queue[0])
			queue[0] = nil
			queue = queue[1:]
		case ack := <-s.fence:
			queue = s.reclaim(queue, false)
			if ack == nil {
				return
			}
			close(ack)
		}
	}
}

// reclaim takes back what the consumer has not received from the channel's buffer, puts it in
// front of queue (it is older) and drops what is stale, or everything with all. Only the
// dispatcher sends on the channel, so what it takes back and queue are in order.
func (s *Subscriber) reclaim(queue []*Message, all bool) []*Message {
	var back []*Message
	for len(s.out) > 0 {
		select {
		case m := <-s.out:
			back = append(back, m)
		default:
		}
	}
	if len(back) > 0 {
		queue = append(back, queue...)
	}
	kept := queue[:0]
	for _, m := range queue {
		if all || m.gen != m.shard.gate.Load() {
			m.shard.handedOut.Add(-1)
			continue
		}
		kept = append(kept, m)
	}
	clear(queue[len(kept):])
	return kept
}

// fenceDispatch returns once no consumer can be handed a delivery checked against a gate as it
// was before the caller bumped it: the dispatcher, if it runs, has taken back what waits in the
// Messages buffer and re-checked that and what it holds. A pull loop needs no fence: it checks
// each delivery as it yields it (handoff).
func (s *Subscriber) fenceDispatch(ctx context.Context) error {
	s.dispatchMu.Lock()
	running := s.dispatchState == dispatchRunning
	s.dispatchMu.Unlock()
	if !running {
		return nil
	}
	ack := make(chan struct{})
	select {
	case s.fence <- ack:
	case <-s.dispatchDone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopDispatch ends the dispatcher and closes Messages, exactly once.
func (s *Subscriber) stopDispatch() {
	s.dispatchMu.Lock()
	state := s.dispatchState
	s.dispatchState = dispatchStopped
	s.dispatchMu.Unlock()
	switch state {
	case dispatchIdle:
		close(s.out)
		close(s.dispatchDone)
	case dispatchRunning:
		s.fence <- nil
		<-s.dispatchDone
	}
}
