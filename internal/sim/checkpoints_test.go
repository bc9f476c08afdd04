package sim

import (
	"testing"

	"github.com/gostream/kinesub/lease"
)

// TestCheckpointsInAggregates: a checkpoint inside an aggregate (S, k) is behind (S, 0), which
// handled all of S; it counts the user records below k handled and the k-th not.
func TestCheckpointsInAggregates(t *testing.T) {
	cp := func(seq string, sub int64) lease.Checkpoint { return lease.Checkpoint{Sequence: seq, SubSequence: sub} }
	for _, tc := range []struct {
		a, b lease.Checkpoint
		want bool
	}{
		{cp("10", 0), cp("10", 2), true},
		{cp("10", 2), cp("10", 0), false},
		{cp("10", 3), cp("10", 2), true},
		{cp("11", 1), cp("10", 0), true},
		{cp("9", 0), cp("10", 1), false},
		{cp("10", 0), cp("10", 0), false},
		{cp(lease.ShardEnd, 0), cp("10", 2), true},
	} {
		if got := checkpointAfter(tc.a, tc.b); got != tc.want {
			t.Errorf("checkpointAfter(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
	for _, tc := range []struct {
		cp, at lease.Checkpoint
		want   bool
	}{
		{cp("10", 2), cp("10", 1), true},
		{cp("10", 2), cp("10", 2), false}, // the next one to read
		{cp("10", 0), cp("10", 5), true},
		{cp("10", 0), cp("11", 0), false},
		{cp("10", 3), cp("9", 0), true},
		{cp(lease.TrimHorizon, 0), cp("1", 0), false},
	} {
		if got := handledBy(tc.cp, tc.at); got != tc.want {
			t.Errorf("handledBy(%v, %v) = %v, want %v", tc.cp, tc.at, got, tc.want)
		}
	}
}
