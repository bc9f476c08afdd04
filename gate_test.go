package kinesub

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// newGateHarness builds just the consumer side of a Subscriber: deliveries pushed into
// s.hand.in come out of Messages unless their stamp is stale. Messages is unbuffered, so the
// dispatcher holds the delivery the consumer has not taken.
func newGateHarness(t *testing.T) *Subscriber {
	s := &Subscriber{
		hand:         newHandoff(16),
		out:          make(chan *Message),
		fence:        make(chan chan struct{}),
		dispatchDone: make(chan struct{}),
	}
	s.Messages()
	t.Cleanup(func() {
		s.stopDispatch()
		s.keepers.Wait()
	})
	return s
}

// The gate tests run in synctest bubbles: a delivery not made once the dispatcher is blocked
// with nothing to do is one it dropped, and "the dispatcher now holds it" is a state to wait for.
func TestGateDropsStaleStamps(t *testing.T) {
	for _, tc := range []struct {
		name     string
		stamp    uint64
		gate     uint64 // the shard's generation when the delivery is dispatched
		delivers bool
	}{
		{"current generation", 0, 0, true},
		{"sought after fetch", 0, 1, false},
		{"lost lease after fetch", 3, 4, false},
		{"fetched after seek", 4, 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newGateHarness(t)
				w := &worker{id: "shard-1"}
				w.gate.Store(tc.gate)
				s.hand.in <- testPage(w, tc.stamp, tc.name)
				select {
				case m := <-s.out:
					if !tc.delivers {
						t.Fatalf("stale delivery %q reached the consumer", m.Data())
					}
				case <-time.After(100 * time.Millisecond):
					if tc.delivers {
						t.Fatal("current delivery was dropped")
					}
				}
			})
		})
	}
}

// TestFenceRetractsHeldDelivery: the dispatcher may already hold a delivery, waiting for the
// consumer, when a seek bumps the gate; the fence makes it re-check and drop it.
func TestFenceRetractsHeldDelivery(t *testing.T) {
	synctest.Test(t, testFenceRetractsHeldDelivery)
}

func testFenceRetractsHeldDelivery(t *testing.T) {
	s := newGateHarness(t)
	w := &worker{id: "shard-1"}
	s.hand.in <- testPage(w, 0, "pre-seek", "pre-seek too")
	synctest.Wait() // the dispatcher now holds the first, blocked on the consumer
	w.gate.Add(1)
	if err := s.fenceDispatch(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.hand.in <- testPage(w, 1, "post-seek")
	select {
	case m := <-s.out:
		if string(m.Data()) != "post-seek" {
			t.Fatalf("got %q after the fence", m.Data())
		}
	case <-time.After(time.Second):
		t.Fatal("nothing delivered after the fence")
	}
	if n := w.handedOut.Load(); n != 1 {
		t.Fatalf("handed out = %d, want 1 (the retracted delivery is not counted)", n)
	}
}

// testPage is a page of shard w fetched in generation gen, one plain record per payload.
func testPage(w *worker, gen uint64, payloads ...string) *shardPage {
	pg := &shardPage{shard: w, gen: gen, records: make([]types.Record, len(payloads)), msgs: make([]Message, len(payloads))}
	for i, p := range payloads {
		pg.records[i].Data = []byte(p)
		pg.msgs[i] = Message{pg: pg, rec: uint32(i), off: uint32(i)}
	}
	return pg
}
