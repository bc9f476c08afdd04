package kinesub

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gostream/kinesub/internal/protocol"
	"github.com/gostream/kinesub/lease"
)

// How long a pending lease's next taker waits, and from when: the bookkeeping is the protocol
// core's (internal/protocol, pending.go); pendingNotes guards it with a lock, since claim
// rounds, change-row reads and bumps update it from their own goroutines.

// pendingNotes are the pending holdings the last listing showed, by shard id.
type pendingNotes struct {
	mu sync.Mutex
	n  protocol.PendingNotes
}

// listed records the pending leases of a listing that arrived at recv, and forgets the shards
// whose leases are no longer pending.
func (p *pendingNotes) listed(leases map[string]lease.Lease, now, recv time.Time) {
	rows := rowsOf(leases)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n.Listed(rows, now, recv)
}

// changeRead records a strongly consistent read of the change row, sent at sent, that found
// counter by recv.
func (p *pendingNotes) changeRead(sent, recv time.Time, counter int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n.ChangeRead(sent, recv, counter)
}

// movedBy records that a move of the change row landed after a read of it sent at sent, by
// recv: a bump of this subscriber's, written or refused.
func (p *pendingNotes) movedBy(sent, recv time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n.MovedBy(sent, recv)
}

// movedAfter returns when a move after holding t of shard id's lease was first known; zero
// when none is.
func (p *pendingNotes) movedAfter(id string, t lease.Tenure) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n.MovedAfter(id, protocol.Tenure(t))
}

// toBump reports whether a pending holding of an owner that silent says looks silent has no
// move known after it yet, and marks every such holding as bumped for: the caller moves the
// change row once for all of them.
func (p *pendingNotes) toBump(silent func(owner string) bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n.ToBump(silent)
}

// pendingHow completes a pending take of shard id's lease, as the round's listing v shows it:
// the victim it protects, and when a move after the listed holding was first known. A pending
// lease whose victim stopped is taken bound instead, and read at once.
func (c *coordinator) pendingHow(v *view, id string, how takeHow) takeHow {
	if !how.Pending {
		return how
	}
	l := v.leases[id]
	if t, ok := victimToNote(l, v.now); ok {
		if pendingAt(l, v.now) && v.dead[t.Owner] {
			c.s.log.Info("pending lease whose previous reader stopped: read at once", logShard, id, "previous", t.Owner)
			how.Pending = false
			return how
		}
		how.Victim = protocol.Tenure(t)
	}
	how.WaitTTL = v.waitTTL
	how.After = c.s.changes.pending.movedAfter(id, l.Tenure())
	return how
}

// suspect reports whether owner's heartbeat row, as this subscriber read it within the last
// TTL/3 (a row not read for longer says nothing of now), shows it stopped or missed a renewal.
func (c *coordinator) suspect(owner string) bool {
	return c.peers.Suspect(c.s.tenure.owner(), owner, time.Now(), c.s.cfg.leaseTTL)
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
// on the lease, in the same write (lease.Store.StealNote), the holding it was written at and the
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
