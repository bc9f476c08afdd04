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
	if s.dispatchChosen.Load() { // a select loop may call Messages for every record
		return s.out
	}
	s.dispatchMu.Lock()
	defer s.dispatchMu.Unlock()
	if s.dispatchState == dispatchIdle {
		s.dispatchState = dispatchRunning
		s.keepers.Add(1)
		go s.dispatch() // owned by the subscriber; stop ends it and waits (keepers)
	}
	s.dispatchChosen.Store(true)
	return s.out
}

// dispatch hands deliveries to the consumer through Messages, dropping those whose shard has
// moved on (sought, lost, closing) since they were fetched. A fence makes it re-check the
// delivery it holds, so nothing fetched before a seek reaches the consumer after it.
//
// The dispatcher waits for the consumer on a plain send: a select that could also take a fence
// costs about a fifth more per record delivered and acked. A fencer reaches it there by taking the delivery
// out of the send itself, and hands it back with its request; the dispatcher, which sees the
// fencer's flag once its send is done, waits for that request before it takes anything else,
// so the delivery taken back is handed out again (or dropped, if stale) before any later one.
func (s *Subscriber) dispatch() {
	defer s.keepers.Done()
	defer close(s.dispatchDone)
	defer close(s.out)
	// Take the hand-off from any pull loop, for good, answering fences meanwhile.
	for taken := false; !taken; {
		select {
		case <-s.hand.token:
			taken = true
		case req := <-s.fence:
			if s.answer(req, nil); req.stop {
				return
			}
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
				case req := <-s.fence:
					if s.answer(req, nil); req.stop {
						return
					}
				}
				continue
			}
		}
		s.out <- held
		if !s.fencing.Load() {
			s.metrics.consumed(held)
			held = nil
			continue
		}
		// A fencer is at work: it received held itself (and hands it back), or it is about to
		// send its request, which it can now only send on fence.
		req := <-s.fence
		if req.back == nil {
			s.metrics.consumed(held)
			held = nil
		}
		if held = s.answer(req, held); req.stop {
			return
		}
	}
}

// fenceReq is a fencer's request to the dispatcher.
type fenceReq struct {
	ack  chan struct{} // closed once the dispatcher has re-checked what it holds
	back *Message      // the delivery the fencer took out of the dispatcher's send, if it did
	stop bool          // the dispatcher must end (stopDispatch)
}

// answer lowers the fencing flag, re-checks held against its shard's gate, and acknowledges
// req. It returns held, or nil when held is stale.
func (s *Subscriber) answer(req *fenceReq, held *Message) *Message {
	s.fencing.Store(false)
	if held != nil && held.pg.gen != held.pg.shard.gate.Load() {
		held.pg.shard.handedOut.Add(-1)
		held = nil
	}
	close(req.ack)
	return held
}

// fenceDispatch returns once no consumer can be handed a delivery checked against a gate as it
// was before the caller bumped it: the dispatcher, if it runs, has re-checked the delivery it
// holds. A pull loop needs no fence: it checks each delivery as it takes it (handoff). ctx
// bounds the wait for other fencers; the exchange with the dispatcher itself is not
// cancelled, as the dispatcher answers at once.
func (s *Subscriber) fenceDispatch(ctx context.Context) error {
	s.dispatchMu.Lock()
	running := s.dispatchState == dispatchRunning
	s.dispatchMu.Unlock()
	if !running {
		return nil
	}
	select {
	case s.fenceSem <- struct{}{}:
	case <-s.dispatchDone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	s.sendFence(&fenceReq{ack: make(chan struct{})})
	<-s.fenceSem
	return nil
}

// sendFence raises the fencing flag, delivers req to the dispatcher, taking back the delivery
// it is sending if it is sending one, and waits for the answer. The caller holds fenceSem: the
// flag is one fencer's until the dispatcher has lowered it. sendFence does not wait on a
// context: the dispatcher is always sending on out or ready to receive on fence (or done), and
// answers a request as soon as it has it.
func (s *Subscriber) sendFence(req *fenceReq) {
	s.fencing.Store(true)
	select {
	case m, ok := <-s.out:
		if !ok {
			return // closed: the dispatcher has ended
		}
		req.back = m
		s.fence <- req // the dispatcher, its send done, waits for this
	case s.fence <- req:
	case <-s.dispatchDone:
		return
	}
	<-req.ack
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
		s.fenceSem <- struct{}{}
		s.sendFence(&fenceReq{ack: make(chan struct{}), stop: true})
		<-s.fenceSem
		<-s.dispatchDone
	}
}
