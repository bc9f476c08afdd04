package protocol

import (
	"slices"
	"time"
)

// Balancing decides, from one read of the lease table, which leases this subscriber takes,
// hands back and steals. The decisions here are pure: no I/O, no clock, no goroutines, and
// randomness comes from the caller. The root's claim round (claim.go) carries them out.
// When every owner has noted its load, the rounds balance by load instead (balance_load.go);
// what follows is balancing by count.
//
// The fair share is counted over the n readable shards (not finished, parents done) and the k
// live owners: those whose heartbeat row is unexpired, those holding an unexpired lease of a
// readable shard, and this subscriber; but not an owner whose heartbeat row lapsed (expired,
// not released): it stopped or is about to be taken for dead, so a share kept for it would
// leave free shards unread. Nothing it holds is stolen: its row is taken over once it stood
// still for ReapAfter (reap.go), and its leases are then free. (An owner that released its row
// is closing and releases its leases next: it counts until then.)
// Every owner should hold floor(n/k) or ceil(n/k).
//   - Take: free and expired leases, up to ceil(n/k). (Balancing by load takes free leases by
//     load, and those of owners that stopped by count too.)
//   - Hand back: above ceil(n/k), the excess, cleanly (checkpoint, release), when an owner
//     joined since the last round and every balance round. At ceil(n/k), one lease, when more
//     owners hold the ceiling than the n - k*floor(n/k) that can, while owners below the floor
//     wait with nothing free to take: of the owners at or above the ceiling, by name, those
//     past the first n - k*floor(n/k) come down to the floor, as many as the waiting owners
//     need (yieldsCeiling). Without it, owners who joined after the others had taken their
//     shares reached the floor by one steal a balance round each (11 balance rounds for 32
//     instances on 2,000 shards).
//   - Steal, one lease a balance round, from the most loaded other live owner (ties to the
//     smallest name): when below floor(n/k) while it holds more than the floor, or at the floor while
//     the shares are uneven (so that one more is still within ceil(n/k)) and it holds two or
//     more above the floor. Never from an owner above the ceiling whose heartbeat is live: it
//     hands back its excess itself, without a steal's wait and replay.

// BalanceIn is what one round of balancing decides from.
type BalanceIn struct {
	Owner    string                // this subscriber
	Now      time.Time             // when the table was read
	Readable []string              // shards that may be read now, sorted
	Leases   map[string]Row        // shard leases by shard id
	Orphans  map[string]bool       // shards whose lease Leases shows free because its owner stopped
	Overdue  map[string]bool       // orphans found free for a claim tick: taken whatever the share
	Beats    map[string]Row        // heartbeat rows by owner
	Local    map[string]LocalState // the states of the shards held here, by shard id
	Taken    map[string]bool       // shards this subscriber took after the table was read
	Load     *LoadIn               // the loads (balance_load.go); nil: balance by count
}

// LocalState is, for balancing, the state of a shard held here (the root's shardState).
type LocalState uint32

// The states of a shard held here.
const (
	LocalStarting LocalState = iota + 1 // taken pending: waits before it reads
	LocalReading                        // reads
	LocalDraining                       // handed back or closing: settles, checkpoints, releases
	LocalReleased                       // given up cleanly
	LocalLost                           // lost: nothing more is written
	LocalEnded                          // read to its end
)

// Chooser is a source of randomness, drawn by the caller: math/rand/v2's top-level
// functions, or a seeded one.
type Chooser interface{ IntN(n int) int }

// counts reports, for every live owner, the readable shards it holds, with this subscriber
// counted by its workers: a worker that is not lost, on a shard the table does not show held
// by another owner. A row of its own that looks lapsed still counts (its renewal may not have
// landed yet, while its reader goes on); a shard stolen from it does not, though its worker
// learns of the steal only at its next renewal.
func (in *BalanceIn) counts() (owners map[string]int, mine int) {
	owners = map[string]int{in.Owner: 0}
	for _, id := range in.Readable {
		if l := in.Leases[id]; l.Held(in.Now) {
			owners[l.Owner]++
		}
		if in.counted(id) {
			mine++
		}
	}
	for _, l := range in.Beats {
		if _, ok := owners[l.Owner]; !ok && l.Held(in.Now) {
			owners[l.Owner] = 0
		}
	}
	owners[in.Owner] = mine
	return owners, mine
}

// sharers returns k, the number of owners the fair share divides the shards between: the
// owners of counts but those whose heartbeat row lapsed.
func (in *BalanceIn) sharers(owners map[string]int) int {
	k := 0
	for o := range owners {
		if o == in.Owner || !in.Lapsed(o) {
			k++
		}
	}
	return k
}

// Lapsed reports whether owner's heartbeat row expired while still its: its coordinator
// stopped renewing it. A released row is not lapsed: its owner is closing, and releases its
// leases next.
func (in *BalanceIn) Lapsed(owner string) bool {
	b, ok := in.Beats[owner]
	return ok && b.Owner == owner && !b.Held(in.Now)
}

// counted reports whether this subscriber's worker for shard id counts toward its share.
func (in *BalanceIn) counted(id string) bool {
	st, ok := in.Local[id]
	if !ok || st == LocalLost || st == LocalReleased {
		return false
	}
	o := in.Leases[id].Owner
	return o == "" || o == in.Owner || in.Taken[id]
}

// PlanTake returns the free and expired leases to take, in the order to try them: up to this
// subscriber's fair share, in a random order so that instances starting together spread out.
func PlanTake(in *BalanceIn, r Chooser) []string {
	owners, mine := in.counts()
	n, k := len(in.Readable), in.sharers(owners)
	room := (n+k-1)/k - mine
	orphanRoom := 0
	loads, mean, byLoad := in.byLoad(owners)
	if byLoad {
		// The leases of an owner that stopped are taken by count as well: a crash's shards do
		// not wait, unread, for the fleet's loads to settle; balancing by load moves them later.
		orphanRoom, room = room, 0
		if in.mayTakeByLoad(loads, mean) {
			free := 0
			for _, id := range in.Readable {
				if !in.Leases[id].Held(in.Now) {
					free++
				}
			}
			room = 1
			if free > 2*k { // many free: a closing owner's shards
				room = (free + k - 1) / k
			}
		}
	}
	if floor := n / k; !byLoad && floor < (n+k-1)/k && mine >= floor {
		// Owners below the floor take the free leases first: taken by an owner at the floor,
		// one would have to be handed back or stolen again (yieldsCeiling).
		if need := in.belowFloor(owners, floor); need > 0 {
			room = min(room, max(0, in.free()-need))
		}
	}
	order := append([]string(nil), in.Readable...)
	Shuffle(r, order)
	var want []string
	for _, id := range order {
		l := in.Leases[id]
		// A shard that moved for load lately stays where it went, unless its owner stopped.
		if _, ok := in.Local[id]; ok || l.Held(in.Now) && l.Owner != in.Owner || byLoad && in.Load.Moved[id] && !in.Orphans[id] {
			continue
		}
		// An orphan nobody took for a claim tick is taken above the share: the share may count
		// an owner that will not take it (one closing, or one that joined and stopped before
		// its row stood still long enough to drop out). Balancing moves it later.
		if len(want) < room || in.Orphans[id] && (len(want) < orphanRoom || in.Overdue[id]) {
			want = append(want, id)
		}
	}
	return want
}

// Hungry reports whether the round, which wanted want leases and took taken of them, left
// this subscriber wanting more: a take failed, it is below its share by count, a stopped
// owner's lease is left that nobody took (the share may count an owner that stopped too, and
// drops it as soon as its row stood still for TTL/2), or, balancing by load, free leases remain
// (it takes one a round, and may be the least loaded next).
func (in *BalanceIn) Hungry(want, taken int) bool {
	owners, mine := in.counts()
	if taken < want || mine < len(in.Readable)/in.sharers(owners) {
		return true
	}
	for _, id := range in.Readable {
		if in.Orphans[id] && !in.Taken[id] && !in.Leases[id].Held(in.Now) {
			return true
		}
	}
	if _, _, ok := in.byLoad(owners); !ok {
		return false
	}
	free := 0
	for _, id := range in.Readable {
		if !in.Leases[id].Held(in.Now) && !in.Taken[id] {
			free++
		}
	}
	return free > 0
}

// BalancePlan is one round's hand-backs and steal.
type BalancePlan struct {
	HandBack []string        // shards to hand back
	Steal    string          // shard to take over, or ""
	Victim   string          // its owner
	Counter  int64           // the lease counter the takeover is conditional on
	Live     map[string]bool // owners live this round: what the next round compares with
}

// PlanBalance decides what to hand back and what to steal, after the round's takes (in.Local
// and in.Taken include them). wasLive holds the owners live at the previous round: an owner
// missing there has just joined, and is handed its share now rather than at the next balance
// round. Steals happen on balance rounds only.
func PlanBalance(in *BalanceIn, wasLive map[string]bool, balance bool, r Chooser) BalancePlan {
	owners, mine := in.counts()
	p := BalancePlan{Live: make(map[string]bool, len(owners))}
	joined := false
	for o := range owners {
		joined = joined || !wasLive[o]
		p.Live[o] = true
	}
	n, k := len(in.Readable), in.sharers(owners)
	floor, ceil := n/k, (n+k-1)/k
	loads, mean, byLoad := in.byLoad(owners)
	switch {
	case byLoad && balance:
		p.HandBack = in.planLoad(loads, mean)
	case !byLoad && (balance || joined) && k > 1 && mine > ceil:
		p.HandBack = in.excess(mine-ceil, r)
	case !byLoad && balance && k > 1 && floor < mine && mine == ceil && in.yieldsCeiling(owners, floor, ceil):
		// On balance rounds only, and never a shard taken this round: a crashed owner's shards,
		// just taken, would otherwise go back unread when a newcomer's share is counted.
		p.HandBack = in.excess(1, r)
	}
	if !balance {
		return p
	}
	// The victim: the most loaded other owner whose heartbeat is not lapsed. A lapsed one is
	// not stolen from: its row is taken over once it stood still for reapAfter, TTL/4 after it
	// looked lapsed, and its shards are then read at once, where a steal reads 3/4 TTL later.
	victim, most := "", 0
	for o, c := range owners {
		if o == in.Owner || c == 0 || in.Lapsed(o) {
			continue
		}
		if victim == "" || c > most || c == most && o < victim {
			victim, most = o, c
		}
	}
	switch {
	case victim == "", byLoad:
		return p // by load, shards move between live owners by hand-back only
	case mine < floor && most > floor:
	case mine == floor && floor < ceil && most >= floor+2:
	default:
		return p
	}
	if most > ceil && in.Beats[victim].Held(in.Now) {
		return p
	}
	var candidates []string
	for _, id := range in.Readable {
		if l := in.Leases[id]; l.Owner == victim && l.Held(in.Now) {
			candidates = append(candidates, id)
		}
	}
	if len(candidates) == 0 {
		return p
	}
	p.Steal = candidates[r.IntN(len(candidates))]
	p.Victim, p.Counter = victim, in.Leases[p.Steal].Counter
	return p
}

// yieldsCeiling reports whether this subscriber, at the ceiling of an uneven split, is one of the
// owners that come down to the floor: more owners hold the ceiling or more than the
// n - k*floor that can, owners below the floor need more than the free leases and the excess
// that owners above the ceiling hand back, and this one
// is past the first n - k*floor of those owners by name, within what the others need. Every
// owner orders the same names, so the ones that yield are the same in every view of one table.
func (in *BalanceIn) yieldsCeiling(owners map[string]int, floor, ceil int) bool {
	n, k := len(in.Readable), in.sharers(owners)
	slots := n - k*floor // owners that may hold the ceiling
	need := in.belowFloor(owners, floor) - in.free()
	var high []string
	for o, c := range owners {
		if o != in.Owner && in.Lapsed(o) {
			continue
		}
		if c > ceil {
			need -= c - ceil // handed back by its owner
		}
		if c >= ceil {
			high = append(high, o)
		}
	}
	if need <= 0 || len(high) <= slots {
		return false
	}
	slices.Sort(high)
	i := slices.Index(high, in.Owner)
	return i >= slots && i-slots < need
}

// belowFloor returns the leases the live owners below the floor lack to reach it.
func (in *BalanceIn) belowFloor(owners map[string]int, floor int) int {
	need := 0
	for o, c := range owners {
		if c < floor && (o == in.Owner || !in.Lapsed(o)) {
			need += floor - c
		}
	}
	return need
}

// free returns the readable shards whose lease nobody holds and this subscriber did not take.
func (in *BalanceIn) free() int {
	n := 0
	for _, id := range in.Readable {
		if !in.Leases[id].Held(in.Now) && !in.Taken[id] {
			n++
		}
	}
	return n
}

// excess picks up to over shards to hand back, at random among those this subscriber reads.
// Shards already being handed back count toward over. A shard it stole and does not read yet
// is kept: released before StealWait, it could be taken by a peer that reads at once while
// its previous owner still reads it.
func (in *BalanceIn) excess(over int, r Chooser) []string {
	var reading []string
	for _, id := range in.Readable {
		if !in.counted(id) || in.Taken[id] {
			continue
		}
		switch in.Local[id] {
		case LocalDraining:
			over--
		case LocalReading:
			reading = append(reading, id)
		}
	}
	if over <= 0 {
		return nil
	}
	Shuffle(r, reading)
	return reading[:min(over, len(reading))]
}

// Shuffle puts xs in a random order.
func Shuffle[T any](r Chooser, xs []T) {
	for i := len(xs) - 1; i > 0; i-- {
		j := r.IntN(i + 1)
		xs[i], xs[j] = xs[j], xs[i]
	}
}
