package protocol

import "math"

// Balancing by load. Every owner notes on its heartbeat row the bytes a second its readers
// fetch (the root's load.go). When every owner the fair share counts has noted a load, and the loads are
// not all equal (all zero, say: nothing is published), a round balances by load instead of by
// count:
//   - Hand back, on balance rounds: an owner above (1+loadSlack) × the mean load hands back,
//     cleanly, up to maxLoadMoves shards, each the one whose load comes closest to what would
//     bring it to the mean (or it and the least loaded owner to the same load, when less),
//     among those that leave the least loaded owner below it, until it is within the slack. A shard that moved lately (taken here, or handed back from here, within
//     movedRounds balance rounds) stays where it is: loads take that long to show a move.
//   - Take: the least loaded owner, or one below (1-loadSlack) × the mean, takes free leases,
//     one a round (more when many are free) so that its load shows what it took before it takes
//     more; never one it handed back lately.
//   - Steal: only from an owner whose heartbeat lapsed, as when balancing by count. Shards move
//     between live owners by hand-back only.
// Counts are not balanced meanwhile: a hot shard's owner holds fewer shards than the others.

// loadSlack: an owner hands back for load only above (1+loadSlack) × the mean.
const loadSlack = 0.15

// maxLoadMoves is the most shards an owner hands back for load in one round.
const maxLoadMoves = 4

// LoadIn is what balancing by load decides from.
type LoadIn struct {
	Owners map[string]float64 // bytes a second each owner noted on its heartbeat row
	Mine   map[string]float64 // bytes a second of each shard held here
	Moved  map[string]bool    // shards that moved lately: taken here, or handed back from here
	// Settling: a shard taken here lately has not been measured yet (no record fetched), so
	// this subscriber's load may not show it.
	Settling bool
}

// byLoad returns the loads of this subscriber (measured now: its shards but those it is
// handing back) and of the other owners the fair share counts (as they noted), and their mean,
// with ok false when the round balances by count: a load is missing, or all are equal.
func (in *BalanceIn) byLoad(owners map[string]int) (loads map[string]float64, mean float64, ok bool) {
	if in.Load == nil {
		return nil, 0, false
	}
	loads = make(map[string]float64, len(owners))
	for o := range owners {
		if o == in.Owner || in.Lapsed(o) {
			continue
		}
		l, ok := in.Load.Owners[o]
		if !ok {
			return nil, 0, false
		}
		loads[o] = l
	}
	me := 0.0
	for _, id := range in.Readable {
		if in.counted(id) && in.Local[id] != LocalDraining {
			me += in.Load.Mine[id]
		}
	}
	loads[in.Owner] = me
	sum, lo, hi := 0.0, math.Inf(1), math.Inf(-1)
	for _, l := range loads {
		sum, lo, hi = sum+l, min(lo, l), max(hi, l)
	}
	if sum <= 0 || lo == hi {
		return nil, 0, false
	}
	return loads, sum / float64(len(loads)), true
}

// mayTakeByLoad reports whether this subscriber takes a free lease in a round balanced by
// load: it is the least loaded owner, or well below the mean, and every shard it took lately
// was measured. Were every owner at or below
// the mean to take, a shard handed back would go to whichever asked first, and measurements
// that differ by a few percent would move shards back and forth.
func (in *BalanceIn) mayTakeByLoad(loads map[string]float64, mean float64) bool {
	if in.Load.Settling {
		return false
	}
	me := loads[in.Owner]
	if me <= mean*(1-loadSlack) {
		return true
	}
	for o, l := range loads {
		if o != in.Owner && l < me {
			return false
		}
	}
	return true
}

// planLoad picks the shards to hand back for load (see above).
func (in *BalanceIn) planLoad(loads map[string]float64, mean float64) []string {
	me := loads[in.Owner]
	var cands []string
	for _, id := range in.Readable {
		if in.counted(id) && in.Local[id] == LocalReading && !in.Load.Moved[id] && in.Load.Mine[id] > 0 {
			cands = append(cands, id)
		}
	}
	others := make(map[string]float64, len(loads))
	for o, l := range loads {
		if o != in.Owner {
			others[o] = l
		}
	}
	var back []string
	for len(back) < maxLoadMoves && me > mean*(1+loadSlack) {
		least, lo := "", math.Inf(1)
		for o, l := range others {
			if l < lo || l == lo && o < least {
				least, lo = o, l
			}
		}
		// The shard to move is the one closest to what brings this owner to the mean, or the
		// two to the same load when that is less; the two's larger load must drop by a
		// twentieth of the mean at least, so that measurements a few percent apart move nothing.
		ideal := min(me-mean, (me-lo)/2)
		if ideal <= 0 {
			break
		}
		best := -1
		for i, id := range cands {
			l := in.Load.Mine[id]
			if lo+l > me-mean/20 {
				continue
			}
			if best < 0 || math.Abs(l-ideal) < math.Abs(in.Load.Mine[cands[best]]-ideal) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		id := cands[best]
		me -= in.Load.Mine[id]
		others[least] += in.Load.Mine[id]
		back = append(back, id)
		cands = append(cands[:best], cands[best+1:]...)
	}
	return back
}
