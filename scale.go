package kinesub

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/gostream/kinesub/internal/protocol"
)

// The fleet's size. Every instance notes its consumer's utilization on its heartbeat row with
// its load (load.go, utilization.go). Each claim round, every instance reads the notes of the
// live instances, those the fair share counts, from the listing it balances by, and works out
// how many instances the fleet needs to run at the target utilization (WithScaleTarget, 0.7 by
// default):
//
//	needed = clamp(ceil(Σ uᵢ / target), 1, shards open for reading)
//
// the formula the Kubernetes HorizontalPodAutoscaler uses (desired = ceil(current × metric /
// target)), with the sum of the utilizations for current × metric. It is exported as the gauge
// kinesub.fleet.instances_needed, on which a Deployment can be scaled (docs/metrics.md).
//   - More instances than open shards would hold no shard, so the count stops there.
//   - An instance whose note carries no utilization (an earlier version, or a row not renewed
//     since it joined) counts at the mean of those that do: its share, neither a reason to
//     grow nor to shrink. Counting it as busy would grow a fleet in the middle of every rolling
//     upgrade; counting it as idle would shrink it.
//   - Lag is not an input of its own: a consumer that falls behind has records waiting for it
//     all the time, so its utilization is 1. A fleet that is behind for another reason (reads
//     throttled by the shards' limits, too few shards) would not catch up with more instances.
//   - A saturated fleet (every instance at 1) asks for n / target instances, n × 1.43 at the
//     default: the formula cannot tell how far past saturation the load is, so a fleet far
//     behind grows by that factor a step, as under the HorizontalPodAutoscaler, until its
//     instances have time left over.

// defaultScaleTarget is WithScaleTarget's default.
const defaultScaleTarget = 0.7

// fleetIn is what planning the fleet's size decides from.
type fleetIn struct {
	utils   []float64 // utilizations of the live instances that noted one (this one's included), 0 to 1
	unknown int       // live instances whose note carries no utilization
	shards  int       // shards open for reading
	target  float64   // the utilization the fleet should run at, in (0, 1]
}

// planFleet returns the number of instances the fleet needs (see above).
func planFleet(in fleetIn) int {
	sum := 0.0
	for _, u := range in.utils {
		sum += min(max(u, 0), 1)
	}
	if len(in.utils) > 0 {
		sum += float64(in.unknown) * sum / float64(len(in.utils))
	}
	// A hair below the quotient, so that a sum exactly at the target (0.7 / 0.7 in floating
	// point is 1.0000000000000002) does not ask for one more.
	n := int(math.Ceil(sum/in.target - 1e-9))
	return min(max(n, 1), max(in.shards, 1))
}

// fleetFigures are what the metrics report of the fleet's size, from the last claim round.
// It is safe for concurrent use.
type fleetFigures struct {
	needed atomic.Int64 // 0 until the first claim round
}

// fleetNow returns the consumer's utilization now and the fleet's size as of the last claim
// round (0 before the first), for the metrics.
func (s *Subscriber) fleetNow() (util float64, needed int64) {
	needed = s.fleet.needed.Load()
	if needed == 0 || s.env == nil {
		return 0, 0
	}
	return s.env.loads.util.utilization(time.Now()), needed
}

// noteFleet works out the fleet's size from the round's view (the planner's: the live instances,
// the readable shards) and the heartbeat rows read with it.
func (c *coordinator) noteFleet(in *protocol.BalanceIn) {
	s := c.s
	fi := fleetIn{shards: len(in.Readable), target: s.cfg.scaleTarget,
		utils: []float64{s.env.loads.util.utilization(time.Now())}}
	for owner := range in.Beats {
		if in.Lapsed(owner) {
			continue
		}
		if b := c.peers.Seen[owner]; b != nil {
			if l, ok := parseLoad(b.Row.Note); ok && l.hasUtil {
				fi.utils = append(fi.utils, l.util)
				continue
			}
		}
		fi.unknown++
	}
	s.fleet.needed.Store(int64(planFleet(fi)))
}
