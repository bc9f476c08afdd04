package kinesub

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

func TestWatermark(t *testing.T) {
	for _, tc := range []struct {
		name     string
		tracked  int
		acks     []int
		wantMark string
		inFlight int
	}{
		{"nothing acked", 3, nil, "", 3},
		{"in order", 3, []int{0, 1, 2}, "s2", 0},
		{"prefix only", 4, []int{0, 1, 3}, "s1", 1},
		{"hole holds the mark", 3, []int{1, 2}, "", 1},
		{"hole filled", 3, []int{2, 1, 0}, "s2", 0},
		{"duplicate ack ignored", 3, []int{0, 0, 1}, "s1", 1},
		{"unknown index ignored", 2, []int{5, 0}, "s0", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w watermark
			for i := range tc.tracked {
				if got := w.track("s"+strconv.Itoa(i), 0, 1); got != uint64(i) {
					t.Fatalf("track %d returned index %d", i, got)
				}
			}
			for _, a := range tc.acks {
				w.settle(uint64(a))
			}
			if w.mark != tc.wantMark {
				t.Errorf("mark = %q, want %q", w.mark, tc.wantMark)
			}
			if w.inFlight() != tc.inFlight {
				t.Errorf("inFlight = %d, want %d", w.inFlight(), tc.inFlight)
			}
		})
	}
}

func TestWatermarkAdvanceReport(t *testing.T) {
	var w watermark
	for i := range 3 {
		w.track(strconv.Itoa(i), 0, 1)
	}
	if w.settle(1) {
		t.Error("ack behind a hole reported an advance")
	}
	if !w.settle(0) || w.mark != "1" {
		t.Errorf("filling the hole: mark %q, want 1", w.mark)
	}
	if w.settle(0) {
		t.Error("second ack of a popped index reported an advance")
	}
}

// TestWatermarkRandomOrder acks many deliveries in random order and checks, after every ack,
// that the mark is the longest handled prefix and the counts agree, across compactions.
func TestWatermarkRandomOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var w watermark
	const n = 20000
	handled := make([]bool, n)
	prefix := 0
	order := rng.Perm(n)
	next := 0
	for _, idx := range order {
		for next <= idx { // deliveries are tracked before they can be acked
			w.track(strconv.Itoa(next), 0, 1)
			next++
		}
		w.settle(uint64(idx))
		handled[idx] = true
		for prefix < n && handled[prefix] {
			prefix++
		}
		want := ""
		if prefix > 0 {
			want = strconv.Itoa(prefix - 1)
		}
		if w.mark != want {
			t.Fatalf("after ack %d: mark %q, want %q", idx, w.mark, want)
		}
		if got, wantUnsettled := w.unsettled(), next-prefix; got != wantUnsettled {
			t.Fatalf("unsettled %d, want %d", got, wantUnsettled)
		}
	}
	if w.inFlight() != 0 || w.unsettled() != 0 {
		t.Fatalf("all acked but inFlight=%d unsettled=%d", w.inFlight(), w.unsettled())
	}
}

func TestWatermarkMemoryFollowsUnsettled(t *testing.T) {
	var w watermark
	for i := range 100000 {
		w.settle(w.track(strconv.Itoa(i), 0, 1))
	}
	if cap(w.pending) > 1024 {
		t.Errorf("in-order acks kept %d slots", cap(w.pending))
	}
}

// TestWatermarkSubSequence: inside an aggregate the mark carries how many of its user records are
// handled, and leaves it once the last one is.
func TestWatermarkSubSequence(t *testing.T) {
	var w watermark
	a := w.track("10", 0, 1)
	b0 := w.track("20", 1, 1)
	b1 := w.track("20", 2, 1)
	b2 := w.track("20", 0, 1)
	type mark struct {
		seq string
		sub int
	}
	at := func() mark { return mark{w.mark, w.markSub} }
	w.settle(b1)
	if at() != (mark{}) {
		t.Fatalf("mark moved past an unhandled delivery: %+v", at())
	}
	w.settle(a)
	if at() != (mark{"10", 0}) {
		t.Fatalf("mark = %+v, want 10", at())
	}
	w.settle(b0)
	if at() != (mark{"20", 2}) {
		t.Fatalf("mark = %+v, want 20 with 2 user records handled", at())
	}
	w.settle(b2)
	if at() != (mark{"20", 0}) {
		t.Fatalf("mark = %+v, want the whole of 20", at())
	}
}
