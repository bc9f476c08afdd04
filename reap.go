package kinesub

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

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
// Each subscriber reads, every TTL/3, the rows of the next watchedPeers live owners after it by
// name (and of the owners between them that look silent), so that every owner is watched by two
// others and a crash is noticed within about a TTL even when one of its watchers crashed with
// it; listings (claim rounds) note every row they show. A subscriber also takes over, when
// due, an owner it does not watch whose watchers it first saw only after that owner's counter
// stood still (overlooked): watchers that restarted after a crash time its silence afresh.

// watchedPeers is how many live owners each subscriber watches.
const watchedPeers = 2

// reapAfter is how long a heartbeat row's counter must have stood still, since this subscriber
// first read it, before it takes the row over.
func reapAfter(ttl time.Duration) time.Duration { return stealWait(ttl) }

// beatSeen is what a subscriber last read of an owner's heartbeat row.
type beatSeen struct {
	row   lease.Lease // as last read; a zero Lease when absent
	since time.Time   // when its counter was first read (the answer's arrival)
	read  time.Time   // when it was last read
	// missed: the row stood still for TTL/2 (a renewal missed), which a watcher's claim round
	// has looked into once (pending.go)
	missed bool
	first  time.Time // when this subscriber first read the owner's row, whatever its counter
}

// peers is what this subscriber has seen of the other owners' heartbeat rows. Only the
// coordinator's goroutine uses it.
type peers struct {
	seen map[string]*beatSeen // by owner
}

// observe records that owner's heartbeat row read l (Key empty: absent), answered at recv.
func (p *peers) observe(owner string, l lease.Lease, recv time.Time) *beatSeen {
	if p.seen == nil {
		p.seen = map[string]*beatSeen{}
	}
	b := p.seen[owner]
	if b == nil || b.row.Counter != l.Counter || b.row.Owner != l.Owner {
		first := recv
		if b != nil {
			first = b.first
		}
		b = &beatSeen{since: recv, first: first}
		p.seen[owner] = b
	}
	b.row, b.read = l, recv
	return b
}

// gone reports whether owner's row, as last read, shows it stopped: absent, released, or
// taken over by a peer.
func (b *beatSeen) gone(owner string) bool { return b == nil || b.row.Owner != owner }

// stillFor returns how long the row's counter has stood still, as this subscriber knows, at now.
func (b *beatSeen) stillFor(now time.Time) time.Duration { return now.Sub(b.since) }

// forget drops what was seen of owners not in keep.
func (p *peers) forget(keep map[string]bool) {
	for o := range p.seen {
		if !keep[o] {
			delete(p.seen, o)
		}
	}
}

// reap takes over the heartbeat row of owner, silent since b was read, so that its shards are
// free: a Steal at the counter read (resolved by a read when its outcome is not known), then a
// release and a delete of the row. It reports whether the row is no longer the owner's.
func (c *coordinator) reap(ctx context.Context, owner string, b *beatSeen) bool {
	s := c.s
	me := s.tenure.owner()
	key := s.ownerKeyOf(owner)
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	defer cancel()
	ok, err := s.cfg.store.Steal(cctx, key, me, b.row.Counter, 0)
	if err != nil || !ok {
		l, rerr := s.cfg.store.Read(cctx, key)
		if rerr != nil {
			if ctx.Err() == nil {
				s.report(&ShardError{Stream: s.stream, Op: OpDeleteHeartbeat, Err: fmt.Errorf("silent heartbeat of %s: %w", owner, errorsJoin(err, rerr))})
			}
			return false
		}
		c.peers.observe(owner, l, time.Now())
		if l.Owner != me || l.Counter != b.row.Counter+1 {
			return l.Owner != owner // renewed meanwhile (alive), or gone anyway
		}
	}
	s.log.Info("heartbeat of a silent owner taken over: its shards are free", "owner", owner,
		"silent_for", time.Since(b.since).Round(time.Millisecond))
	taken := lease.Tenure{Owner: me, Counter: b.row.Counter + 1}
	if ok, err := s.cfg.store.Release(cctx, key, taken); err == nil && ok {
		_, _ = s.cfg.store.Delete(cctx, key, taken.Counter+1) // else cleanup deletes it
	}
	c.peers.observe(owner, lease.Lease{Key: key, Owner: me, Counter: taken.Counter}, time.Now())
	s.changed(ctx)
	return true
}

// watchPeers reads, when due, the heartbeat rows this subscriber watches: the next
// watchedPeers live owners after it by name, and any between them that look silent. It also
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
	for i := 0; i < len(owners) && live < watchedPeers; i++ {
		o := owners[(start+i)%len(owners)]
		c.watched = append(c.watched, o)
		b := c.peers.seen[o]
		// Every TTL/3 (less half a claim tick, the granularity it is called at): so the renewal
		// that set a counter is first read at most TTL/3 after it landed.
		if time.Since(b.read) >= ttl/3-c.claimEvery/2 {
			var ok bool
			if b, ok = c.readPeer(ctx, o); !ok {
				return changed
			}
		}
		if b.gone(o) {
			s.log.Info("peer's heartbeat row gone", "owner", o)
			changed = true
			continue
		}
		if still := b.stillFor(time.Now()); still >= reapAfter(ttl) {
			changed = c.reap(ctx, o, b) || changed
			continue
		} else if still >= ttl/2 {
			// It missed a renewal: watch the next one too, and list the table once, so that a
			// pending lease it holds has the change row moved now rather than after its reap.
			if !b.missed {
				b.missed, changed = true, true
			}
			continue
		}
		live++
	}
	for _, o := range c.overlooked(owners) {
		if c.peers.seen[o].stillFor(time.Now()) < reapAfter(ttl) {
			continue
		}
		b, ok := c.readPeer(ctx, o)
		switch {
		case !ok:
			return changed
		case b.gone(o):
			s.log.Info("peer's heartbeat row gone", "owner", o)
			changed = true
		case b.stillFor(time.Now()) >= reapAfter(ttl):
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
	return c.peers.observe(owner, l, time.Now()), true
}

// liveOwners returns, sorted, the other owners whose heartbeat rows were last read as their own.
func (c *coordinator) liveOwners() []string {
	me := c.s.tenure.owner()
	var owners []string
	for o, b := range c.peers.seen {
		if o != me && !b.gone(o) {
			owners = append(owners, o)
		}
	}
	sort.Strings(owners)
	return owners
}

// overlooked returns, of the live owners (sorted) this subscriber does not watch, those with a
// watcher (one of the watchedPeers owners before each by name) that it first saw only after it
// first read the owner's current counter. Such a watcher (one that restarted, or joined after the
// owner fell silent) times that silence from its own first read, so it takes the row over later
// than this subscriber can; waiting for it would add the gap to the failover of a crash whose
// watchers restart soon after it. This subscriber reads such an owner's row when it is due and
// takes it over itself. That costs a read at most once per owner for each joining watcher, since
// a live owner's counter read at the listing that shows the joiner is newer than the joiner.
// Other unwatched owners cost no read: their watchers have timed them for longer than this
// subscriber has.
func (c *coordinator) overlooked(owners []string) []string {
	me := c.s.tenure.owner()
	ring := append(append(make([]string, 0, len(owners)+1), owners...), me)
	sort.Strings(ring)
	var out []string
	for i, o := range ring {
		if o == me || slices.Contains(c.watched, o) {
			continue
		}
		since := c.peers.seen[o].since
		for k := 1; k <= watchedPeers && k < len(ring); k++ {
			w := ring[(i-k+len(ring))%len(ring)]
			if w != me && c.peers.seen[w].first.After(since) {
				out = append(out, o)
				break
			}
		}
	}
	return out
}

// nextReap returns how long until the row of a peer this subscriber watches, or has overlooked
// (or any, while it is below its share), will have stood still for reapAfter, and whether that
// comes before the next claim tick: the coordinator then looks at that moment rather than at the
// tick after it, which would add up to a tick to every crash's failover.
func (c *coordinator) nextReap(now time.Time) (time.Duration, bool) {
	wait := c.claimEvery
	found := false
	due := func(o string, after time.Duration) {
		b := c.peers.seen[o]
		if b == nil || b.gone(o) {
			return
		}
		if d := after - b.stillFor(now); d > 0 && d < wait {
			wait, found = d, true
		}
	}
	for _, o := range c.watched {
		due(o, reapAfter(c.s.cfg.leaseTTL))
	}
	// A subscriber below its share lists the table at every tick, and a listing takes over every
	// row due (claim.go, settleOwners): it looks at every owner's. Others look at the overlooked.
	others := c.liveOwners()
	if !c.watch.hungry {
		others = c.overlooked(others)
	}
	for _, o := range others {
		due(o, reapAfter(c.s.cfg.leaseTTL))
	}
	// And when a watched row will have stood still for TTL/2 (watchPeers then lists the table).
	for _, o := range c.watched {
		if b := c.peers.seen[o]; b != nil && !b.missed {
			due(o, c.s.cfg.leaseTTL/2)
		}
	}
	return wait, found
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
