package kinesub

import (
	"context"
)

// handoff is where deliveries pass from the readers to the consumer, whichever way it consumes:
// the dispatcher behind Messages (dispatch.go) or a pull loop (All, Batches in consume.go). Pages
// arrive on in; what is left of the current one waits in rest, so a consumer that stops pulling
// leaves it for the next. One consumer pulls at a time: it holds the token, and with it rest.
//
// Every delivery is checked against its shard's generation gate when it is pulled: counted as
// handed out first, then checked (and uncounted if stale). A pull that starts after a gate was
// moved (invalidate: Seek, a lost lease, a hand-back, Close) finds that shard's deliveries
// stale. A drain waiting for the consumer to settle what it holds (a hand-back, Close) moves
// the gate first and then reads the count: of the two, one sees the other's write, so either
// the pull finds the delivery stale or the drain counts it. No lock is taken per record.
//
// Nothing is handed out once the subscriber's lease deadline has passed (tenure.go), whatever
// the generation gates say: a process paused past the deadline may run its consumer before the
// timer that gives its shards up. A pull waits (ready) until every shard held then was given
// up; their deliveries are stale by then.
type handoff struct {
	in     chan *fetched // readers → consumer, a page at a time
	token  chan struct{} // holds one token; the consumer pulling has taken it
	tenure *tenure       // the deadline; nil in tests of the hand-off alone
	util   *utilMeter    // the consumer's utilization (utilization.go); nil in tests of the hand-off alone

	rest *fetched // the current page: one shard, one generation; owned by the token's holder
	next int      // rest's deliveries from next on are left to pull
}

// ready blocks while the lease deadline forbids handing records out, and reports false when ctx
// or stop ended first.
func (h *handoff) ready(ctx context.Context, stop <-chan struct{}) bool {
	for !h.tenure.mayHandOut() {
		select {
		case <-h.tenure.whenRevived():
		case <-ctx.Done():
			return false
		case <-stop:
			return false
		}
	}
	return true
}

func newHandoff(pages int) *handoff {
	h := &handoff{in: make(chan *fetched, pages), token: make(chan struct{}, 1)}
	h.token <- struct{}{}
	return h
}

// take returns the next delivery of rest whose shard has not moved on since it was fetched,
// counted as handed out, or nil when rest holds none.
func (h *handoff) take() *Message {
	f := h.rest
	if f == nil || h.next >= f.n {
		return nil
	}
	w := f.pg.shard
	w.out.add(1)
	if f.pg.gen != w.gate.Load() {
		w.out.done(1)
		h.drop() // one page is one shard and one generation: all of it is stale
		return nil
	}
	m := f.at(h.next)
	if t := w.tracing(); t != nil {
		t.receive(m) // its receive span (tracing.go)
	}
	if h.next++; h.next == f.n {
		// Its last delivery: let go of the page, which would otherwise stay reachable from
		// every Message kept (through its shard and the subscriber) until the next one.
		h.drop()
	}
	return m
}

// takeRest returns what is left of the current page, counted as handed out: the page and the
// index of its first delivery left, or nil when nothing is left or the page is stale.
func (h *handoff) takeRest() (*fetched, int) {
	f, from := h.rest, h.next
	if f == nil {
		return nil, 0
	}
	h.drop()
	n := f.n - from
	if n <= 0 {
		return nil, 0
	}
	w := f.pg.shard
	w.out.add(int64(n))
	if f.pg.gen != w.gate.Load() {
		w.out.done(int64(n))
		return nil, 0
	}
	return f, from
}

// messages returns f's deliveries from index from on.
func (f *fetched) messages(from int) []*Message {
	ms := make([]*Message, f.n-from)
	for i := range ms {
		ms[i] = f.at(from + i)
	}
	return ms
}

// refill makes page the current one.
func (h *handoff) refill(page *fetched) { h.rest, h.next = page, 0 }

func (h *handoff) drop() { h.rest, h.next = nil, 0 }

// discard lets go of every page left once the subscription is over and its readers have
// returned: none will be handed out, and a Message kept after Close would otherwise keep them
// reachable through its subscriber.
func (h *handoff) discard() {
	for {
		select {
		case <-h.in:
			continue
		default:
		}
		select {
		case <-h.token:
			h.drop()
			h.token <- struct{}{}
		default: // a pull loop still holds it; it finds every delivery stale
		}
		return
	}
}

// await is wait for a consumer that pulls (All, Batches): the time it blocks is time the
// consumer waited for records.
func (h *handoff) await(ctx context.Context, stop <-chan struct{}) bool {
	select {
	case page := <-h.in:
		h.refill(page)
		return true
	default:
	}
	h.util.waiting(true)
	defer h.util.waiting(false)
	return h.wait(ctx, stop)
}

// wait blocks until a page arrives (true), or ctx or stop ends first (false).
func (h *handoff) wait(ctx context.Context, stop <-chan struct{}) bool {
	select {
	case page := <-h.in:
		h.refill(page)
		return true
	case <-ctx.Done():
	case <-stop:
	}
	return false
}
