package kinesub

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// newGateHarness builds just the consumer side of a Subscriber, its delivery: deliveries
// pushed into hand.in come out of Messages unless their stamp is stale. The dispatcher holds
// the delivery the consumer has not taken.
func newGateHarness(t *testing.T) *delivery {
	d := newDelivery(newHandoff(16), nil, nil)
	d.messages()
	t.Cleanup(d.stop)
	return d
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
	s.fenceDispatch()
	s.hand.in <- testPage(w, 1, "post-seek")
	select {
	case m := <-s.out:
		if string(m.Data()) != "post-seek" {
			t.Fatalf("got %q after the fence", m.Data())
		}
	case <-time.After(time.Second):
		t.Fatal("nothing delivered after the fence")
	}
	if n := w.out.count(); n != 1 {
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
			s.fenceDispatch()
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
		if n := w.out.count(); n != 3 {
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
				s.fenceDispatch()
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
	if n := w.out.count(); n != pages*perPage {
		t.Fatalf("handed out = %d, want %d", n, pages*perPage)
	}
}

// TestSeekFencesUnderLoad: fencers seek two shards at random while pages keep arriving and a
// consumer receives everything. Per shard, records arrive in order, nothing repeats, nothing is
// skipped but stale records, and no record fetched before a fence returned is received after it.
func TestSeekFencesUnderLoad(t *testing.T) {
	const pages, perPage = 200, 25
	s := newGateHarness(t)
	ws := []*worker{{id: "shard-0"}, {id: "shard-1"}}
	var fenced [2]atomic.Uint64 // per shard: the generation every fence returned so far made current
	var gensMu sync.Mutex
	var gens [2][pages/2 + 1]uint64 // per shard and page: the generation it was fetched in
	queue := func(i, page int, payloads ...string) {
		gen := ws[i].gate.Load()
		gensMu.Lock()
		gens[i][page] = gen
		gensMu.Unlock()
		s.hand.in <- testPage(ws[i], gen, payloads...)
	}
	done := make(chan struct{})
	go func() { // owned by the test: it ends once every page is queued
		defer close(done)
		for p := range pages {
			payloads := make([]string, perPage)
			for i := range payloads {
				payloads[i] = strconv.Itoa(p/2*perPage + i)
			}
			queue(p%2, p/2, payloads...)
		}
	}()
	stop := make(chan struct{})
	var fencers sync.WaitGroup
	for f := range 2 {
		fencers.Add(1)
		go func() { // owned by the test, which stops and waits for it
			defer fencers.Done()
			rng := rand.New(rand.NewPCG(uint64(f), 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := rng.IntN(2)
				gen := ws[i].gate.Add(1)
				s.fenceDispatch()
				for { // raise fenced[i] to gen, never lower it
					old := fenced[i].Load()
					if old >= gen || fenced[i].CompareAndSwap(old, gen) {
						break
					}
				}
				runtime.Gosched()
			}
		}()
	}
	stopFencers := sync.OnceFunc(func() {
		close(stop)
		fencers.Wait()
	})
	defer stopFencers()
	// Once every page is queued and the fencers have stopped, one last record per shard, of its
	// current generation, marks the end: nothing can make it stale any more.
	const last = pages / 2 * perPage
	var sentinels sync.WaitGroup
	defer sentinels.Wait()
	prev := [2]int{-1, -1}
	ended := 0
	for ended < 2 {
		before := [2]uint64{fenced[0].Load(), fenced[1].Load()}
		var m *Message
		select {
		case m = <-s.out:
		case <-done:
			done = nil
			stopFencers()
			sentinels.Go(func() { // owned by the test, which waits for it
				for i := range ws {
					queue(i, pages/2, strconv.Itoa(last))
				}
			})
			continue
		case <-time.After(time.Minute):
			t.Fatal("nothing delivered for a minute")
		}
		i := 0
		if m.pg.shard == ws[1] {
			i = 1
		}
		if m.pg.gen < before[i] {
			t.Fatalf("shard-%d: record of generation %d received after a fence to %d returned", i, m.pg.gen, before[i])
		}
		n, _ := strconv.Atoi(string(m.Data()))
		if n <= prev[i] {
			t.Fatalf("shard-%d: record %d after %d", i, n, prev[i])
		}
		// A record skipped was stale: its shard has been sought since it was fetched.
		gensMu.Lock()
		gate := ws[i].gate.Load()
		for k := prev[i] + 1; k < n; k++ {
			if g := gens[i][k/perPage]; g >= gate {
				gensMu.Unlock()
				t.Fatalf("shard-%d: record %d of the current generation %d lost before %d", i, k, g, n)
			}
		}
		gensMu.Unlock()
		prev[i] = n
		if n == last {
			ended++
		}
	}
}

// testPage is a page of shard w fetched in generation gen, one plain record per payload.
func testPage(w *worker, gen uint64, payloads ...string) *fetched {
	f := newFetched(&shardPage{shard: w, gen: gen}, len(payloads))
	for i, p := range payloads {
		m := f.add()
		m.off = uint32(i)
		m.setData([]byte(p))
	}
	f.seal(len(payloads), false)
	return f
}
