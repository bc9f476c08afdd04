package kinesub

import (
	"context"
	"runtime"
	"time"
)

// Dispatcher states, under dispatchMu.
const (
	dispatchIdle    = iota // Messages was never called
	dispatchRunning        // the dispatcher runs (or waits for a pull loop to end)
	dispatchStopped        // Close stopped it, or stopped the subscription before it ran
)

// messagesBuffer is the capacity of the Messages channel. A buffer spares the dispatcher and
// the consumer a goroutine switch per record; its deliveries are all of one shard and one
// generation at a time, so that a fence can empty it of stale ones without reordering anything
// (see dispatch).
const messagesBuffer = 64

// Messages returns the channel of delivered records. It is closed exactly once, after Close,
// after ctx cancellation or after a fatal error (see Err), so ranging over it always ends.
// Records of one shard arrive in order; records of different shards interleave.
//
// The channel has room for 64 records, all of one shard at a time: the consumer takes them
// without waiting for another goroutine each time. A Seek, a lost or handed-back lease and
// Close take back those of the shards they move before they return, so the guarantee is the
// same as with no buffer: nothing fetched before Seek returns is received after it.
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

// dispatcher is the state of the goroutine behind Messages, owned by it.
type dispatcher struct {
	s    *Subscriber
	held *Message // the next delivery, counted as handed out, not yet in out
	// What out holds: deliveries of one shard and one generation only (or nothing). A fence
	// that makes them stale can then take every one it finds there: whatever the consumer
	// receives meanwhile is of that shard and in order, and no other shard's delivery is
	// taken out of turn.
	outShard *worker
	outGen   uint64
	timer    *time.Timer // paces awaitTaken
}

// dispatch hands deliveries to the consumer through Messages, dropping those whose shard has
// moved on (sought, lost, closing) since they were fetched. A fence makes it re-check the
// delivery it holds and empty out of stale ones, so nothing fetched before a seek reaches the
// consumer after it.
//
// Sends into out do not block while it has room, and the dispatcher looks at the fencing flag
// between two of them: a select that could also take a fence would cost more per record. When
// out is full it waits for the consumer or a fence, whichever comes first. Before it puts a
// delivery of another shard or generation into out, it waits until the consumer has taken
// everything there (awaitTaken).
func (s *Subscriber) dispatch() {
	defer s.keepers.Done()
	defer close(s.dispatchDone)
	defer close(s.out)
	// Take the hand-off from any pull loop, for good, answering fences meanwhile.
	d := &dispatcher{s: s}
	for taken := false; !taken; {
		select {
		case <-s.hand.token:
			taken = true
		case req := <-s.fence:
			if d.answer(req); req.stop {
				return
			}
		}
	}
	d.timer = time.NewTimer(time.Hour)
	d.timer.Stop()
	defer func() {
		if d.held != nil {
			d.held.pg.shard.handedOut.Add(-1)
		}
	}()
	for {
		if s.fencing.Load() {
			if req := <-s.fence; d.answer(req) {
				return
			}
			continue
		}
		if d.held == nil {
			if d.held = s.hand.take(); d.held == nil {
				select {
				case page := <-s.hand.in:
					s.hand.refill(page)
				case req := <-s.fence:
					if d.answer(req) {
						return
					}
				}
				continue
			}
		}
		if pg := d.held.pg; pg.shard != d.outShard || pg.gen != d.outGen {
			if len(s.out) > 0 {
				if d.awaitTaken() {
					return
				}
				continue // a fence may have dropped held
			}
			d.outShard, d.outGen = pg.shard, pg.gen
		}
		select {
		case s.out <- d.held:
			s.metrics.consumed(d.held)
			d.held = nil
			continue
		default:
		}
		select {
		case s.out <- d.held:
			s.metrics.consumed(d.held)
			d.held = nil
		case req := <-s.fence:
			if d.answer(req) {
				return
			}
		}
	}
}

// awaitTaken waits until the consumer has taken everything in out, answering fences meanwhile,
// and reports whether one stopped the dispatcher. Nothing signals a channel running empty, so
// it looks: yields for up to 50µs first (the consumer is often about to receive, and a timer
// shorter than a millisecond may sleep a whole one), then sleeps of a sixteenth of the time
// waited so far, so that a slow consumer loses at most about that share of its time and a
// stuck one costs a few wake-ups a second.
func (d *dispatcher) awaitTaken() bool {
	s := d.s
	start := time.Now()
	for range 64 {
		if len(s.out) == 0 {
			return false
		}
		if time.Since(start) > 50*time.Microsecond {
			break
		}
		runtime.Gosched()
	}
	for len(s.out) > 0 {
		d.timer.Reset(min(max(time.Since(start)/16, 20*time.Microsecond), 50*time.Millisecond))
		select {
		case <-d.timer.C:
		case req := <-s.fence:
			d.timer.Stop()
			if d.answer(req) {
				return true
			}
		}
	}
	return false
}

// fenceReq is a fencer's request to the dispatcher.
type fenceReq struct {
	ack  chan struct{} // closed once the dispatcher has re-checked what it holds
	stop bool          // the dispatcher must end (stopDispatch)
}

// answer lowers the fencing flag, drops the held delivery and empties out when they are stale
// (everything, when the dispatcher must stop), acknowledges req, and reports req.stop.
func (d *dispatcher) answer(req *fenceReq) bool {
	d.s.fencing.Store(false)
	if h := d.held; h != nil && (req.stop || h.pg.gen != h.pg.shard.gate.Load()) {
		h.pg.shard.handedOut.Add(-1)
		d.held = nil
	}
	if w := d.outShard; w != nil && (req.stop || d.outGen != w.gate.Load()) {
		d.empty()
	}
	close(req.ack)
	return req.stop
}

// empty takes back what out holds. The consumer may receive some of it meanwhile: that is
// before the fence returns, and in order, as out holds one shard's deliveries.
func (d *dispatcher) empty() {
	for {
		select {
		case m := <-d.s.out:
			m.pg.shard.handedOut.Add(-1)
		default:
			d.outShard = nil
			return
		}
	}
}

// fenceDispatch returns once no consumer can be handed a delivery checked against a gate as it
// was before the caller bumped it: the dispatcher, if it runs, has re-checked the delivery it
// holds and emptied Messages' buffer of stale ones. A pull loop needs no fence: it checks each
// delivery as it takes it (handoff). ctx bounds the wait for other fencers; the exchange with
// the dispatcher itself is not cancelled, as the dispatcher answers at once.
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

// sendFence raises the fencing flag, delivers req to the dispatcher and waits for the answer.
// The caller holds fenceSem: the flag is one fencer's until the dispatcher has lowered it.
// sendFence does not wait on a context: the dispatcher looks at the flag between two sends and
// takes fences wherever it waits (or is done), and answers a request as soon as it has it.
func (s *Subscriber) sendFence(req *fenceReq) {
	s.fencing.Store(true)
	select {
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
