package kinesub

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/gostream/kinesub/lease"
)

// Reading the lease table only when it changed.
//
// Every stream keeps a change row in the lease table, "<stream>/~table/changes", whose counter
// every subscriber moves after it releases a lease (Close, a hand-back, a finished shard),
// steals one, or joins (its heartbeat row taken anew). Each claim tick a subscriber reads that
// one row (eventually consistent where the store can: lease.WeakReader); it reads all of the
// stream's rows (a claim round) only when the counter moved, when the listing of shards
// changed, when its own worker stopped, at every balance round, while it holds fewer than its
// share or free leases it wants are left untaken, and when leases of departed owners come to
// lapse. So a released lease is still taken within about a second, and a steady table costs
// one small read a second instead of one read of every row.
//
// Crashes bump nothing, so each subscriber watches one peer's heartbeat row (the next live
// owner by name, so that every live owner is watched by one other): it reads that row once the
// expiry it last saw has passed, and bumps the change row for everyone when the row lapsed.
// Leases of a departed owner lapse one by one up to a TTL later; the round that sees them
// schedules another at the first of their expiries.
//
// The change row needs a store that lists one stream's rows (lease.PrefixLister). With any
// other store a subscriber reads the whole store every claim tick, as it always did.

// changesRow is the change row's key after "<stream>/". Shard ids never contain '/', and
// subscribers that predate the row take it for the lease of a shard they do not list, which
// they leave alone.
const changesRow = "~table/changes"

// changeHold is how long a bump holds the change row: nothing waits for it.
const changeHold = time.Second

// changeRow bumps the stream's change row. Bumps that arrive while one is being written are
// folded into one more write after it.
type changeRow struct {
	key    string // "<stream>/~table/changes"
	lister lease.PrefixLister
	// read reads the change row: weakly where the store can (lease.WeakReader). A stale answer
	// only delays a bump to the next tick, since what it triggers is decided by conditional
	// writes; on DynamoDB it costs half the read units.
	read func(ctx context.Context, key string) (lease.Lease, error)

	mu      sync.Mutex
	running bool // a bump is being written
	again   bool // another was asked for meanwhile
}

// newChangeRow returns the change row of stream, or nil when store (narrowed: see
// meteredStore.narrowed) cannot list one stream's rows alone (lease.PrefixLister): then every
// claim tick reads the whole store.
func newChangeRow(store lease.Store, stream string) *changeRow {
	lister, ok := store.(lease.PrefixLister)
	if !ok {
		return nil
	}
	c := &changeRow{key: stream + "/" + changesRow, lister: lister, read: store.Read}
	if weak, ok := store.(lease.WeakReader); ok {
		c.read = weak.ReadWeak
	}
	return c
}

// changed bumps the change row, so that the stream's other subscribers read the lease table
// at their next claim tick. A failed bump is logged: peers then notice at their next balance
// round.
func (s *Subscriber) changed(ctx context.Context) {
	c := s.changes
	if c == nil {
		return
	}
	c.mu.Lock()
	if c.running {
		c.again = true
		c.mu.Unlock()
		return
	}
	c.running = true
	c.mu.Unlock()
	for {
		s.bumpChanges(ctx)
		c.mu.Lock()
		if !c.again {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.again = false
		c.mu.Unlock()
	}
}

// bumpChanges moves the change row's counter: it reads the row and takes it over at the
// counter it read (or creates it). When that write fails, a peer moved the counter after the
// read, so after this change, which is all a bump must ensure.
func (s *Subscriber) bumpChanges(ctx context.Context) {
	c := s.changes
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	defer cancel()
	l, err := s.cfg.store.Read(cctx, c.key)
	if err == nil {
		if l.Counter == 0 {
			_, err = s.cfg.store.Acquire(cctx, c.key, s.cfg.owner, changeHold)
		} else {
			_, err = s.cfg.store.Steal(cctx, c.key, s.cfg.owner, l.Counter, changeHold)
		}
	}
	if err != nil && ctx.Err() == nil {
		s.log.Warn("change row not bumped; peers notice at their next balance round", "err", err)
	}
}

// watch is what the coordinator knows about the lease table between claim rounds. Only the
// coordinator's goroutine uses it.
type watch struct {
	read    bool      // no round has read the table yet, or the last one failed
	change  int64     // the change row's counter as the last round read it
	hungry  bool      // the last round left it below its share, or wanting free leases
	due     time.Time // when a lease of a departed owner lapses; zero if none
	peer    string    // the owner whose heartbeat row this subscriber watches, or ""
	peerKey string    // its key
	peerExp time.Time // its expiry as last read
	beatAt  time.Time // this subscriber's last successful heartbeat
}

// saw records what claim round v showed, and returns v.
func (w *watch) saw(s *Subscriber, v *view) *view {
	if v == nil {
		w.read = false
		return nil
	}
	w.read, w.change, w.hungry, w.due = true, v.change, v.hungry, time.Time{}
	var live []string
	for o, l := range v.beats {
		if l.Held(v.now) && o != s.cfg.owner {
			live = append(live, o)
		}
	}
	for _, l := range v.leases {
		if l.Owner == s.cfg.owner || !l.Held(v.now) || v.beats[l.Owner].Held(v.now) {
			continue
		}
		if w.due.IsZero() || l.Expiry.Before(w.due) {
			w.due = l.Expiry
		}
	}
	w.peer, w.peerKey = "", ""
	if len(live) == 0 {
		return v
	}
	sort.Strings(live)
	w.peer = live[0]
	for _, o := range live {
		if o > s.cfg.owner {
			w.peer = o
			break
		}
	}
	w.peerKey, w.peerExp = s.leaseKey(ownerRowPrefix+w.peer), v.beats[w.peer].Expiry
	return v
}

// stale reports whether a claim tick must read the lease table: see the top of this file.
func (w *watch) stale(ctx context.Context, s *Subscriber) bool {
	c := s.changes
	now := time.Now()
	if c == nil || !w.read || w.hungry || !w.due.IsZero() && now.After(w.due) {
		return true
	}
	if w.peerKey != "" && now.After(w.peerExp) {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
		l, err := s.cfg.store.Read(cctx, w.peerKey)
		cancel()
		if err != nil {
			return true
		}
		if l.Owner != w.peer || !l.Held(time.Now()) {
			s.log.Info("peer's heartbeat lapsed", "owner", w.peer)
			s.changed(ctx)
			return true
		}
		w.peerExp = l.Expiry
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	defer cancel()
	l, err := c.read(cctx, c.key)
	return err != nil || l.Counter != w.change
}

// joined reports a successful heartbeat at instant at, and whether it (re)joined the table:
// the first one, or the first after the row may have lapsed.
func (w *watch) joined(at time.Time, ttl time.Duration) bool {
	j := w.beatAt.IsZero() || at.Sub(w.beatAt) >= ttl
	w.beatAt = at
	return j
}
