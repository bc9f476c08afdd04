package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/gostream/kinesub/lease"
)

// delivery is record id at sequence seq of shard, read under owner's holding counter.
func delivery(id, shard, seq, owner string, counter int64) Delivery {
	return Delivery{Instance: owner, Shard: shard, Tenure: lease.Tenure{Owner: owner, Counter: counter},
		At: lease.Checkpoint{Sequence: seq}, ID: id}
}

// TestSinkModel: the modelled sink applies a key's records once each, refuses replays and the
// writes of a holding a later one of its shard superseded, and reports a record applied
// before the key's record before it (which the mark then refuses for good) as a broken
// promise.
func TestSinkModel(t *testing.T) {
	c := NewChecker("s")
	c.Put("a1", "k")
	c.Put("a2", "k")
	c.Put("a3", "k")
	c.Put("b1", "j")
	steps := []struct {
		d    Delivery
		want Outcome
	}{
		{delivery("a1", "s0", "10", "i0#1", 1), Applied},
		{delivery("a1", "s0", "10", "i1#1", 2), Replay},     // read again by the next holding
		{delivery("a2", "s0", "20", "i1#1", 2), Applied},    // the next holding goes on
		{delivery("a3", "s0", "30", "i0#1", 1), Superseded}, // the old holding, paused past its lease
		{delivery("a3", "s0", "30", "i1#1", 2), Applied},
		{delivery("b1", "s1", "15", "i0#1", 1), Applied}, // another key, another shard
	}
	for _, s := range steps {
		if got := c.Apply(s.d); got != s.want {
			t.Fatalf("Apply(%s under %s/%d) = %d, want %d", s.d.ID, s.d.Tenure.Owner, s.d.Tenure.Counter, got, s.want)
		}
	}
	if v := c.Violations(); len(v) != 0 {
		t.Fatalf("an ordered run broke promises: %v", v)
	}
	if m := c.EffectsMissing(); len(m) != 0 {
		t.Fatalf("effects missing after every record was applied: %v", m)
	}
	applied, replays, superseded, _, _ := c.SinkStats()
	if applied != 4 || replays != 1 || superseded != 1 {
		t.Fatalf("SinkStats = %d applied, %d replays, %d superseded; want 4, 1, 1", applied, replays, superseded)
	}

	// Out of order: a key's later record applied first loses the one before it.
	c = NewChecker("s")
	c.Put("a1", "k")
	c.Put("a2", "k")
	if got := c.Apply(delivery("a2", "s0", "20", "i0#1", 1)); got != Applied {
		t.Fatalf("a2 first: %d, want Applied", got)
	}
	if got := c.Apply(delivery("a1", "s0", "10", "i1#1", 2)); got != Replay {
		t.Fatalf("a1 after a2: %d, want Replay", got)
	}
	v := c.Violations()
	if len(v) != 2 || !strings.Contains(v[0], "a1's, the key's record before it") || !strings.Contains(v[1], "never applied") {
		t.Fatalf("violations = %q, want a2 applied before a1, then a1 refused unapplied", v)
	}
	if m := c.EffectsMissing(); len(m) != 1 || m[0] != "a1" {
		t.Fatalf("EffectsMissing = %v, want [a1]", m)
	}
}

// TestHeld: what a Process holds of a shard is checked against its bound.
func TestHeld(t *testing.T) {
	c := NewChecker("s")
	c.Held("i0.1", "s0", 20, 16, 20)
	if v := c.Violations(); len(v) != 0 {
		t.Fatalf("at the bound: %v", v)
	}
	c.Held("i0.1", "s0", 21, 16, 20)
	if v := c.Violations(); len(v) != 1 || !strings.Contains(v[0], "holds 21 records, above its bound 20") {
		t.Fatalf("violations = %q, want one for 21 over 20", v)
	}
	if _, _, _, top, atCap := c.SinkStats(); top != 21 || !atCap {
		t.Fatalf("SinkStats: held top %d, at cap %v; want 21, true", top, atCap)
	}
}

// TestRewound: once an owner seeks back, its holdings may hand out records before the
// checkpoints they started from and move those checkpoints back; a restart ends that.
func TestRewound(t *testing.T) {
	c := NewChecker("s")
	start := lease.Lease{Key: "s/s0", Owner: "i0#1", Counter: 1, Checkpoint: lease.Checkpoint{Sequence: "20"}}
	c.Applied(Write{Op: "Acquire", Writer: "i0", Key: "s/s0", Before: lease.Lease{Key: "s/s0"}, After: start})
	early := delivery("r1", "s0", "10", "i0#1", 1)
	c.Rewound("i0")
	c.HandOut(early, time.Now())
	back := start
	back.Checkpoint.Sequence = "10"
	c.Applied(Write{Op: "CheckpointOrdered", Writer: "i0", Key: "s/s0", Before: start, After: back})
	if v := c.Violations(); len(v) != 0 {
		t.Fatalf("a rewound owner broke promises: %v", v)
	}
	c.Restarted("i0")
	c.Applied(Write{Op: "CheckpointOrdered", Writer: "i0", Key: "s/s0", Before: start, After: back})
	if v := c.Violations(); len(v) != 1 || !strings.Contains(v[0], "moved the checkpoint back") {
		t.Fatalf("violations = %q, want the checkpoint moved back after the restart", v)
	}
}

// TestAbandoned: a hand-back whose last checkpoint is behind what its holding acked misses the
// goal, unless the instance's Process call ended meanwhile (Abandoned): then the records it
// gave back, and those acked after them, are read again as documented.
func TestAbandoned(t *testing.T) {
	for _, abandoned := range []bool{false, true} {
		c := NewChecker("s")
		held := lease.Lease{Key: "s/s0", Owner: "i0#1", Counter: 1, Checkpoint: lease.Checkpoint{Sequence: "10"}}
		c.Applied(Write{Op: "Acquire", Writer: "i0", Key: "s/s0", Before: lease.Lease{Key: "s/s0"}, After: held})
		c.Acked(delivery("r3", "s0", "30", "i0#1", 1))
		c.Draining("s0", lease.Tenure{Owner: "i0#1", Counter: 1})
		if abandoned {
			c.Abandoned("i0#1")
		}
		released := held
		released.Owner, released.Counter = "", 2
		c.Applied(Write{Op: "Release", Writer: "i0", Key: "s/s0", Before: held, After: released})
		if got := len(c.Misses()); got != map[bool]int{false: 1, true: 0}[abandoned] {
			t.Fatalf("abandoned %v: misses %q", abandoned, c.Misses())
		}
	}
}

// TestHandOutAfterRowGone: an owner may hand out until its heartbeat row stops being its own
// (taken over, or released at Close), and nothing from then on; its renewals change nothing.
func TestHandOutAfterRowGone(t *testing.T) {
	c := NewChecker("s")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	row := func(owner string, counter int64) lease.Lease {
		return lease.Lease{Key: "s/~v2/owner/i0#1", Owner: owner, Counter: counter}
	}
	c.Applied(Write{Op: "Steal", Key: "s/~v2/owner/i0#1", Before: row("i0#1", 1), After: row("i0#1", 2), Applied: t0})
	c.HandOut(delivery("a1", "s0", "10", "i0#1", 1), t0.Add(time.Second))
	if v := c.Violations(); len(v) != 0 {
		t.Fatalf("a hand-out while the row is the owner's broke promises: %v", v)
	}
	c.Applied(Write{Op: "Steal", Key: "s/~v2/owner/i0#1", Before: row("i0#1", 2), After: row("i1#1", 3), Applied: t0.Add(2 * time.Second)})
	c.HandOut(delivery("a2", "s0", "20", "i0#1", 1), t0.Add(2*time.Second-time.Millisecond)) // checked before it
	if v := c.Violations(); len(v) != 0 {
		t.Fatalf("a hand-out before the takeover broke promises: %v", v)
	}
	c.HandOut(delivery("a3", "s0", "30", "i0#1", 1), t0.Add(2*time.Second))
	if v := c.Violations(); len(v) != 1 || !strings.Contains(v[0], "after its heartbeat row stopped being its own") {
		t.Fatalf("a hand-out at the takeover: violations %v, want one", v)
	}
}

// TestHandOutAfterSteal: a holder whose lease was stolen may hand out until 3/4 TTL after the
// first move of the change row applied after the steal, and nothing after; a move before the
// steal, or no move at all, sets no bound.
func TestHandOutAfterSteal(t *testing.T) {
	c := NewChecker("s")
	c.TTL = 4 * time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	shard := func(owner string, counter int64) lease.Lease {
		return lease.Lease{Key: "s/s0", Owner: owner, Counter: counter}
	}
	change := func(counter int64, at time.Time) Write {
		return Write{Op: "Steal", Key: "s/~table/changes", Before: lease.Lease{Key: "s/~table/changes", Counter: counter},
			After: lease.Lease{Key: "s/~table/changes", Counter: counter + 1}, Applied: at}
	}
	c.Applied(change(1, t0))
	c.Applied(Write{Op: "Steal", Key: "s/s0", Before: shard("i0#1", 1), After: shard("i1#1", 2), Applied: t0.Add(time.Second)})
	c.HandOut(delivery("a1", "s0", "10", "i0#1", 1), t0.Add(5*time.Second))
	if v := c.Violations(); len(v) != 0 {
		t.Fatalf("a hand-out with no move after the steal broke promises: %v", v)
	}
	c.Applied(change(2, t0.Add(6*time.Second)))
	c.HandOut(delivery("a2", "s0", "20", "i0#1", 1), t0.Add(9*time.Second)) // at 3/4 TTL: the last moment
	if v := c.Violations(); len(v) != 0 {
		t.Fatalf("a hand-out 3/4 TTL after the move broke promises: %v", v)
	}
	c.Applied(change(3, t0.Add(8*time.Second))) // a later move changes nothing
	c.HandOut(delivery("a3", "s0", "30", "i0#1", 1), t0.Add(9*time.Second+time.Millisecond))
	if v := c.Violations(); len(v) != 1 || !strings.Contains(v[0], "its lease was stolen") {
		t.Fatalf("a hand-out past 3/4 TTL after the move: violations %v, want one", v)
	}
}
