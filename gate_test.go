package kinesub

import (
	"context"
	"strconv"
	"sync"
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
		fence:        make(chan *fenceReq),
		fenceSem:     make(chan struct{}, 1),
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

// TestFenceTakesBackCurrentDelivery: a fence reaches the dispatcher by taking the delivery it is
// sending out of the send; a delivery still current is handed out again, before the later
// ones of its page, and stays counted once.
func TestFenceTakesBackCurrentDelivery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newGateHarness(t)
		w := &worker{id: "shard-1"}
		s.hand.in <- testPage(w, 0, "first", "second", "third")
		synctest.Wait() // the dispatcher now sends "first", blocked on the consumer
		for range 3 {   // nothing is stale: each fence takes "first" back and returns it
			if err := s.fenceDispatch(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		for _, want := range []string{"first", "second", "third"} {
			select {
			case m := <-s.out:
				if string(m.Data()) != want {
					t.Fatalf("got %q, want %q", m.Data(), want)
				}
			case <-time.After(time.Second):
				t.Fatalf("%q was not delivered", want)
			}
		}
		if n := w.handedOut.Load(); n != 3 {
			t.Fatalf("handed out = %d, want 3", n)
		}
	})
}

// TestFencesKeepOrder: fences racing a consumer that receives every delivery, from several
// goroutines at once, neither lose, repeat nor reorder anything.
func TestFencesKeepOrder(t *testing.T) {
	const pages, perPage = 50, 40
	s := newGateHarness(t)
	w := &worker{id: "shard-1"}
	go func() { // owned by the test: it ends once every page is queued
		for p := range pages {
			payloads := make([]string, perPage)
			for i := range payloads {
				payloads[i] = strconv.Itoa(p*perPage + i)
			}
			s.hand.in <- testPage(w, 0, payloads...)
		}
	}()
	stop := make(chan struct{})
	var fencers sync.WaitGroup
	for range 3 {
		fencers.Add(1)
		go func() { // owned by the test, which stops and waits for it
			defer fencers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := s.fenceDispatch(context.Background()); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for want := range pages * perPage {
		select {
		case m := <-s.out:
			if got := string(m.Data()); got != strconv.Itoa(want) {
				close(stop)
				fencers.Wait()
				t.Fatalf("got %s, want %d", got, want)
			}
		case <-time.After(time.Minute):
			t.Fatalf("record %d was not delivered", want)
		}
	}
	close(stop)
	fencers.Wait()
	if n := w.handedOut.Load(); n != pages*perPage {
		t.Fatalf("handed out = %d, want %d", n, pages*perPage)
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
