package kinesub

import (
	"context"
)

// dispatch moves deliveries from the readers to the consumer, dropping those whose shard has
// moved on (sought, lost, closing) since they were fetched. A seeker's fence makes it re-check
// the delivery it holds, so nothing fetched before a seek reaches the consumer after it.
func (s *Subscriber) dispatch() {
	defer s.keepers.Done()
	defer close(s.dispatchDone)
	defer close(s.out)
	var page []Message // what is left of one reader's page: one shard, one generation
	for {
		if len(page) == 0 {
			select {
			case page = <-s.in:
			case ack := <-s.fence:
				if ack == nil {
					return
				}
				close(ack)
			}
			continue
		}
		m := &page[0]
		if m.gen != m.shard.gate.Load() {
			page = nil
			continue
		}
		m.shard.handedOut.Add(1)
		select {
		case s.out <- m:
			s.metrics.consumed(m)
			page = page[1:]
		case ack := <-s.fence:
			// The loop re-checks the gate before the next send.
			m.shard.handedOut.Add(-1)
			if ack == nil {
				return
			}
			close(ack)
		}
	}
}

// fenceDispatch returns once the dispatcher has re-checked the delivery it holds.
func (s *Subscriber) fenceDispatch(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case s.fence <- ack:
	case <-s.dispatchDone:
		return ErrClosed
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
