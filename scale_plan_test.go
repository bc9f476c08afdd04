package kinesub

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestPlanFleet: the instances needed are ceil(Σ utilization / target), at least 1 and at most
// the open shards; an instance with no utilization noted counts at the mean of the others.
func TestPlanFleet(t *testing.T) {
	for _, c := range []struct {
		name string
		in   fleetIn
		want int
	}{
		{"one idle instance", fleetIn{utils: []float64{0}, shards: 4, target: 0.7}, 1},
		{"an idle fleet shrinks to one", fleetIn{utils: []float64{0.01, 0, 0.02, 0}, shards: 8, target: 0.7}, 1},
		{"at the target: as many as now", fleetIn{utils: []float64{0.7, 0.7, 0.7}, shards: 8, target: 0.7}, 3},
		{"a little above: one more", fleetIn{utils: []float64{0.75, 0.75, 0.75}, shards: 8, target: 0.7}, 4},
		{"below: fewer", fleetIn{utils: []float64{0.3, 0.3, 0.3, 0.3}, shards: 8, target: 0.7}, 2},
		{"uneven loads count by their sum", fleetIn{utils: []float64{1, 0.1, 0.1, 0.1}, shards: 8, target: 0.7}, 2},
		{"saturated: n / target, a step at a time", fleetIn{utils: []float64{1, 1}, shards: 8, target: 0.7}, 3},
		{"saturated, n = 10", fleetIn{utils: []float64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, shards: 100, target: 0.7}, 15},
		{"never more than the open shards", fleetIn{utils: []float64{1, 1, 1, 1}, shards: 4, target: 0.7}, 4},
		{"no open shard: one", fleetIn{utils: []float64{1}, shards: 0, target: 0.7}, 1},
		{"target 1: the busy time in instances", fleetIn{utils: []float64{0.5, 0.6}, shards: 8, target: 1}, 2},
		{"a low target keeps headroom", fleetIn{utils: []float64{0.5, 0.5}, shards: 8, target: 0.25}, 4},
		{"unknown instances count at the mean", fleetIn{utils: []float64{0.9}, unknown: 3, shards: 8, target: 0.7}, 6},
		{"unknown instances of an idle fleet", fleetIn{utils: []float64{0}, unknown: 3, shards: 8, target: 0.7}, 1},
		{"unknown instances at the target keep the fleet", fleetIn{utils: []float64{0.7, 0.7}, unknown: 2, shards: 8, target: 0.7}, 4},
		{"out-of-range utilizations are clamped", fleetIn{utils: []float64{-1, 3}, shards: 8, target: 0.5}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, planFleet(c.in))
		})
	}
}
