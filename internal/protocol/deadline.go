package protocol

import "time"

// Deadline is the instant until which an instance may hand records out, worked out from its
// heartbeat renewals and its confirmations, with no timer and no clock of its own: every
// instant is passed in, on the instance's monotonic clock. It is the earlier of:
//
//   - HandOutFor after the send of its last heartbeat renewal known to have landed (for a
//     renewal whose answer was lost, the send of the earliest attempt that may have landed): a
//     peer reaps the row only after seeing its counter still for ReapAfter, which began after
//     that renewal landed;
//   - HandOutFor after the send of its last confirmation: a strong read of the change row that
//     found the counter it had when the instance last read its leases and found them its own
//     (or such a reading of the leases itself). A steal whose change-row move landed before the
//     confirmation was applied would have changed the counter; one whose move landed after it
//     lets the thief read only StealWait (more than HandOutFor) after that move, later than
//     the confirmation's send plus HandOutFor.
//
// Once the deadline has passed it does not move until every shard held was given up (Restart):
// what was read under it is never handed out. The root's tenure wraps a Deadline with its lock,
// its timer and the atomic its hand-outs read; the Machine keeps one in its state.
type Deadline struct {
	ttl       time.Duration
	beatSent  time.Time // send of the last renewal known to have landed (or of the joining write)
	attempted time.Time // send of the earliest renewal attempt not yet known to have landed; zero: none
	confirmed time.Time // send of the last confirmation
	verified  int64     // the change row's counter at the last reading of the leases; -1: none
	passed    bool      // the deadline passed; it stays put until Restart
	resigned  bool      // Resign: nothing is handed out any more
	until     time.Time // the deadline in force (what MayHandOut compares with)
}

// NewDeadline returns the deadline of an instance that has not joined: it hands nothing out.
func NewDeadline(ttl time.Duration) Deadline { return Deadline{ttl: ttl, verified: -1} }

// Change is what a step did to the deadline in force.
type Change int

// The changes.
const (
	Unchanged Change = iota // the deadline in force is the same
	Moved                   // it moved: Until is the new one
	Passed                  // it passed: every shard held must be lost, then Restart
)

// Until returns the deadline in force: records may be handed out before it.
func (d *Deadline) Until() time.Time { return d.until }

// IsPassed reports whether the deadline passed and waits for Restart.
func (d *Deadline) IsPassed() bool { return d.passed }

// MayHandOut reports whether records may be handed out at now.
func (d *Deadline) MayHandOut(now time.Time) bool { return !d.resigned && now.Before(d.until) }

// Verified returns the change row's counter at the last reading of the leases (-1: none).
func (d *Deadline) Verified() int64 { return d.verified }

// Due returns the deadline the renewals and confirmations allow, which becomes the one in
// force unless it passed meanwhile.
func (d *Deadline) Due() time.Time {
	a, b := d.beatSent, d.confirmed
	if b.Before(a) {
		a = b
	}
	return a.Add(HandOutFor(d.ttl))
}

// Joined records a join whose heartbeat write was sent at sent: no shard is held yet (or any
// more, after the row was lost), so there is nothing to confirm until the first reading of the
// leases. The deadline then moves on afresh (Restart).
func (d *Deadline) Joined(sent, now time.Time) (revived bool) {
	d.beatSent, d.confirmed, d.attempted, d.verified = sent, sent, time.Time{}, -1
	d.resigned = false
	return d.Restart(now)
}

// Restart lets the deadline move on afresh: every shard held when it passed was given up (or
// none was held: joining). It reports whether the new deadline is still ahead of now (the
// instance may hand out again); one in the past is left for the next renewal or confirmation
// to move.
func (d *Deadline) Restart(now time.Time) (revived bool) {
	if d.resigned {
		return false
	}
	d.passed = false
	d.until = d.Due()
	return d.until.After(now)
}

// rearm moves the deadline in force to due. Once it has passed it stays put: every shard held
// is lost first.
func (d *Deadline) rearm(now time.Time) Change {
	if d.passed {
		return Unchanged // the loss under way restarts it
	}
	if !now.Before(d.until) {
		d.passed = true
		return Passed
	}
	d.until = d.Due()
	return Moved
}

// Fire is the deadline's timer at now: it reports whether the deadline has passed (every shard
// held must then be lost, then Restart), false when it moved on since the timer was set.
func (d *Deadline) Fire(now time.Time) bool {
	if !d.passed && now.Before(d.until) {
		return false
	}
	d.passed = true
	return true
}

// Attempt records a renewal sent at sent, whose outcome is not known yet.
func (d *Deadline) Attempt(sent time.Time) {
	if d.attempted.IsZero() {
		d.attempted = sent
	}
}

// Renewed records that the heartbeat row moved by a renewal this instance sent: the earliest
// attempt not known to have landed, which may be the one that did.
func (d *Deadline) Renewed(now time.Time) Change {
	ch := Unchanged
	if d.attempted.After(d.beatSent) {
		d.beatSent = d.attempted
		ch = d.rearm(now)
	}
	d.attempted = time.Time{}
	return ch
}

// Confirm records a confirmation sent at sent: the change row had counter change. ok reports
// whether that is the counter of the last reading of the leases (else the leases must be read
// again, and nothing is confirmed).
func (d *Deadline) Confirm(sent time.Time, change int64, now time.Time) (ok bool, ch Change) {
	if change != d.verified {
		return false, Unchanged
	}
	if sent.After(d.confirmed) {
		d.confirmed = sent
		ch = d.rearm(now)
	}
	return true, ch
}

// Read records a reading of the leases sent at sent, after a read of the change row that
// found counter change (or -1 without a change row), in which every shard held here was its
// own.
func (d *Deadline) Read(sent time.Time, change int64, now time.Time) Change {
	d.verified = change
	if sent.After(d.confirmed) {
		d.confirmed = sent
		return d.rearm(now)
	}
	return Unchanged
}

// Resign ends the hand-outs for good, before the heartbeat row is dropped at Close: from then
// on peers may take every shard bound to the row at once. No confirmation moves it again.
func (d *Deadline) Resign() {
	d.passed, d.resigned = true, true
}
