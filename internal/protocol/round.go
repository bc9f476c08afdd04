package protocol

import (
	"slices"
	"time"
)

// The decisions of a claim round, made once here for both of this package's interpreters: the
// Machine (machine_claim.go, machine_peers.go, machine_shard.go) and the root package's
// coordinator (claim.go, reap.go), which performs the same round with its own I/O. Each takes
// what was read and returns what it means; none reads a clock or sends anything.

// ShowsLoss reports whether l, a shard's lease as a listing shows it, shows that the holding t
// of a shard read here is lost: another holding, and neither t's release (no owner, the one
// counter step a Release adds) nor t's binding (the same owner, no expiry, the one step a bind
// adds). Only t's holder writes those two, so a shard whose release or binding was under way
// while the round listed is not lost.
func ShowsLoss(l Row, t Tenure) bool {
	return l.Tenure() != t && !ReleasedFrom(l, t) && !BoundFrom(l, t)
}

// ReleasedFrom reports whether l shows the release of holding t: no owner, and the one counter
// step a Release adds.
func ReleasedFrom(l Row, t Tenure) bool { return l.Owner == "" && l.Counter == t.Counter+1 }

// BoundFrom reports whether l shows the binding of the pending holding t: the same owner, no
// expiry, the one counter step the binding adds.
func BoundFrom(l Row, t Tenure) bool {
	return l.Owner == t.Owner && l.Counter == t.Counter+1 && l.Expiry.IsZero()
}

// BlockingParent returns a parent of a shard (its parents as listed) that is not done yet, or
// "": a parent is done when its lease shows it read to its end, or when the listing lacks it
// (trimmed). A shard is read only once every parent is done.
func BlockingParent(parents []string, listed func(id string) bool, leases map[string]Row) string {
	for _, p := range parents {
		if listed(p) && !leases[p].Finished {
			return p
		}
	}
	return ""
}

// Verdict is what a claim round or a watcher makes of an owner's heartbeat row as last read.
type Verdict int

// The verdicts.
const (
	// Live: its counter moved within ReapAfter (or nothing says otherwise).
	Live Verdict = iota
	// Silent: its counter stood still for SilentAfter: it missed a renewal (still live).
	Silent
	// Reap: its counter stood still for ReapAfter: the owner surely stopped handing out, and
	// the row is to be taken over (at the counter read).
	Reap
	// Gone: absent, released or taken over: its owner stopped.
	Gone
)

// Judge returns the verdict on owner's heartbeat row as b last read it, at now, by the TTL the
// row notes (own when it notes none: ttlnote.go).
func Judge(owner string, b *BeatSeen, now time.Time, own time.Duration) Verdict {
	if b.Gone(owner) {
		return Gone
	}
	ttl := b.TTL(own)
	switch still := b.StillFor(now); {
	case still >= ReapAfter(ttl):
		return Reap
	case still >= SilentAfter(ttl):
		return Silent
	}
	return Live
}

// ReapReadBack judges owner's heartbeat row read back after a takeover written at counter
// (a Steal whose outcome is not known, or that was refused): taken reports the takeover
// landed (the row is me's, one step past counter); otherwise gone reports whether the row is
// no longer owner's anyway (else it was renewed meanwhile: alive).
func ReapReadBack(row Row, me, owner string, counter int64) (taken, gone bool) {
	if row.Owner == me && row.Counter == counter+1 {
		return true, true
	}
	return false, row.Owner != owner
}

// Planned returns the leases as the balance planner is to see them: those of owners that
// stopped (dead) free, and which those are (the orphans).
func Planned(leases map[string]Row, dead map[string]bool) (planned map[string]Row, orphans map[string]bool) {
	planned, orphans = make(map[string]Row, len(leases)), map[string]bool{}
	for id, l := range leases {
		if dead[l.Owner] {
			l.Owner, l.Expiry = "", time.Time{} // free: its owner stopped
			orphans[id] = true
		}
		planned[id] = l
	}
	return planned, orphans
}

// OrphanClock holds, for each lease found free because its owner stopped, the send of the first
// round in a row that found it so.
type OrphanClock map[string]time.Time

// Overdue returns the orphans found free at rounds a claim tick apart at least, the first of
// them sent before sent (BalanceIn.Overdue); it forgets the leases no longer orphans.
func (o OrphanClock) Overdue(orphans map[string]bool, sent time.Time, tick time.Duration) map[string]bool {
	out := map[string]bool{}
	for id := range o {
		if !orphans[id] {
			delete(o, id)
		}
	}
	for id := range orphans {
		since, ok := o[id]
		switch {
		case !ok:
			o[id] = sent
		case sent.Sub(since) >= tick:
			out[id] = true
		}
	}
	return out
}

// Beats returns the heartbeat rows balancing counts owners by (BalanceIn.Beats): one per other
// owner whose row is its own and who is not dead, lapsed (an expiry at lapsed, in the past of
// the planner's now) when it stood still for SilentAfter (of the TTL its row notes, or own) at
// now.
func (p *Peers) Beats(me string, dead map[string]bool, now, lapsed time.Time, own time.Duration) map[string]Row {
	beats := map[string]Row{}
	for owner, b := range p.Seen {
		if owner == me || b.Gone(owner) || dead[owner] {
			continue
		}
		l := Row{Key: b.Row.Key, Owner: owner, Counter: b.Row.Counter}
		if b.StillFor(now) >= SilentAfter(b.TTL(own)) {
			l.Expiry = lapsed
		}
		beats[owner] = l
	}
	return beats
}

// Reconcile returns, of the leases the table shows as me's that this instance does not read
// (skip: read here, or its life here ended after the listing was sent, so the listing may
// predate its release), those to take up (readable) and those to release (read to their end).
// Both sorted.
func Reconcile(leases map[string]Row, me string, skip func(id string) bool, readable []string) (takeUp, release []string) {
	for _, id := range sortedKeys(leases) {
		l := leases[id]
		switch {
		case l.Owner != me || skip(id):
		case l.Finished:
			release = append(release, id)
		case slices.Contains(readable, id):
			takeUp = append(takeUp, id)
		}
	}
	return takeUp, release
}

// TakeHow is how a lease is taken: Acquire (free; Own: already this instance's), or Steal at
// Counter (an orphan, or with Pending a live owner's for balance, or a pending lease whose owner
// stopped). A pending take is read only StealWait after a change-row move known to follow it.
type TakeHow struct {
	Steal bool
	// Counter is the lease's counter as the listing showed it: Steal's condition, and for every
	// take a floor. The take's write adds one, so a holding read back at or below it is an older
	// one, perhaps one this instance read under before (TakeLanded).
	Counter int64
	Pending bool
	Own     bool
	// After, for a pending take, is when a change-row move was first known to have landed after
	// the pending holding the listing showed (PendingNotes.MovedAfter); zero when none is.
	After time.Time
	// Victim, for a pending steal, is the holder its wait protects, noted on the lease; zero
	// when not known.
	Victim Tenure
	// WaitTTL, for a pending take, is the TTL its wait counts in (StealWait): the longest of
	// the fleet's (Peers.LongestTTL), so that it outlasts the hand-outs of any holder it may
	// protect.
	WaitTTL time.Duration
}

// HowToTake says how to take the lease l the planner chose (PlanTake), listed at now; dead are
// the owners that stopped. A pending take is to be completed with After (and Victim).
func HowToTake(l Row, me string, dead map[string]bool, now time.Time) TakeHow {
	switch {
	case l.Owner == "":
		return TakeHow{Counter: l.Counter}
	case l.Owner == me:
		return TakeHow{Own: true, Counter: l.Counter, Pending: PendingAt(l, now)}
	case dead[l.Owner]:
		return TakeHow{Steal: true, Counter: l.Counter, Pending: PendingAt(l, now)}
	}
	return TakeHow{Counter: l.Counter} // shown free to the planner but held: the Acquire fails
}

// TakeLanded judges the lease read back (at now) after a take's write, which the store applied
// (wrote) or whose outcome is not known: whether the holding read back is the one this take's
// write made. Not when the lease is another's or not pending as asked; when a steal's write was
// not known to apply and the row is this instance's from another write (a later round takes it
// up); nor when its counter is at or below the take's floor: the write did not land (or not
// yet), and the holding read back is an older one of this instance's, whose late writes (a
// Release, a checkpoint) would land in this one had it the same counter.
func TakeLanded(row Row, me string, how TakeHow, wrote bool, now time.Time) bool {
	switch {
	case row.Owner != me || PendingAt(row, now) != how.Pending:
		return false
	case !wrote && how.Steal && row.Counter != how.Counter+1:
		return false
	}
	return row.Counter > how.Counter
}
