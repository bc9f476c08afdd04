package kinesub

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gostream/kinesub/lease"
)

// How long a pending lease's next taker waits, and from when.
//
// A pending lease's wait protects the holder it was stolen from (the victim): that holder
// stops reading at most 2/3 TTL after the first change-row move that landed after the steal
// (tenure.go). The thief times its wait from its own move. A peer that takes the pending lease
// over from a thief that stopped (crashed, taken for dead, closed during its wait) cannot tell
// whether the moves it saw came before the steal or after, so it used to move the row again
// and wait a whole stealWait more, after the thief's silence was established: a crash during
// a steal's wait cost TTL/3 + 3/4 TTL + 3/4 TTL before the shard was read again.
//
// So every subscriber notes the pending leases its listings show, and learns, on its own
// monotonic clock, when a move surely landed after each one's write:
//
//   - a change-row read sent after the listing that showed the lease (which the lease's write
//     preceded), and a later read that found another counter: a move landed after the first
//     read, by the second's answer;
//   - a bump of its own whose read was sent after that listing, and whose write then landed or
//     was refused (refused: a peer moved the row after the read), by the bump's answer.
//
// A pending lease that moves to a new pending holding in one step (its counter one above the
// noted one's: a steal of the pending lease itself, whose owner never bound or read it) keeps
// what was learnt: whoever could read before the first steal is still bound by that move.
//
// Once a subscriber knows such a move for the holding it takes over, it reads stealWait after
// it learnt of the move rather than stealWait after a move of its own. And when a pending
// lease's owner looks silent (its heartbeat row stood still for TTL/2: it missed a renewal)
// and no move is known yet, the subscriber moves the row itself, so that the victim's time
// runs while the thief's silence is being established rather than after it.

// pendingNote is what a subscriber knows of one pending holding of a shard's lease.
type pendingNote struct {
	t       lease.Tenure
	seen    time.Time // the answer of the listing that first showed it
	base    int64     // the change row's counter as read by a read sent after seen
	hasBase bool
	moved   time.Time // when a move after its write was first known; zero: none yet
	bumped  bool      // this subscriber moved the row for it (its owner looked silent)
}

// pendingNotes are the pending holdings the last listing showed, by shard id. Claim rounds,
// change-row reads and bumps update them from their own goroutines.
type pendingNotes struct {
	mu    sync.Mutex
	notes map[string]*pendingNote
}

// listed records the pending leases of a listing that arrived at recv, and forgets the shards
// whose leases are no longer pending.
func (p *pendingNotes) listed(leases map[string]lease.Lease, now, recv time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := make(map[string]*pendingNote)
	for id, l := range leases {
		if !pendingAt(l, now) {
			continue
		}
		t := l.Tenure()
		old := p.notes[id]
		switch {
		case old != nil && old.t == t:
			next[id] = old
		case old != nil && t.Counter == old.t.Counter+1:
			// Stolen from the noted holding in one step: a move known after that one's write
			// still bounds whoever read before it.
			next[id] = &pendingNote{t: t, seen: recv, moved: old.moved}
		default:
			next[id] = &pendingNote{t: t, seen: recv}
		}
	}
	if len(next) == 0 {
		next = nil
	}
	p.notes = next
}

// changeRead records a strongly consistent read of the change row, sent at sent, that found
// counter by recv.
func (p *pendingNotes) changeRead(sent, recv time.Time, counter int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.notes {
		switch {
		case !n.moved.IsZero() || !sent.After(n.seen):
		case !n.hasBase:
			n.base, n.hasBase = counter, true
		case counter != n.base:
			n.moved = recv
		}
	}
}

// movedBy records that a move of the change row landed after a read of it sent at sent, by
// recv: a bump of this subscriber's, written or refused.
func (p *pendingNotes) movedBy(sent, recv time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.notes {
		if n.moved.IsZero() && sent.After(n.seen) {
			n.moved = recv
		}
	}
}

// movedAfter returns when a move after holding t of shard id's lease was first known; zero
// when none is.
func (p *pendingNotes) movedAfter(id string, t lease.Tenure) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := p.notes[id]; n != nil && n.t == t {
		return n.moved
	}
	return time.Time{}
}

// toBump reports whether a pending holding of an owner that silent says looks silent has no
// move known after it yet, and marks every such holding as bumped for: the caller moves the
// change row once for all of them.
func (p *pendingNotes) toBump(silent func(owner string) bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	bump := false
	for _, n := range p.notes {
		if n.moved.IsZero() && !n.bumped && silent(n.t.Owner) {
			n.bumped, bump = true, true
		}
	}
	return bump
}

// pendingHow completes a pending take of shard id's lease, as the round's listing v shows it:
// the victim it protects, and when a move after the listed holding was first known. A pending
// lease whose victim stopped is taken bound instead, and read at once.
func (c *coordinator) pendingHow(v *view, id string, how takeHow) takeHow {
	if !how.pending {
		return how
	}
	l := v.leases[id]
	if t, ok := victimToNote(l, v.now); ok {
		if pendingAt(l, v.now) && v.dead[t.Owner] {
			c.s.log.Info("pending lease whose previous reader stopped: read at once", logShard, id, "previous", t.Owner)
			how.pending = false
			return how
		}
		how.victim = t
	}
	how.after = c.s.changes.pending.movedAfter(id, l.Tenure())
	return how
}

// suspect reports whether owner's heartbeat row, as this subscriber read it within the last
// TTL/3 (a row not read for longer says nothing of now), shows it stopped or missed a renewal.
func (c *coordinator) suspect(owner string) bool {
	b := c.peers.seen[owner]
	if owner == c.s.tenure.owner() || b == nil {
		return false
	}
	now, ttl := time.Now(), c.s.cfg.leaseTTL
	return b.gone(owner) || now.Sub(b.read) <= ttl/3 && b.stillFor(now) >= ttl/2
}

// bumpPending moves the change row when a pending lease whose owner looks silent has no move
// known after it, and reports whether it did: the table is then read again.
func (c *coordinator) bumpPending(ctx context.Context) bool {
	s := c.s
	if !s.changes.pending.toBump(c.suspect) {
		return false
	}
	s.log.Info("pending lease of a silent owner: change row moved, so that its previous holder's time runs")
	s.changed(ctx)
	return true
}

// The holder a pending lease protects, written on the lease.
//
// A pending lease's wait protects one holder only: the last that bound the lease (its
// victim). The holders in between took it pending and never read it. So a pending steal notes
// on the lease, in the same write (lease.NoteStealer), the holding it was written at and the
// victim: the holding it stole when that was bound, or the victim the pending holding it stole
// noted. A taker that finds the victim stopped (its heartbeat row gone or taken over, as for
// the owner of a bound lease: claim.go) has nobody to wait for, and takes the lease bound and
// reads at once: a thief that crashed or closed during its wait then costs nothing more once
// the victim's silence is established.
//
// The note names the counter it was written at, so that a note left by an earlier write (no
// write but a StealNote changes a note: a store without notes, or a subscriber that writes
// none) is not taken for this holding's.

// victimNote is the note format: "victim/1 <counter written at> <victim's counter> <victim>".
const victimNote = "victim/1 %d %d "

// noteVictim returns the note of a pending steal written at counter whose victim is v, and
// false when it would be longer than a note may be.
func noteVictim(counter int64, v lease.Tenure) (string, bool) {
	n := fmt.Sprintf(victimNote, counter, v.Counter) + v.Owner
	return n, len(n) <= lease.MaxNote && v.Owner != ""
}

// victimOf returns the holder a lease's pending holding protects, as its note names it, and
// false when l is not pending at now or its note is not this holding's.
func victimOf(l lease.Lease, now time.Time) (lease.Tenure, bool) {
	if !pendingAt(l, now) || !strings.HasPrefix(l.Note, "victim/1 ") {
		return lease.Tenure{}, false
	}
	var at, counter int64
	if n, err := fmt.Sscanf(l.Note, victimNote, &at, &counter); err != nil || n != 2 || at != l.Counter {
		return lease.Tenure{}, false
	}
	// The owner is what follows the third space: names may hold spaces.
	rest := l.Note
	for range 3 {
		_, rest, _ = strings.Cut(rest, " ")
	}
	if rest == "" || counter >= at {
		return lease.Tenure{}, false
	}
	return lease.Tenure{Owner: rest, Counter: counter}, true
}

// victimToNote returns the victim a pending steal of l protects: l's holding when it is bound,
// or the victim l's pending holding protects; false when neither is known.
func victimToNote(l lease.Lease, now time.Time) (lease.Tenure, bool) {
	if pendingAt(l, now) {
		return victimOf(l, now)
	}
	if l.Owner == "" {
		return lease.Tenure{}, false
	}
	return l.Tenure(), true
}
