package kinesub

import (
	"context"
	"sync"
	"time"
)

// Reading the lease table only when it changed.
//
// Every stream keeps a change row in the lease table, "<stream>/~table/changes", whose counter
// every subscriber moves after it releases a lease (Close, a hand-back, a finished shard),
// steals one (before it reads it: tenure.go), deletes a lapsed heartbeat row, or joins (its
// heartbeat row taken). Each claim tick a subscriber reads that one row, strongly consistent:
// the read that finds it unmoved also confirms that its leases are still its own (tenure.go).
// It reads all of the stream's rows (a claim round) only when the counter moved, when the
// listing of shards changed, when its own shard's life ended, at every balance round, and
// while it holds fewer than its share or free leases it wants are left untaken. So a released
// lease is still taken within about a second, and a steady table costs one small read a second
// instead of one read of every row.
//
// Crashes bump nothing, so each subscriber watches a peer's heartbeat row (the next live owner
// by name, so that every live owner is watched by another: reap.go): it reads that row every
// TTL/3 and, once its counter stood still for reapAfter, takes the row over and bumps the change
// row for everyone; the claim rounds that follow take over the leases bound to it.
//
// Every subscriber keeps to the change row whatever its store: a thief that did not move it
// would leave its victim confirming leases that are no longer its own (tenure.go), so two
// would read one shard. A claim round lists the stream's rows alone (lease.Store.ListPrefix).

// changesRow is the change row's key after "<stream>/". Shard ids never contain '/', and
// subscribers that predate the row take it for the lease of a shard they do not list, which
// they leave alone.
const changesRow = "~table/changes"

// changeHold is how long a bump holds the change row: nothing waits for it.
const changeHold = time.Second

// changeRow bumps the stream's change row. Bumps that arrive while one is being written are
// folded into one more write after it.
type changeRow struct {
	key string // "<stream>/~table/changes"
	// pending is what the subscriber knows of the pending leases it saw listed, and of the
	// moves after them (pending.go).
	pending pendingNotes

	mu      sync.Mutex
	running bool // a bump is being written
	again   bool // another was asked for meanwhile
}

// newChangeRow returns the change row of stream.
func newChangeRow(stream string) *changeRow {
	return &changeRow{key: stream + "/" + changesRow}
}

// changed bumps the change row, so that the stream's other subscribers read the lease table
// at their next claim tick. A failed bump is logged: peers then notice at their next balance
// round.
func (s *Subscriber) changed(ctx context.Context) {
	if err := s.announce(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("change row not bumped; peers notice at their next balance round", "err", err)
	}
}

// announce bumps the change row and reports whether the bump was written. Bumps asked for
// while one is being written are folded into one more write after it.
func (s *Subscriber) announce(ctx context.Context) error {
	c := s.changes
	c.mu.Lock()
	if c.running {
		c.again = true
		c.mu.Unlock()
		// The write under way may have read the row before this change: one more follows it.
		// Its result is not known here, so this one writes too.
		return s.bumpChanges(ctx)
	}
	c.running = true
	c.mu.Unlock()
	var err error
	for {
		err = s.bumpChanges(ctx)
		c.mu.Lock()
		if !c.again {
			c.running = false
			c.mu.Unlock()
			return err
		}
		c.again = false
		c.mu.Unlock()
	}
}

// bumpChanges moves the change row's counter: it reads the row and takes it over at the
// counter it read (or creates it). When that write fails, a peer moved the counter after the
// read, so after this change, which is all a bump must ensure.
func (s *Subscriber) bumpChanges(ctx context.Context) error {
	c := s.changes
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	defer cancel()
	sent := time.Now()
	l, err := s.cfg.store.Read(cctx, c.key)
	if err != nil {
		return err
	}
	c.pending.changeRead(sent, time.Now(), l.Counter)
	if l.Counter == 0 {
		_, err = s.cfg.store.Acquire(cctx, c.key, s.tenure.owner(), changeHold)
	} else {
		_, err = s.cfg.store.Steal(cctx, c.key, s.tenure.owner(), l.Counter, changeHold)
	}
	if err == nil { // written, or refused because a peer moved the row after the read
		c.pending.movedBy(sent, time.Now())
	}
	return err
}

// watch is what the coordinator knows about the lease table between claim rounds. Only the
// coordinator's goroutine uses it.
type watch struct {
	read   bool  // no round has read the table yet, or the last one failed
	change int64 // the change row's counter as the last round read it
	hungry bool  // the last round left it below its share, or wanting free leases
}

// saw records what claim round v showed, and returns v.
func (w *watch) saw(v *view) *view {
	if v == nil {
		w.read = false
		return nil
	}
	w.read, w.change, w.hungry = !v.unsure, v.change, v.hungry
	return v
}

// stale reports whether a claim tick must read the lease table: see the top of this file.
func (w *watch) stale(ctx context.Context, c *coordinator) bool {
	s := c.s
	if !w.read || w.hungry {
		return true
	}
	if c.watchPeers(ctx) {
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	defer cancel()
	sent := time.Now()
	l, err := s.cfg.store.Read(cctx, s.changes.key)
	if err == nil {
		s.changes.pending.changeRead(sent, time.Now(), l.Counter)
	}
	if c.bumpPending(ctx) || err != nil || l.Counter != w.change {
		return true
	}
	s.tenure.confirm(sent, l.Counter) // the leases read last are still this subscriber's
	return false
}
