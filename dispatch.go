package kinesub

import (
	"runtime"
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

// messagesBuffer is the capacity of the Messages channel. A buffer spares the dispatcher and
// the consumer a goroutine switch per record; its deliveries are all of one shard and one
// generation at a time, so that a fence can empty it of stale ones without reordering anything
// (see dispatch).
const messagesBuffer = 64

// delivery is how fetched records reach the consumer: the hand-off from the readers
// (handoff.go), which pull loops take from, and the Messages channel with the dispatcher that
// feeds it. It owns the dispatcher: stop ends it and waits for it.
type delivery struct {
	hand    *handoff
	metrics *metrics
	probes  *probeSet      // tests only (probe.go)
	out     chan *Message  // dispatcher → consumer (Messages), messagesBuffer deliveries of one shard
	fence   chan *fenceReq // fencers re-check the dispatcher's held delivery and buffer
	// fenceSem: one fencer at a time; fencing: a fencer is at work, and the dispatcher, which
	// looks at the flag between two sends, must wait for its request.
	fenceSem chan struct{}
	fencing  atomic.Bool

	mu    sync.Mutex
	state int // dispatchIdle, dispatchRunning, dispatchStopped
	// chosen: Messages was called (the state is no longer dispatchIdle), read without the lock.
	chosen atomic.Bool
	done   chan struct{} // closed when the dispatcher has returned (or will never run)
}

func newDelivery(hand *handoff, m *metrics, buffer int, p *probeSet) *delivery {
	return &delivery{
		hand: hand, metrics: m, probes: p,
		out:      make(chan *Message, buffer),
		fence:    make(chan *fenceReq),
		fenceSem: make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
}

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
	d.timer = time.NewTimer(time.Hour)
	d.timer.Stop()
	defer func() {
		if d.held != nil {
			d.held.pg.shard.out.done(1)
			abandonSpan(d.held)
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
		if pg := d.held.pg; pg.shard != d.outShard || pg.gen != d.outGen {
			if len(dl.out) > 0 {
				if d.awaitTaken() {
					return
				}
				continue // a fence may have dropped held
			}
			d.outShard, d.outGen = pg.shard, pg.gen
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
		var checked time.Time
		if dl.probes != nil {
			checked = time.Now()
		}
		select {
		case dl.out <- d.held:
			dl.probes.handOutChecked(d.held, checked)
			dl.metrics.consumed(d.held)
			d.held = nil
			continue
		default:
		}
		// A send that waits for room completes when the consumer takes a record: if the whole
		// process is paused meanwhile, perhaps past the deadline, that is the same to everyone
		// as the consumer having received it before the pause (docs/leases.md). Without a
		// pause, the deadline's fence withdraws it.
		select {
		case dl.out <- d.held:
			dl.probes.handOutChecked(d.held, checked)
			dl.metrics.consumed(d.held)
			d.held = nil
		case req := <-dl.fence:
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
	dl := d.d
	start := time.Now()
	for range 64 {
		if len(dl.out) == 0 {
			return false
		}
		if time.Since(start) > 50*time.Microsecond {
			break
		}
		runtime.Gosched()
	}
	for len(dl.out) > 0 {
		d.timer.Reset(min(max(time.Since(start)/16, 20*time.Microsecond), 50*time.Millisecond))
		select {
		case <-d.timer.C:
		case req := <-dl.fence:
			d.timer.Stop()
			if d.answer(req) {
				return true
			}
		}
	}
	return false
}

// awaitPage waits for the next page, or a fence, and reports whether a fence stopped the
// dispatcher. Meanwhile the consumer waits for records (utilization.go) once it has taken what
// out holds: nothing signals that either, so while out holds records it looks as awaitTaken
// does, after an eighth of the time waited so far (so that the wait counts from at most that
// late), at least 20µs and at most 250ms apart: a consumer that stopped receiving costs four
// wake-ups a second.
func (d *dispatcher) awaitPage() bool {
	dl := d.d
	select {
	case page := <-dl.hand.in:
		dl.hand.refill(page)
		return false
	default:
	}
	var start time.Time
	for len(dl.out) > 0 {
		if start.IsZero() {
			start = time.Now()
		}
		d.timer.Reset(min(max(time.Since(start)/8, 20*time.Microsecond), 250*time.Millisecond))
		select {
		case page := <-dl.hand.in:
			d.timer.Stop()
			dl.hand.refill(page)
			return false
		case req := <-dl.fence:
			d.timer.Stop()
			return d.answer(req)
		case <-d.timer.C:
		}
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

// answer lowers the fencing flag, drops the held delivery and empties out when they are stale
// (everything, when the dispatcher must stop), acknowledges req, and reports req.stop.
func (d *dispatcher) answer(req *fenceReq) bool {
	d.d.fencing.Store(false)
	if h := d.held; h != nil && (req.stop || h.pg.gen != h.pg.shard.gate.Load()) {
		h.pg.shard.out.done(1)
		abandonSpan(h)
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
		case m := <-d.d.out:
			m.pg.shard.out.done(1)
			abandonSpan(m)
		default:
			d.outShard = nil
			return
		}
	}
}

// fence returns once no consumer can be handed a delivery checked against a gate as it was
// before the caller moved it: the dispatcher, if it runs, has re-checked the delivery it holds
// and emptied Messages' buffer of stale ones. A pull loop needs no fence: it checks each
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
// sendFence does not wait on a context: the dispatcher looks at the flag between two sends and
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
