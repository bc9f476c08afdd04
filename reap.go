package kinesub

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/gostream/kinesub/internal/protocol"
	"github.com/gostream/kinesub/lease"
)

// Telling a live owner from a dead one, on this host's clock alone.
//
// Every renewal of a heartbeat row moves its counter (tenure.go). A subscriber notes, for each
// other owner's row, the counter it last read and when it first read that counter (when the
// answer arrived, on its monotonic clock). The renewal that set the counter was sent before
// that, and its owner stops handing records out 2/3 TTL after sending its last renewal that
// landed. So once a row's counter has stood still for reapAfter (2/3 TTL, and TTL/12 for the
// owner's scheduling and clock rates) since it was first read, its owner has surely stopped, and
// the subscriber takes the row over: a Steal at the counter it read, which no renewal sent after
// can pass, and which fails if one landed meanwhile. The shards bound to the row are then free
// to take at once (claim.go). No expiry written by one host is compared with another host's
// clock, so clocks that differ between hosts do not matter.
//
// A row that a listing lacks is read before its owner counts as gone: the index behind a
// listing may not show a row created a moment ago.
//
// Each subscriber reads, every TTL/3, the rows of the next protocol.WatchedPeers live owners after it by
// name (and of the owners between them that look silent), so that every owner is watched by two
// others and a crash is noticed within about a TTL even when one of its watchers crashed with
// it; listings (claim rounds) note every row they show. A subscriber also takes over, when
// due, an owner it does not watch whose watchers it first saw only after that owner's counter
// stood still (overlooked): watchers that restarted after a crash time its silence afresh.

// beatSeen is what this subscriber last read of an owner's heartbeat row; peers is what it
// has seen of the other owners' rows (only the coordinator's goroutine uses it). Both are the
// protocol core's bookkeeping (internal/protocol, peers.go).
type (
	beatSeen = protocol.BeatSeen
	peers    = protocol.Peers
)

// reap takes over the heartbeat row of owner, silent since b was read, so that its shards are
// free: a Steal at the counter read (resolved by a read when its outcome is not known), then a
// release and a delete of the row. It reports whether the row is no longer the owner's.
func (c *coordinator) reap(ctx context.Context, owner string, b *beatSeen) bool {
	s := c.s
	me := s.tenure.owner()
	key := s.ownerKeyOf(owner)
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	defer cancel()
	ok, err := s.cfg.store.Steal(cctx, key, me, b.Row.Counter, 0)
	if err != nil || !ok {
		l, rerr := s.cfg.store.Read(cctx, key)
		if rerr != nil {
			if ctx.Err() == nil {
				s.report(&ShardError{Stream: s.stream, Op: OpDeleteHeartbeat, Err: fmt.Errorf("silent heartbeat of %s: %w", owner, errorsJoin(err, rerr))})
			}
			return false
		}
		c.peers.Observe(owner, rowOf(l), time.Now())
		if taken, gone := protocol.ReapReadBack(rowOf(l), me, owner, b.Row.Counter); !taken {
			return gone // renewed meanwhile (alive), or gone anyway
		}
	}
	s.log.Info("heartbeat of a silent owner taken over: its shards are free", "owner", owner,
		"silent_for", time.Since(b.Since).Round(time.Millisecond))
	taken := lease.Tenure{Owner: me, Counter: b.Row.Counter + 1}
	if ok, err := s.cfg.store.Release(cctx, key, taken); err == nil && ok {
		_, _ = s.cfg.store.Delete(cctx, key, taken.Counter+1) // else cleanup deletes it
	}
	c.peers.Observe(owner, protocol.Row{Key: key, Owner: me, Counter: taken.Counter}, time.Now())
	s.changed(ctx)
	return true
}

// watchPeers reads, when due, the heartbeat rows this subscriber watches: the next
// protocol.WatchedPeers live owners after it by name, and any between them that look silent. It also
// reads the rows of overlooked owners once they are due (see overlooked). It reaps rows silent
// for reapAfter, and reports whether one was reaped or found gone: a claim round should take
// the shards bound to it.
func (c *coordinator) watchPeers(ctx context.Context) bool {
	s := c.s
	ttl := s.cfg.leaseTTL
	owners := c.liveOwners()
	if len(owners) == 0 {
		return false
	}
	start := sort.SearchStrings(owners, s.tenure.owner()) // the first owner after me, wrapping around
	changed, live := false, 0
	c.watched = c.watched[:0]
	for i := 0; i < len(owners) && live < protocol.WatchedPeers; i++ {
		o := owners[(start+i)%len(owners)]
		c.watched = append(c.watched, o)
		b := c.peers.Seen[o]
		// Every TTL/3 (less half a claim tick, the granularity it is called at): so the renewal
		// that set a counter is first read at most TTL/3 after it landed.
		if time.Since(b.Read) >= ttl/3-c.claimEvery/2 {
			var ok bool
			if b, ok = c.readPeer(ctx, o); !ok {
				return changed
			}
		}
		switch protocol.Judge(o, b, time.Now(), ttl) {
		case protocol.Gone:
			s.log.Info("peer's heartbeat row gone", "owner", o)
			changed = true
			continue
		case protocol.Reap:
			changed = c.reap(ctx, o, b) || changed
			continue
		case protocol.Silent:
			// It missed a renewal: watch the next one too, and list the table once, so that a
			// pending lease it holds has the change row moved now rather than after its reap.
			if !b.Missed {
				b.Missed, changed = true, true
			}
			continue
		}
		live++
	}
	for _, o := range c.overlooked(owners) {
		if c.peers.Seen[o].StillFor(time.Now()) < protocol.ReapAfter(ttl) {
			continue
		}
		b, ok := c.readPeer(ctx, o)
		if !ok {
			return changed
		}
		switch protocol.Judge(o, b, time.Now(), ttl) {
		case protocol.Gone:
			s.log.Info("peer's heartbeat row gone", "owner", o)
			changed = true
		case protocol.Reap:
			changed = c.reap(ctx, o, b) || changed
		}
	}
	return changed
}

// readPeer reads owner's heartbeat row (strongly consistent) and notes it; false: the read
// failed.
func (c *coordinator) readPeer(ctx context.Context, owner string) (*beatSeen, bool) {
	cctx, cancel := context.WithTimeout(ctx, c.s.cfg.requestTimeout)
	defer cancel()
	l, err := c.s.cfg.store.Read(cctx, c.s.ownerKeyOf(owner))
	if err != nil {
		return nil, false
	}
	return c.peers.Observe(owner, rowOf(l), time.Now()), true
}

// liveOwners returns, sorted, the other owners whose heartbeat rows were last read as their own.
func (c *coordinator) liveOwners() []string { return c.peers.LiveOwners(c.s.tenure.owner()) }

// overlooked returns, of the live owners (sorted) this subscriber does not watch, those whose
// watchers it first saw only after they could time the owner's silence (protocol.Peers.Overlooked).
func (c *coordinator) overlooked(owners []string) []string {
	return c.peers.Overlooked(c.s.tenure.owner(), owners, c.watched)
}

// nextReap returns how long until the row of a peer this subscriber watches, or has overlooked
// (or any, while it is below its share), will have stood still for ReapAfter, and whether that
// comes before the next claim tick: the coordinator then looks at that moment rather than at the
// tick after it (protocol.Peers.NextReap).
func (c *coordinator) nextReap(now time.Time) (time.Duration, bool) {
	return c.peers.NextReap(c.s.tenure.owner(), c.watched, c.watch.hungry, now, c.s.cfg.leaseTTL, c.claimEvery)
}

// errorsJoin joins two errors, either of which may be nil.
func errorsJoin(a, b error) error {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return fmt.Errorf("%w; then: %w", a, b)
}
