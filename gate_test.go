package kinesub

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// newGateHarness builds just the consumer side of a Subscriber: deliveries pushed into
// s.hand.in come out of Messages unless their stamp is stale. Messages is unbuffered, so the
// dispatcher holds the delivery the consumer has not taken.
func newGateHarness(t *testing.T) *Subscriber { return newGateHarnessBuffered(t, 0) }

// newGateHarnessBuffered is newGateHarness with a Messages buffer of depth deliveries.
func newGateHarnessBuffered(t *testing.T, depth int) *Subscriber {
	s := &Subscriber{
		hand:         newHandoff(16),
		out:          make(chan *Message, depth),
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
				s.hand.in <- []Message{{shard: w, gen: tc.stamp, data: []byte(tc.name)}}
				select {
				case m := <-s.out:
					if !tc.delivers {
						t.Fatalf("stale delivery %q reached the consumer", m.data)
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
	s.hand.in <- []Message{{shard: w, gen: 0, data: []byte("pre-seek")}, {shard: w, gen: 0, data: []byte("pre-seek too")}}
	synctest.Wait() // the dispatcher now holds the first, blocked on the consumer
	w.gate.Add(1)
	if err := s.fenceDispatch(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.hand.in <- []Message{{shard: w, gen: 1, data: []byte("post-seek")}}
	select {
	case m := <-s.out:
		if string(m.data) != "post-seek" {
			t.Fatalf("got %q after the fence", m.data)
		}
	case <-time.After(time.Second):
		t.Fatal("nothing delivered after the fence")
	}
	if n := w.handedOut.Load(); n != 1 {
		t.Fatalf("handed out = %d, want 1 (the retracted delivery is not counted)", n)
	}
}

// TestFenceTakesBackBuffered: deliveries the consumer has not received may wait in the Messages
// buffer when a seek bumps one shard's gate; the fence takes them back, drops that shard's and
// keeps the others' in order.
func TestFenceTakesBackBuffered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newGateHarnessBuffered(t, outBuffer)
		a, b := &worker{id: "shard-a"}, &worker{id: "shard-b"}
		s.hand.in <- []Message{{shard: b, data: []byte("b1")}}
		s.hand.in <- []Message{{shard: a, data: []byte("a1")}, {shard: a, data: []byte("a2")}}
		s.hand.in <- []Message{{shard: b, data: []byte("b2")}}
		synctest.Wait() // all four wait in the buffer
		if n := len(s.out); n != 4 {
			t.Fatalf("%d deliveries buffered, want 4", n)
		}
		a.gate.Add(1)
		if err := s.fenceDispatch(context.Background()); err != nil {
			t.Fatal(err)
		}
		s.hand.in <- []Message{{shard: a, gen: 1, data: []byte("a-post")}}
		var got []string
		for len(got) < 3 {
			select {
			case m := <-s.out:
				got = append(got, string(m.data))
			case <-time.After(time.Second):
				t.Fatalf("got %q, then nothing", got)
			}
		}
		if want := []string{"b1", "b2", "a-post"}; !slices.Equal(got, want) {
			t.Fatalf("got %q after the fence, want %q", got, want)
		}
		if na, nb := a.handedOut.Load(), b.handedOut.Load(); na != 1 || nb != 2 {
			t.Fatalf("handed out: shard a %d, shard b %d; want 1 and 2 (the dropped are not counted)", na, nb)
		}
	})
}
