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

// dispatch hands deliveries to the consumer through Messages, dropping those whose shard has
// moved on (sought, lost, closing) since they were fetched. A fence makes it re-check the
// delivery it holds, so nothing fetched before a seek reaches the consumer after it.
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
	var held *Message
	defer func() {
		if held != nil {
			held.pg.shard.handedOut.Add(-1)
		}
	}()
	for {
		if held == nil {
			if held = s.hand.take(); held == nil {
				select {
				case page := <-s.hand.in:
					s.hand.refill(page)
				case ack := <-s.fence:
					if ack == nil {
						return
					}
					close(ack)
				}
				continue
			}
		}
		// A consumer already waiting takes the delivery through a single-case send, which costs
		// a fraction of the two-case select below; a fencer raises fencing first, so that the
		// dispatcher then waits in the select, where it answers the fence.
		if s.fencing.Load() == 0 {
			select {
			case s.out <- held:
				s.metrics.consumed(held)
				held = nil
				continue
			default:
			}
		}
		select {
		case s.out <- held:
			s.metrics.consumed(held)
			held = nil
		case ack := <-s.fence:
			if held.pg.gen != held.pg.shard.gate.Load() {
				held.pg.shard.handedOut.Add(-1)
				held = nil
			}
			if ack == nil {
				return
			}
			close(ack)
		}
	}
}

// fenceDispatch returns once no consumer can be handed a delivery checked against a gate as it
// was before the caller bumped it: the dispatcher, if it runs, has re-checked the delivery it
// holds. A pull loop needs no fence: it checks each delivery as it takes it (handoff).
func (s *Subscriber) fenceDispatch(ctx context.Context) error {
	s.dispatchMu.Lock()
	running := s.dispatchState == dispatchRunning
	s.dispatchMu.Unlock()
	if !running {
		return nil
	}
	ack := make(chan struct{})
	s.fencing.Add(1)
	defer s.fencing.Add(-1)
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
		s.fencing.Add(1)
		s.fence <- nil
		<-s.dispatchDone
	}
}
