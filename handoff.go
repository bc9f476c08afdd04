package kinesub

import (
	"context"
	"sync"
)

// handoff is where deliveries pass from the readers to the consumer, whichever way it consumes:
// the dispatcher behind Messages (dispatch.go) or a pull loop (All, Batches in consume.go). Pages
// arrive on in; what is left of the current one waits in rest, so a consumer that stops pulling
// leaves it for the next. One consumer pulls at a time: it holds the token.
//
// Every delivery is checked against its shard's generation gate when it is pulled, under mu;
// a fence (Seek, a lost lease, Close) bumps the gate first and then takes mu, so once the fence
// returns no delivery fetched before it is pulled.
type handoff struct {
	in    chan []Message // readers → consumer, a page at a time
	token chan struct{}  // holds one token; the consumer pulling has taken it

	mu   sync.Mutex
	rest []Message // what is left of one page: one shard, one generation
}

func newHandoff(pages int) *handoff {
	h := &handoff{in: make(chan []Message, pages), token: make(chan struct{}, 1)}
	h.token <- struct{}{}
	return h
}

// take returns the next delivery of rest whose shard has not moved on since it was fetched,
// counted as handed out, or nil when rest holds none.
func (h *handoff) take() *Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.rest) == 0 {
		return nil
	}
	m := &h.rest[0]
	if m.gen != m.shard.gate.Load() {
		h.rest = nil // one page is one shard and one generation: all of it is stale
		return nil
	}
	h.rest = h.rest[1:]
	m.shard.handedOut.Add(1)
	return m
}

// takeAll returns what is left of the current page, counted as handed out, or nil when nothing
// is left or the page is stale.
func (h *handoff) takeAll() []Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	page := h.rest
	h.rest = nil
	if len(page) == 0 || page[0].gen != page[0].shard.gate.Load() {
		return nil
	}
	page[0].shard.handedOut.Add(int64(len(page)))
	return page
}

// refill makes page the current one.
func (h *handoff) refill(page []Message) {
	h.mu.Lock()
	h.rest = page
	h.mu.Unlock()
}

// fence returns once no pull is checking a delivery against a gate as it was before the
// caller bumped it.
func (h *handoff) fence() {
	h.mu.Lock()
	h.mu.Unlock() //nolint:staticcheck // an empty critical section: waiting for the one in progress
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
