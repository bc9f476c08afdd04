package protocol

import "time"

// How long a pending lease's next taker waits, and from when.
//
// A pending lease's wait protects the holder it was stolen from (the victim): that holder
// stops reading at most 2/3 TTL after the first change-row move that landed after the steal
// (Deadline). The thief times its wait from its own move. A peer that takes the pending lease
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
	t       Tenure
	seen    time.Time // the answer of the listing that first showed it
	base    int64     // the change row's counter as read by a read sent after seen
	hasBase bool
	moved   time.Time // when a move after its write was first known; zero: none yet
	bumped  bool      // this subscriber moved the row for it (its owner looked silent)
}

// PendingNotes are the pending holdings the last listing showed, by shard id. It is not safe
// for concurrent use: the root wraps it with a lock, since claim rounds, change-row reads and
// bumps update it from their own goroutines.
type PendingNotes struct {
	notes map[string]*pendingNote
}

// Listed records the pending leases of a listing that arrived at recv, and forgets the shards
// whose leases are no longer pending.
func (p *PendingNotes) Listed(leases map[string]Row, now, recv time.Time) {
	next := make(map[string]*pendingNote)
	for id, l := range leases {
		if !PendingAt(l, now) {
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

// ChangeRead records a strongly consistent read of the change row, sent at sent, that found
// counter by recv.
func (p *PendingNotes) ChangeRead(sent, recv time.Time, counter int64) {
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

// MovedBy records that a move of the change row landed after a read of it sent at sent, by
// recv: a bump of this subscriber's, written or refused.
func (p *PendingNotes) MovedBy(sent, recv time.Time) {
	for _, n := range p.notes {
		if n.moved.IsZero() && sent.After(n.seen) {
			n.moved = recv
		}
	}
}

// MovedAfter returns when a move after holding t of shard id's lease was first known; zero
// when none is.
func (p *PendingNotes) MovedAfter(id string, t Tenure) time.Time {
	if n := p.notes[id]; n != nil && n.t == t {
		return n.moved
	}
	return time.Time{}
}

// ToBump reports whether a pending holding of an owner that silent says looks silent has no
// move known after it yet, and marks every such holding as bumped for: the caller moves the
// change row once for all of them.
func (p *PendingNotes) ToBump(silent func(owner string) bool) bool {
	bump := false
	for _, n := range p.notes {
		if n.moved.IsZero() && !n.bumped && silent(n.t.Owner) {
			n.bumped, bump = true, true
		}
	}
	return bump
}

// Clone returns a deep copy of p.
func (p *PendingNotes) Clone() PendingNotes {
	if p.notes == nil {
		return PendingNotes{}
	}
	out := PendingNotes{notes: make(map[string]*pendingNote, len(p.notes))}
	for id, n := range p.notes {
		c := *n
		out.notes[id] = &c
	}
	return out
}
