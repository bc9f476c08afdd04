package sim

import (
	"slices"
	"testing"

	"github.com/gostream/kinesub/lease"
)

// rec is record id of key at sequence seq of shard, read under owner's holding counter in
// lease table leases, in epoch.
func rec(id, key, shard, seq string, epoch int64, leases string, counter int64) SinkRecord {
	return SinkRecord{ID: id, Key: key, Shard: shard, At: lease.Checkpoint{Sequence: seq}, Epoch: epoch, Leases: leases,
		Tenure: lease.Tenure{Owner: "i0", Counter: counter}}
}

type sinkStep struct {
	op   string // apply, skip, redrive
	r    SinkRecord
	want SinkAnswer
}

func runSteps(t *testing.T, s *Sink, steps []sinkStep) {
	t.Helper()
	for i, st := range steps {
		var got SinkAnswer
		switch st.op {
		case "apply":
			got = s.Apply(st.r)
		case "skip":
			got = s.Skip(st.r)
		case "redrive":
			got = s.Redrive(st.r)
		}
		if got != st.want {
			t.Fatalf("step %d: %s(%s in %s at %s, epoch %d, %s/%d) = %v, want %v", i, st.op, st.r.ID, st.r.Shard, st.r.At.Sequence,
				st.r.Epoch, st.r.Leases, st.r.Tenure.Counter, got, st.want)
		}
	}
}

// TestSinkLedger: the modelled sink keeps marks per shard and key, so a key in two shards has
// each record applied once; it fences a later holding within a lease table only; a skipped
// record is passed, then redriven once; a new epoch applies every record once more. The
// ledger then owes nothing, and each planted fault leaves it owing or counting a double.
func TestSinkLedger(t *testing.T) {
	steps := []sinkStep{
		// Key k in two shards: sequence numbers of one shard say nothing of the other's.
		{"apply", rec("a", "k", "s0", "50", 0, "t1", 1), SinkApplied},
		{"apply", rec("b", "k", "s1", "20", 0, "t1", 1), SinkApplied},
		{"apply", rec("a", "k", "s0", "50", 0, "t1", 2), SinkReplay},
		// A later holding of s0 wrote the mark: the earlier one is refused, in its lease table.
		{"apply", rec("c", "k", "s0", "60", 0, "t1", 3), SinkApplied},
		{"apply", rec("d", "k", "s0", "70", 0, "t1", 2), SinkSuperseded},
		{"apply", rec("d", "k", "s0", "70", 0, "t1", 3), SinkApplied},
		// A dead letter: skipped, passed, refused as out of order, redriven once.
		{"skip", rec("e", "k", "s1", "30", 0, "t1", 1), SinkApplied},
		{"apply", rec("f", "k", "s1", "40", 0, "t1", 1), SinkApplied},
		{"apply", rec("e", "k", "s1", "30", 0, "t1", 1), SinkOutOfOrder},
		{"redrive", rec("e", "k", "s1", "30", 0, "t1", 1), SinkApplied},
		{"redrive", rec("e", "k", "s1", "30", 0, "t1", 1), SinkReplay},
		// A new lease table restarts the counters: its holdings are not compared with t1's.
		{"apply", rec("g", "k", "s0", "80", 0, "t2", 1), SinkApplied},
	}
	again := []sinkStep{ // epoch 1: the stream read again from its start
		{"apply", rec("a", "k", "s0", "50", 1, "t2", 1), SinkApplied},
		{"apply", rec("b", "k", "s1", "20", 1, "t2", 1), SinkApplied},
		{"apply", rec("c", "k", "s0", "60", 1, "t2", 1), SinkApplied},
		{"apply", rec("d", "k", "s0", "70", 0, "t2", 1), SinkSuperseded}, // the old epoch, late
		{"apply", rec("d", "k", "s0", "70", 1, "t2", 1), SinkApplied},
		{"apply", rec("e", "k", "s1", "30", 1, "t2", 1), SinkApplied},
		{"apply", rec("f", "k", "s1", "40", 1, "t2", 1), SinkApplied},
		{"apply", rec("g", "k", "s0", "80", 1, "t2", 1), SinkApplied},
		{"apply", rec("g", "k", "s0", "80", 1, "t2", 2), SinkReplay},
	}
	ids := []string{"a", "b", "c", "d", "e", "f", "g"}
	newSink := func() *Sink {
		s := NewSink()
		for _, id := range ids {
			s.Put(id, "k")
		}
		return s
	}
	s := newSink()
	runSteps(t, s, steps)
	if u := s.Unapplied(); len(u) != 0 || len(s.Violations()) != 0 {
		t.Fatalf("epoch 0: unapplied %v, violations %v", u, s.Violations())
	}
	s.Raise(1)
	if u := s.Unapplied(); !slices.Equal(u, ids) {
		t.Fatalf("epoch 1 raised: unapplied %v, want all", u)
	}
	runSteps(t, s, again)
	if u := s.Unapplied(); len(u) != 0 || len(s.Violations()) != 0 {
		t.Fatalf("epoch 1: unapplied %v, violations %v", u, s.Violations())
	}
	if st := s.Stats(); st.Redriven != 1 || st.Superseded != 2 || st.OutOfOrder != 1 {
		t.Fatalf("stats %+v", st)
	}

	// A dead letter left parked is owed no more.
	s = newSink()
	s.Left("e")
	runSteps(t, s, steps[:9])
	if u := s.Unapplied(); !slices.Equal(u, []string{"g"}) {
		t.Fatalf("with e left parked: unapplied %v, want [g]", u)
	}

	// Each planted fault: the ledger notices.
	for _, tc := range []struct {
		name  string
		plant func(*Sink)
		run   func(*Sink)
	}{
		{"marks per key", func(s *Sink) { s.PerKeyMarks = true }, func(s *Sink) {
			s.Apply(rec("a", "k", "s0", "50", 0, "", 1))
			s.Apply(rec("b", "k", "s1", "20", 0, "", 1)) // below s0's 50: a replay, lost
		}},
		{"no redrive", func(s *Sink) { s.NoRedrive = true }, func(s *Sink) {
			s.Skip(rec("a", "k", "s0", "50", 0, "", 1))
			s.Apply(rec("b", "k", "s0", "60", 0, "", 1))
			s.Redrive(rec("a", "k", "s0", "50", 0, "", 1))
		}},
		{"epoch ignored", func(s *Sink) { s.IgnoreEpoch = true }, func(s *Sink) {
			s.Apply(rec("a", "k", "s0", "50", 0, "", 1))
			s.Raise(1)
			s.Apply(rec("a", "k", "s0", "50", 1, "", 1))
		}},
		{"counters across lease tables", func(s *Sink) { s.CountersAcrossTables = true }, func(s *Sink) {
			s.Apply(rec("a", "k", "s0", "50", 0, "t1", 7))
			s.Apply(rec("b", "k", "s0", "60", 0, "t2", 1)) // stalls behind t1's counter
		}},
	} {
		s := NewSink()
		s.Put("a", "k")
		s.Put("b", "k")
		tc.plant(s)
		tc.run(s)
		if len(s.Unapplied()) == 0 {
			t.Errorf("%s: nothing owed", tc.name)
		}
	}
	// And an effect applied twice is one.
	s = NewSink()
	s.Put("a", "k")
	s.Apply(rec("a", "k", "s0", "50", 0, "", 1))
	s.Apply(rec("a", "k", "s1", "10", 0, "", 1)) // a copy of it in another shard
	if v := s.Violations(); len(v) != 1 {
		t.Fatalf("a copy in another shard applied: violations %v", v)
	}
}
