package kinesub

import (
	"sync"
	"sync/atomic"
	"time"
)

// Dispatcher states, under delivery.mu.
const (
	dispatchIdle    = iota // Messages was never called
	dispatchRunning        // the dispatcher runs (or waits for a pull loop to end)
	dispatchStopped        // Close stopped it, or stopped the subscription before it ran
)

// delivery is how fetched records reach the consumer: the hand-off from the readers
// (handoff.go), which pull loops take from, and the Messages channel with the dispatcher that
// feeds it. It owns the dispatcher: stop ends it and waits for it.
type delivery struct {
	hand    *handoff
	metrics *metrics
	probes  *probeSet      // tests only (probe.go)
	out     chan *Message  // dispatcher → consumer (Messages), unbuffered
	fence   chan *fenceReq // fencers re-check the dispatcher's held delivery
	// fenceSem: one fencer at a time; fencing: a fencer is at work, and the dispatcher, which
	// looks at the flag before each send, must wait for its request.
	fenceSem chan struct{}
	fencing  atomic.Bool

	mu    sync.Mutex
	state int // dispatchIdle, dispatchRunning, dispatchStopped
	// chosen: Messages was called (the state is no longer dispatchIdle), read without the lock.
	chosen atomic.Bool
	done   chan struct{} // closed when the dispatcher has returned (or will never run)
}

func newDelivery(hand *handoff, m *metrics, p *probeSet) *delivery {
	return &delivery{
		hand: hand, metrics: m, probes: p,
		out:      make(chan *Message),
		fence:    make(chan *fenceReq),
		fenceSem: make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
}

// Messages returns the channel of delivered records. It is closed exactly once, after Close,
// after ctx cancellation or after a fatal error (see Err), so ranging over it always ends.
// Records of one shard arrive in order; records of different shards interleave.
//
// The channel has no buffer: each record is checked against the lease deadline and its shard's
// state right before it is sent, and a send waiting for the consumer is withdrawn when a Seek,
// a lost or handed-back lease or Close moves its shard on. So nothing fetched before Seek
// returns is received after it, and a process paused (a GC, a frozen VM, SIGSTOP) past the
// end of its lease hands the consumer at most the one record whose send was under way when it
// paused (docs/leases.md; Message.Tenure lets a sink refuse it).
//
// The first call makes the channel this subscription's way of consuming, for good: records
// flow into it once any All or Batches loop running then has ended, and later All or Batches
// calls yield ErrConsumerBusy. Nothing is lost in the change: the channel goes on with what the
// loop left.
func (s *Subscriber) Messages() <-chan *Message { return s.del.messages() }

func (d *delivery) messages() <-chan *Message {
	if d.chosen.Load() { // a select loop may call Messages for every record
		return d.out
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state == dispatchIdle {
		d.state = dispatchRunning
		go d.dispatch() // owned by the delivery: stop ends it and waits for it (done)
	}
	d.chosen.Store(true)
	return d.out
}

// dispatcher is the state of the goroutine behind Messages, owned by it.
type dispatcher struct {
	d    *delivery
	held *Message // the next delivery, counted as handed out, not yet received
}

// dispatch hands deliveries to the consumer through Messages, dropping those whose shard has
// moved on (sought, lost, closing) since they were fetched. A fence makes it re-check the
// delivery it holds, so nothing fetched before a seek reaches the consumer after it.
//
// Messages has no buffer, so that no record waits there past the checks it passed: a record
// checked against the deadline and sitting in a buffer would reach a consumer resuming from a
// whole-process pause after the deadline, while a peer reads its shard. Each record is checked
// (the deadline, its shard's generation) right before its send, and the send waits for the
// consumer or a fence, whichever comes first. Every end of a generation fences (invalidate),
// the deadline's passing too (it loses every shard held), so a send waits for the consumer
// only while its shard is read here. One record can reach the consumer late: the one whose
// send was under way when the whole process paused, whose send completes as it resumes; that
// is the same to everyone as a receive just before the pause (docs/leases.md).
func (dl *delivery) dispatch() {
	defer close(dl.done)
	defer close(dl.out)
	// Take the hand-off from any pull loop, for good, answering fences meanwhile.
	d := &dispatcher{d: dl}
	for taken := false; !taken; {
		select {
		case <-dl.hand.token:
			taken = true
		case req := <-dl.fence:
			if d.answer(req); req.stop {
				return
			}
		}
	}
	defer func() {
		if d.held != nil {
			d.drop()
		}
	}()
	for {
		if dl.fencing.Load() {
			if req := <-dl.fence; d.answer(req) {
				return
			}
			continue
		}
		if d.held == nil {
			if d.held = dl.hand.take(); d.held == nil {
				if d.awaitPage() {
					return
				}
				continue
			}
		}
		dl.probes.hold()
		if t := dl.hand.tenure; !t.mayHandOut() {
			// The lease deadline passed: nothing goes out until every shard held was given up,
			// which makes held stale (a fence drops it).
			select {
			case req := <-dl.fence:
				if d.answer(req) {
					return
				}
			case <-t.whenRevived():
			}
			continue
		}
		if pg := d.held.pg; pg.gen != pg.shard.gate.Load() {
			d.drop() // moved on, its fence on its way
			continue
		}
		var checked time.Time
		if dl.probes != nil {
			checked = time.Now()
			dl.probes.passed(d.held)
		}
		select { // a consumer waiting to receive takes it at once
		case dl.out <- d.held:
			d.sent(checked)
			continue
		default:
		}
		select {
		case dl.out <- d.held:
			d.sent(checked)
		case req := <-dl.fence:
			if d.answer(req) {
				return
			}
		}
	}
}

// sent notes that the consumer received the held delivery, checked at checked.
func (d *dispatcher) sent(checked time.Time) {
	d.d.probes.handOutChecked(d.held, checked)
	d.d.metrics.consumed(d.held)
	d.held = nil
}

// awaitPage waits for the next page, or a fence, and reports whether a fence stopped the
// dispatcher. Meanwhile the consumer waits for records (utilization.go): it has received
// everything sent.
func (d *dispatcher) awaitPage() bool {
	dl := d.d
	select {
	case page := <-dl.hand.in:
		dl.hand.refill(page)
		return false
	default:
	}
	dl.hand.util.waiting(true)
	defer dl.hand.util.waiting(false)
	select {
	case page := <-dl.hand.in:
		dl.hand.refill(page)
	case req := <-dl.fence:
		return d.answer(req)
	}
	return false
}

// fenceReq is a fencer's request to the dispatcher.
type fenceReq struct {
	ack  chan struct{} // closed once the dispatcher has re-checked what it holds
	stop bool          // the dispatcher must end (stopDispatch)
}

// answer lowers the fencing flag, drops the held delivery when it is stale (whatever it is,
// when the dispatcher must stop), acknowledges req, and reports req.stop.
func (d *dispatcher) answer(req *fenceReq) bool {
	d.d.fencing.Store(false)
	if h := d.held; h != nil && (req.stop || h.pg.gen != h.pg.shard.gate.Load()) {
		d.drop()
	}
	close(req.ack)
	return req.stop
}

// drop lets go of the held delivery, uncounted: it was never received.
func (d *dispatcher) drop() {
	d.held.pg.shard.out.done(1)
	abandonSpan(d.held)
	d.held = nil
}

// fence returns once no consumer can be handed a delivery checked against a gate as it was
// before the caller moved it: the dispatcher, if it runs, has re-checked the delivery it holds. A pull loop needs no fence: it checks each
// delivery as it takes it (handoff). The wait is not cancelled: the dispatcher answers at once,
// and other fencers are as quick.
func (d *delivery) fenceDispatch() {
	d.mu.Lock()
	running := d.state == dispatchRunning
	d.mu.Unlock()
	if !running {
		return
	}
	select {
	case d.fenceSem <- struct{}{}:
	case <-d.done:
		return
	}
	d.sendFence(&fenceReq{ack: make(chan struct{})})
	<-d.fenceSem
}

// sendFence raises the fencing flag, delivers req to the dispatcher and waits for the answer.
// The caller holds fenceSem: the flag is one fencer's until the dispatcher has lowered it.
// sendFence does not wait on a context: the dispatcher looks at the flag before each send and
// takes fences wherever it waits (or is done), and answers a request as soon as it has it.
func (d *delivery) sendFence(req *fenceReq) {
	d.fencing.Store(true)
	select {
	case d.fence <- req:
	case <-d.done:
		return
	}
	<-req.ack
}

// stop ends the dispatcher and closes Messages, exactly once, and returns once the
// dispatcher has returned.
func (d *delivery) stop() {
	d.mu.Lock()
	state := d.state
	d.state = dispatchStopped
	d.mu.Unlock()
	switch state {
	case dispatchIdle:
		close(d.out)
		close(d.done)
	case dispatchRunning:
		d.fenceSem <- struct{}{}
		d.sendFence(&fenceReq{ack: make(chan struct{}), stop: true})
		<-d.fenceSem
		<-d.done
	}
}
