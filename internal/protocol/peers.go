package protocol

import (
	"slices"
	"sort"
	"time"
)

// Telling a live owner from a dead one, on this host's clock alone.
//
// Every renewal of a heartbeat row moves its counter. An instance notes, for each other owner's
// row, the counter it last read and when it first read that counter (when the answer arrived,
// on its monotonic clock). The renewal that set the counter was sent before that, and its owner
// stops handing records out HandOutFor after sending its last renewal that landed. So once a
// row's counter has stood still for ReapAfter since it was first read, its owner has surely
// stopped, and the instance takes the row over: a Steal at the counter it read, which no
// renewal sent after can pass, and which fails if one landed meanwhile. No expiry written by one
// host is compared with another host's clock, so clocks that differ between hosts do not matter.
//
// Each instance reads, every RenewEvery, the rows of the next WatchedPeers live owners after it
// by name (and of the owners between them that look silent), so that every owner is watched by
// two others and a crash is noticed within about a TTL even when one of its watchers crashed
// with it; listings note every row they show. An instance also takes over, when due, an owner
// it does not watch whose watchers it first saw only after that owner's counter stood still
// (Overlooked): watchers that restarted after a crash time its silence afresh.

// BeatSeen is what an instance last read of an owner's heartbeat row.
type BeatSeen struct {
	Row   Row       // as last read; a zero Row when absent
	Since time.Time // when its counter was first read (the answer's arrival)
	Read  time.Time // when it was last read
	// Missed: the row stood still for SilentAfter (a renewal missed), which a watcher's claim
	// round has looked into once (PendingNotes).
	Missed bool
	First  time.Time // when this instance first read the owner's row, whatever its counter
}

// Peers is what an instance has seen of the other owners' heartbeat rows, by owner. It is not
// safe for concurrent use.
type Peers struct {
	Seen map[string]*BeatSeen
}

// Observe records that owner's heartbeat row read r (Key empty: absent), answered at recv.
func (p *Peers) Observe(owner string, r Row, recv time.Time) *BeatSeen {
	if p.Seen == nil {
		p.Seen = map[string]*BeatSeen{}
	}
	b := p.Seen[owner]
	if b == nil || b.Row.Counter != r.Counter || b.Row.Owner != r.Owner {
		first := recv
		if b != nil {
			first = b.First
		}
		b = &BeatSeen{Since: recv, First: first}
		p.Seen[owner] = b
	}
	b.Row, b.Read = r, recv
	return b
}

// Gone reports whether owner's row, as last read, shows it stopped: absent, released, or
// taken over by a peer.
func (b *BeatSeen) Gone(owner string) bool { return b == nil || b.Row.Owner != owner }

// StillFor returns how long the row's counter has stood still, as this instance knows, at now.
func (b *BeatSeen) StillFor(now time.Time) time.Duration { return now.Sub(b.Since) }

// Forget drops what was seen of owners not in keep.
func (p *Peers) Forget(keep map[string]bool) {
	for o := range p.Seen {
		if !keep[o] {
			delete(p.Seen, o)
		}
	}
}

// Clone returns a deep copy of p.
func (p *Peers) Clone() Peers {
	if p.Seen == nil {
		return Peers{}
	}
	out := Peers{Seen: make(map[string]*BeatSeen, len(p.Seen))}
	for o, b := range p.Seen {
		c := *b
		out.Seen[o] = &c
	}
	return out
}

// LiveOwners returns, sorted, the owners other than me whose heartbeat rows were last read as
// their own.
func (p *Peers) LiveOwners(me string) []string {
	var owners []string
	for o, b := range p.Seen {
		if o != me && !b.Gone(o) {
			owners = append(owners, o)
		}
	}
	sort.Strings(owners)
	return owners
}

// Overlooked returns, of the live owners (sorted) that me does not watch, those with a
// watcher (one of the WatchedPeers owners before each by name) that me first saw only after
// it first read the owner's current counter. Such a watcher (one that restarted, or joined
// after the owner fell silent) times that silence from its own first read, so it takes the
// row over later than me can; waiting for it would add the gap to the failover of a crash
// whose watchers restart soon after it. me reads such an owner's row when it is due and takes
// it over itself. That costs a read at most once per owner for each joining watcher, since a
// live owner's counter read at the listing that shows the joiner is newer than the joiner.
// Other unwatched owners cost no read: their watchers have timed them for longer than me has.
func (p *Peers) Overlooked(me string, owners, watched []string) []string {
	ring := append(append(make([]string, 0, len(owners)+1), owners...), me)
	sort.Strings(ring)
	var out []string
	for i, o := range ring {
		if o == me || slices.Contains(watched, o) {
			continue
		}
		since := p.Seen[o].Since
		for k := 1; k <= WatchedPeers && k < len(ring); k++ {
			w := ring[(i-k+len(ring))%len(ring)]
			if w != me && p.Seen[w].First.After(since) {
				out = append(out, o)
				break
			}
		}
	}
	return out
}

// NextReap returns how long after now the row of a peer me watches, or has overlooked (or
// any, while hungry: below its share, me lists the table every tick, and a listing takes over
// every row due), will have stood still for ReapAfter, or a watched row for SilentAfter, and
// whether that comes before the next claim tick (claimEvery): the instance then looks at that
// moment rather than at the tick after it, which would add up to a tick to every crash's
// failover. Each row counts in the TTL it notes, or own.
func (p *Peers) NextReap(me string, watched []string, hungry bool, now time.Time, own, claimEvery time.Duration) (time.Duration, bool) {
	wait := claimEvery
	found := false
	due := func(o string, after func(ttl time.Duration) time.Duration) {
		b := p.Seen[o]
		if b == nil || b.Gone(o) {
			return
		}
		if d := after(b.TTL(own)) - b.StillFor(now); d > 0 && d < wait {
			wait, found = d, true
		}
	}
	for _, o := range watched {
		due(o, ReapAfter)
	}
	others := p.LiveOwners(me)
	if !hungry {
		others = p.Overlooked(me, others, watched)
	}
	for _, o := range others {
		due(o, ReapAfter)
	}
	for _, o := range watched {
		if b := p.Seen[o]; b != nil && !b.Missed {
			due(o, SilentAfter)
		}
	}
	return wait, found
}

// Suspect reports whether owner's heartbeat row, as read within the last RenewEvery (a row not
// read for longer says nothing of now), shows it stopped or missed a renewal; in the TTL the row
// notes, or own.
func (p *Peers) Suspect(me, owner string, now time.Time, own time.Duration) bool {
	b := p.Seen[owner]
	if owner == me || b == nil {
		return false
	}
	ttl := b.TTL(own)
	return b.Gone(owner) || now.Sub(b.Read) <= RenewEvery(ttl) && b.StillFor(now) >= SilentAfter(ttl)
}
