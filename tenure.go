package kinesub

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gostream/kinesub/internal/protocol"
	"github.com/gostream/kinesub/lease"
)

// A subscriber's shard leases are bound to its heartbeat row: they are taken with no expiry of
// their own (a zero TTL) and hold while the heartbeat row, "<stream>/~v2/owner/<owner>", is its
// own. Only the row is renewed, every TTL/3, by a Steal at its own counter: each renewal moves
// the counter, so a peer that reads the row can tell a live owner from a silent one on its own
// clock, without comparing clocks across hosts (reap.go). An idle shard costs no write at all.
//
// Reading must stop before anyone can take a shard over. Peers take a shard in these ways
// (docs/leases.md has the whole argument):
//
//   - A peer that has seen the heartbeat row's counter stand still for reapAfter (3/4 TTL) on
//     its own monotonic clock takes the row over (a Steal at that counter) and then takes the
//     shards bound to it at once. After the takeover no renewal of the row succeeds; the last
//     that did was sent before the peer first saw the counter it left.
//   - A thief (a balance steal, or a takeover of a shard whose last holder may not know it)
//     marks the lease pending (a far expiry), moves the stream's change row, and binds the lease
//     and reads only stealWait after the move returned.
//
// So this subscriber's readers may read, and its records be handed out, only until the earlier
// of:
//
//   - 2/3 TTL after the send of its last heartbeat renewal known to have landed (for a renewal
//     whose answer was lost, the send of the earliest attempt that may have landed): a peer
//     reaps the row only after seeing its counter still for 3/4 TTL, which began after that
//     renewal landed;
//   - 2/3 TTL after the send of its last confirmation: a strong read of the change row that
//     found the counter it had when this subscriber last read its leases and found them its own
//     (or such a reading of the leases itself). A steal whose change-row move landed before the
//     confirmation was applied would have changed the counter; one whose move landed after it
//     lets the thief read only stealWait (more than 2/3 TTL) after that move, later than the
//     confirmation's send plus 2/3 TTL.
//
// Every duration is measured on one host's monotonic clock, so clocks that differ between
// hosts do not matter; only their rates must agree to within TTL/12 over a TTL. The deadline is
// checked where a record is handed out (mayHandOut), not only by a timer: a process paused past
// it hands out nothing when it resumes, whatever ran first. Once the deadline has passed it
// does not move until every shard held was given up (loseAll): what was read under it is never
// handed out.

// tenure is this subscriber's hold on its shards: its heartbeat row's holding and the deadline
// its readers keep. The deadline's arithmetic is the protocol core's (protocol.Deadline); tenure
// adds its lock, the timer that fires it and the atomic every hand-out reads. It is safe for
// concurrent use.
type tenure struct {
	ttl  time.Duration
	base time.Time // a monotonic origin for until

	// until is the deadline in force as nanoseconds after base (math.MinInt64 once resigned):
	// records may be handed out before it. Read on every hand-out, so it is an atomic.
	until atomic.Int64
	// noted: a renewal landed since the row was joined, so the row notes this subscriber's TTL
	// (load.go, noteJoined).
	noted atomic.Bool

	mu       sync.Mutex
	name     string            // this subscriber's owner name: WithOwner's, with an incarnation
	key      string            // its heartbeat row
	row      lease.Tenure      // the heartbeat row's holding
	d        protocol.Deadline // the deadline's arithmetic
	revived  chan struct{}     // closed when the deadline moves on afresh (restart)
	deadline *time.Timer       // fires when readers must stop; nil until keepTenure runs
	expired  func()            // what the deadline does: lose every shard

	fireMu sync.Mutex // held by a firing deadline; stopped keeps later ones from acting
	done   bool

	probes *probeSet // tests only (probe.go)
}

func newTenure(name, key string, ttl time.Duration, expired func()) *tenure {
	return &tenure{name: name, key: key, ttl: ttl, base: time.Now(), d: protocol.NewDeadline(ttl), expired: expired,
		revived: make(chan struct{})}
}

// self returns this subscriber's owner name and heartbeat row's key.
func (t *tenure) self() (name, key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.name, t.key
}

// owner returns this subscriber's owner name.
func (t *tenure) owner() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.name
}

// mayHandOut reports whether records may be handed out now: the deadline has not passed. It is
// called for every record handed out, so it reads one atomic and the clock.
func (t *tenure) mayHandOut() bool {
	return t == nil || int64(time.Since(t.base)) < t.until.Load()
}

// resign ends the hand-outs for good, before the heartbeat row is dropped at Close: from then
// on peers may take every shard bound to the row at once, also one still draining after a
// hand-back, whose Process may otherwise start a record left in a gap. It is called once the
// renewals have stopped; no confirmation moves the deadline again.
func (t *tenure) resign() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.d.Resign()
	t.until.Store(math.MinInt64)
}

// whenRevived returns a channel closed once records may be handed out again after the deadline
// passed (every shard was given up, and the heartbeat renewed and confirmed since).
func (t *tenure) whenRevived() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.revived
}

// fire is the deadline's function: when the deadline has passed, every shard held is lost, and
// then the deadline moves on from the renewals and confirmations made since.
func (t *tenure) fire() {
	t.probes.hold()
	t.fireMu.Lock()
	defer t.fireMu.Unlock()
	if t.done {
		return
	}
	t.mu.Lock()
	if !t.d.Fire(time.Now()) {
		t.mu.Unlock()
		return // moved on since the timer was set
	}
	t.mu.Unlock()
	t.expired()
	t.mu.Lock()
	t.restarted(t.d.Restart(time.Now()))
	t.mu.Unlock()
}

// restarted publishes the deadline after it moved on afresh (protocol.Deadline.Restart,
// Joined), with t.mu held: every shard held when it passed was given up (or none was held:
// joining). A deadline still in the past arms no timer: nothing is held or taken under it, and
// the next renewal or confirmation moves it.
func (t *tenure) restarted(revived bool) {
	t.noted.Store(false)
	t.until.Store(int64(t.d.Until().Sub(t.base)))
	if !revived {
		return
	}
	close(t.revived)
	t.revived = make(chan struct{})
	if t.deadline != nil {
		t.deadline.Reset(time.Until(t.d.Until()))
	}
}

// apply publishes what a step did to the deadline, with t.mu held. Once it has passed it stays
// put (the timer fires at once): every shard held is lost first (fire).
func (t *tenure) apply(ch protocol.Change) {
	switch ch {
	case protocol.Passed:
		if t.deadline != nil {
			t.deadline.Reset(0)
		}
	case protocol.Moved:
		t.until.Store(int64(t.d.Until().Sub(t.base)))
		if t.deadline != nil {
			t.deadline.Reset(time.Until(t.d.Until()))
		}
	}
}

// attempt records a renewal sent at sent, whose outcome is not known yet.
func (t *tenure) attempt(sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.d.Attempt(sent)
}

// renewed records that the heartbeat row is now at holding row, moved there by a renewal this
// subscriber sent: the earliest attempt not known to have landed, which may be the one that did.
func (t *tenure) renewed(row lease.Tenure) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.row = row
	t.noted.Store(true)
	t.apply(t.d.Renewed(time.Now()))
}

// confirm records a confirmation sent at sent: the change row still had counter change, the
// one of the last reading of the leases. It reports whether it was that counter.
func (t *tenure) confirm(sent time.Time, change int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ok, ch := t.d.Confirm(sent, change, time.Now())
	t.apply(ch)
	return ok
}

// read records a reading of the leases sent at sent, after a read of the change row that found
// counter change (or -1 without a change row), in which every shard held here was its own.
func (t *tenure) read(sent time.Time, change int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.apply(t.d.Read(sent, change, time.Now()))
}

// holding returns the heartbeat row's holding.
func (t *tenure) holding() lease.Tenure {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.row
}

// joinDraws bounds the incarnations one join draws: a second one already means that 64 random
// bits matched another process's.
const joinDraws = 3

// join makes a heartbeat row anew: at Subscribe, or after a peer took it over (this subscriber
// was taken for dead), under a new incarnation of the owner name. A new name, and so a new row,
// means that no write sent under the old one (a renewal applied late, say) can ever land on the
// new row. The row must be one this join made: a row of the name already there is another
// process's that drew the same incarnation under the same WithOwner name (or one a peer took
// over), and sharing it, both would count as one owner and take each other's leases for their
// own. So a join that finds one draws a new incarnation.
func (s *Subscriber) join(ctx context.Context, rename bool) error {
	t := s.tenure
	name, key := t.self()
	for draw := 1; ; draw++ {
		if rename || draw > 1 {
			name = s.cfg.ownerBase + "#" + s.cfg.probes.newIncarnation()
			key = s.ownerKeyOf(name)
		}
		sent := time.Now()
		l, made, err := s.makeHeartbeat(ctx, key, name)
		if err != nil {
			return err
		}
		if !made {
			if draw < joinDraws {
				continue
			}
			return fmt.Errorf("heartbeat row %s is held by another process with the owner name %s", key, name)
		}
		t.mu.Lock()
		t.name, t.key, t.row = name, key, l.Tenure()
		// No shard is held here yet (or any more, after the row was lost): there is nothing to
		// confirm until the first reading of the leases.
		t.restarted(t.d.Joined(sent, time.Now()))
		t.mu.Unlock()
		if !rename {
			s.cfg.owner = name // Subscribe's join: nothing runs beside it yet
		}
		s.table.setOwner(name)
		return nil
	}
}

// makeHeartbeat writes heartbeat row key for owner name where it is absent, and reads it back
// strongly. made reports whether the row is the one a create makes: held by name, at counter 1
// (lease.Store's Acquire of an absent lease). Acquire also takes a row that name holds already,
// or one that lapsed, and moves its counter past 1; it refuses a row another owner holds (a
// peer took the name's row over). Such rows were made by another process: made is false.
func (s *Subscriber) makeHeartbeat(ctx context.Context, key, name string) (l lease.Lease, made bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	defer cancel()
	ok, err := s.cfg.store.Acquire(cctx, key, name, s.tenure.ttl)
	if err != nil || !ok {
		return lease.Lease{}, false, err
	}
	// The read back: the counter, which Acquire does not return, and whether the row is new.
	if l, err = s.cfg.store.Read(cctx, key); err != nil {
		return lease.Lease{}, false, err
	}
	if l.Owner != name {
		return lease.Lease{}, false, fmt.Errorf("heartbeat row %s taken over as it was made", key)
	}
	return l, l.Counter == 1, nil
}

// keepTenure renews the heartbeat row and confirms the leases every TTL/3 until ctx ends, and
// loses every shard whenever the deadline passes first. The subscriber starts it and waits for
// it; once it returned, the deadline acts no more.
func (s *Subscriber) keepTenure(ctx context.Context) {
	t := s.tenure
	t.mu.Lock()
	t.deadline = time.AfterFunc(time.Until(t.d.Due()), t.fire)
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.deadline.Stop()
		t.mu.Unlock()
		t.fireMu.Lock() // a firing under way ends first
		t.done = true
		t.fireMu.Unlock()
	}()
	tick := time.NewTicker(protocol.RenewEvery(t.ttl))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.renewHeartbeat(ctx)
		s.confirmLeases(ctx)
	}
}

// renewHeartbeat moves the heartbeat row's counter, conditional on the counter of its holding.
// A write whose outcome is not known (an error, or a refusal that a retry of a write that
// landed also gets) is resolved by a strong read. When the row is another holding's (a peer
// took this subscriber for dead), every shard held here is lost and the row is taken anew,
// under a new incarnation.
func (s *Subscriber) renewHeartbeat(ctx context.Context) {
	t := s.tenure
	name, key := t.self()
	row := t.holding()
	sent := time.Now()
	t.attempt(sent)
	cctx, cancel := context.WithTimeout(ctx, min(s.cfg.requestTimeout, protocol.RenewEvery(t.ttl)))
	defer cancel()
	ok, err := s.stealHeartbeat(cctx, key, name, row.Counter, t.ttl)
	if err == nil && ok {
		t.renewed(lease.Tenure{Owner: name, Counter: row.Counter + 1})
		return
	}
	if err != nil && ctx.Err() == nil {
		s.report(&ShardError{Stream: s.stream, Op: OpHeartbeat, Err: err})
	}
	rctx, rcancel := context.WithTimeout(ctx, min(s.cfg.requestTimeout, protocol.RenewEvery(t.ttl)))
	l, rerr := s.cfg.store.Read(rctx, key)
	rcancel()
	switch {
	case rerr != nil:
		// Unknown: the next tick tries again, and the deadline passes if none lands.
	case l.Owner == name && l.Counter > row.Counter:
		t.renewed(l.Tenure()) // an attempt landed, its answer lost
	case l.Owner == name:
		// Not landed (yet): the next tick tries again.
	default:
		s.log.Warn("heartbeat row taken over: a peer took this subscriber for dead; its shards are given up and it joins again under a new name")
		s.table.setOwner("") // a take under the old name in flight registers nothing now
		s.loseAll("heartbeat row taken over by a peer")
		if err := s.join(ctx, true); err != nil && ctx.Err() == nil {
			s.report(&ShardError{Stream: s.stream, Op: OpHeartbeat, Err: err})
		} else if err == nil {
			s.noteJoined(ctx)
			s.changed(ctx)
		}
	}
}

// confirmLeases reads the change row: when it moved since the leases were last read, the
// coordinator reads them again (a claim round, which confirms them); otherwise this confirms
// them.
func (s *Subscriber) confirmLeases(ctx context.Context) {
	c := s.changes
	sent := time.Now()
	cctx, cancel := context.WithTimeout(ctx, min(s.cfg.requestTimeout, protocol.RenewEvery(s.tenure.ttl)))
	l, err := s.cfg.store.Read(cctx, c.key)
	cancel()
	if err != nil {
		return // the coordinator's rounds report store errors
	}
	if !s.tenure.confirm(sent, l.Counter) {
		s.coord.nudge()
	}
}

// loseAll loses every shard held here.
func (s *Subscriber) loseAll(why string) {
	ws, _ := s.table.held()
	if len(ws) > 0 {
		s.env.invalidate(ws, &ending{cause: causeLoss, why: why})
	}
}
