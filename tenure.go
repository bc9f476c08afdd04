package kinesub

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gostream/kinesub/lease"
)

// A subscriber's shard leases are bound to its heartbeat row: they are taken with no expiry of
// their own (a zero TTL) and hold while the heartbeat row, "<stream>/~owner/<owner>", is
// renewed; only the row is renewed, every TTL/3, so an idle shard costs no write at all.
//
// Reading must stop before anyone can take a shard over. Peers take a shard in two ways:
//
//   - A peer that finds the heartbeat row expired deletes it (Delete: conditional on its
//     counter and on its having expired by the peer's clock) and takes the shards bound to it
//     at once. Renewals are conditional on the row's holding, so after the delete no renewal
//     succeeds, and one that succeeded before it was sent before the row expired.
//   - A thief stealing a shard for balance writes the lease (conditional on its counter), then
//     moves the stream's change row, and reads only stealWait after that write returned.
//
// So this subscriber's readers may read until the earlier of:
//
//   - 2/3 TTL after the send of its last successful heartbeat renewal: the row expires a full
//     TTL after that send (by its clock), so it has stopped TTL/3 before a peer can take the
//     row as expired;
//   - 2/3 TTL after the send of its last confirmation: a strong read of the change row that
//     found the counter it had when this subscriber last read its leases and found them its own
//     (or such a reading of the leases itself). A steal whose change-row move landed before the
//     confirmation was applied would have changed the counter; one whose move landed after it
//     lets the thief read only stealWait (more than 2/3 TTL) after that move, later than the
//     confirmation's send plus 2/3 TTL.
//
// Both measure time on this host's monotonic clock; the expiry comparison needs clocks that
// differ by much less than TTL/3, as the lease store says. When the deadline passes without a
// renewal and a confirmation, every shard held here is lost (invalidate), however the store
// fails. A shard whose lease shows another holding at a reading of the leases is lost at once.

// tenure is this subscriber's hold on its shards: its heartbeat row's holding and the deadline
// its readers keep. It is safe for concurrent use.
type tenure struct {
	key string // the heartbeat row
	ttl time.Duration

	mu        sync.Mutex
	row       lease.Tenure // the heartbeat row's holding
	beatSent  time.Time    // send of the last successful renewal (or the taking write)
	confirmed time.Time    // send of the last confirmation
	verified  int64        // the change row's counter at the last reading of the leases; -1: none
	deadline  *time.Timer  // fires when readers must stop; nil until keepTenure runs
	expired   func()       // what the deadline does: lose every shard

	fireMu sync.Mutex // held by a firing deadline; stopped keeps later ones from acting
	done   bool

	probes *probeSet // tests only (probe.go)
}

func newTenure(key string, ttl time.Duration, expired func()) *tenure {
	return &tenure{key: key, ttl: ttl, verified: -1, expired: expired}
}

// fire is the deadline's function.
func (t *tenure) fire() {
	t.probes.hold()
	t.fireMu.Lock()
	defer t.fireMu.Unlock()
	if !t.done {
		t.expired()
	}
}

// until returns when readers must have stopped, with t.mu held.
func (t *tenure) until() time.Time {
	return minTime(t.beatSent, t.confirmed).Add(t.ttl * 2 / 3)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// rearm moves the deadline to until, with t.mu held.
func (t *tenure) rearm() {
	if t.deadline != nil {
		t.deadline.Reset(time.Until(t.until()))
	}
}

// beat records a renewal of the heartbeat row sent at sent.
func (t *tenure) beat(sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if sent.After(t.beatSent) {
		t.beatSent = sent
		t.rearm()
	}
}

// confirm records a confirmation sent at sent: the change row still had counter change, the
// one of the last reading of the leases. It reports whether it was that counter.
func (t *tenure) confirm(sent time.Time, change int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if change != t.verified {
		return false
	}
	if sent.After(t.confirmed) {
		t.confirmed = sent
		t.rearm()
	}
	return true
}

// read records a reading of the leases sent at sent, after a read of the change row that found
// counter change (or -1 without a change row), in which every shard held here was its own.
func (t *tenure) read(sent time.Time, change int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.verified = change
	if sent.After(t.confirmed) {
		t.confirmed = sent
		t.rearm()
	}
}

// holding returns the heartbeat row's holding.
func (t *tenure) holding() lease.Tenure {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.row
}

// join takes the heartbeat row anew (at Subscribe, or after a peer deleted it as lapsed).
func (s *Subscriber) join(ctx context.Context) error {
	t := s.tenure
	sent := time.Now()
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	defer cancel()
	ok, err := s.cfg.store.Acquire(cctx, t.key, s.cfg.owner, t.ttl)
	if err == nil && !ok {
		err = fmt.Errorf("heartbeat row %s is held by another process with the owner name %s", t.key, s.cfg.owner)
	}
	if err != nil {
		return err
	}
	l, err := s.cfg.store.Read(cctx, t.key)
	if err != nil {
		return err
	}
	if l.Owner != s.cfg.owner {
		return fmt.Errorf("heartbeat row %s taken over as it was made", t.key)
	}
	t.mu.Lock()
	t.row = l.Tenure()
	// No shard is held here yet (or any more, after the row was lost): there is nothing to
	// confirm until the first reading of the leases.
	t.confirmed = sent
	t.mu.Unlock()
	t.beat(sent)
	return nil
}

// keepTenure renews the heartbeat row and confirms the leases every TTL/3 until ctx ends, and
// loses every shard whenever the deadline passes first. The subscriber starts it and waits for
// it; once it returned, the deadline acts no more.
func (s *Subscriber) keepTenure(ctx context.Context) {
	t := s.tenure
	t.mu.Lock()
	t.deadline = time.AfterFunc(time.Until(t.until()), t.fire)
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.deadline.Stop()
		t.mu.Unlock()
		t.fireMu.Lock() // a firing under way ends first
		t.done = true
		t.fireMu.Unlock()
	}()
	tick := time.NewTicker(t.ttl / 3)
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

// renewHeartbeat extends the heartbeat row. When the row is gone or another holding's (a peer
// took it as lapsed), every shard held here is lost and the row is taken anew.
func (s *Subscriber) renewHeartbeat(ctx context.Context) {
	t := s.tenure
	sent := time.Now()
	cctx, cancel := context.WithTimeout(ctx, min(s.cfg.requestTimeout, t.ttl/3))
	ok, err := s.cfg.store.Renew(cctx, t.key, t.holding(), t.ttl)
	cancel()
	switch {
	case err != nil:
		if ctx.Err() == nil {
			s.report(&ShardError{Stream: s.stream, Op: OpHeartbeat, Err: err})
		}
	case ok:
		t.beat(sent)
	default:
		s.log.Warn("heartbeat row lost: a peer took this subscriber for dead; its shards are given up and taken again")
		s.loseAll("heartbeat row lost")
		if err := s.join(ctx); err != nil && ctx.Err() == nil {
			s.report(&ShardError{Stream: s.stream, Op: OpHeartbeat, Err: err})
		} else if err == nil {
			s.changed(ctx)
		}
	}
}

// confirmLeases reads the change row: when it moved since the leases were last read, the
// coordinator reads them again (a claim round, which confirms them); otherwise this confirms
// them. Without a change row, the coordinator reads the leases every tick.
func (s *Subscriber) confirmLeases(ctx context.Context) {
	c := s.changes
	if c == nil {
		return
	}
	sent := time.Now()
	cctx, cancel := context.WithTimeout(ctx, min(s.cfg.requestTimeout, s.tenure.ttl/3))
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
