package sim

import (
	"math"

	"github.com/gostream/kinesub/lease"
)

// Checkpoints and deliveries inside KPL aggregates. A delivery's position is its record's
// sequence number and its index among the aggregate's user records (0 for a record that is no
// aggregate). A checkpoint (S, k) with k > 0 has handled the user records of S below index k;
// (S, 0) has handled all of S, so it is past every (S, k).

// seqOf is c's sequence number alone.
func seqOf(c lease.Checkpoint) lease.Checkpoint { return lease.Checkpoint{Sequence: c.Sequence} }

// checkpointAfter reports whether checkpoint a is past checkpoint b.
func checkpointAfter(a, b lease.Checkpoint) bool {
	switch {
	case after(seqOf(a), seqOf(b)):
		return true
	case after(seqOf(b), seqOf(a)):
		return false
	}
	within := func(sub int64) int64 {
		if sub == 0 {
			return math.MaxInt64
		}
		return sub
	}
	return within(a.SubSequence) > within(b.SubSequence)
}

// handledBy reports whether the delivery at position at is at or before checkpoint cp: cp
// counts it handled.
func handledBy(cp, at lease.Checkpoint) bool {
	switch {
	case after(seqOf(at), seqOf(cp)):
		return false
	case after(seqOf(cp), seqOf(at)):
		return true
	}
	return cp.SubSequence == 0 || at.SubSequence < cp.SubSequence
}
