package kinesub

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gostream/kinesub/lease"
)

const claimParallel = 8 // lease writes in flight at once while claiming

// claim reads the lease table, takes free leases (and those of owners that stopped) up to this
// subscriber's fair share, hands back what it holds beyond it and, when balance is set, steals
// one lease if it holds too few (see balance.go for the rules). It returns the round's view, or
// nil when the shards or the leases could not be read.
func (c *coordinator) claim(ctx context.Context, balance bool) *view {
	s := c.s
	if !s.table.isListed() {
		return nil
	}
	v, sent, err := c.look(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.report(&ShardError{Stream: s.stream, Op: OpListLeases, Err: err})
		}
		return nil
	}
	c.checkHeld(v, sent)
	c.reap(ctx, v)
	planned := make(map[string]lease.Lease, len(v.leases))
	for id, l := range v.leases {
		if v.orphans[id] {
			l.Owner, l.Expiry = "", time.Time{} // free: its owner stopped
		}
		planned[id] = l
	}
	in := &balanceIn{owner: s.cfg.owner, now: v.now, readable: v.readable, leases: planned, beats: v.beats,
		local: s.table.states(v.readable)}
	// Several writes at a time, so that taking many shards does not wait on one slow write.
	var mu sync.Mutex
	taken := map[string]bool{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, claimParallel)
	want := planTake(in, globalRand{})
	for _, id := range want {
		wg.Add(1)
		sem <- struct{}{}
		go func() { // owned by this round, which waits for it (wg)
			defer wg.Done()
			defer func() { <-sem }()
			if c.take(ctx, id, c.howToTake(v, id)) {
				mu.Lock()
				taken[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	in.local, in.taken = s.table.states(v.readable), taken
	p := planBalance(in, c.live, balance, globalRand{})
	// Below its share, it reads every tick: leases to take may free up without a change-row
	// bump (a peer that does not bump, or an owner that stopped).
	owners, mine := in.counts()
	v.hungry = len(taken) < len(want) || mine < len(in.readable)/in.sharers(owners)
	c.live = p.live
	c.handBack(p.handBack)
	if p.steal != "" && c.take(ctx, p.steal, takeHow{steal: true, counter: p.counter, wait: true}) {
		s.log.Info("lease taken over for balance", logShard, p.steal, "from", p.victim)
	}
	return v
}

// checkHeld loses every shard held here whose lease the round read shows in another holding
// (stolen, or taken after this subscriber was taken for dead), and, the others being its own,
// confirms them (tenure.go).
func (c *coordinator) checkHeld(v *view, sent time.Time) {
	s := c.s
	ws, _ := s.table.held()
	var lost []*worker
	for _, w := range ws {
		if l := v.leases[w.id]; l.Tenure() != w.tenure && !releasedFrom(l, w.tenure) {
			lost = append(lost, w)
		}
	}
	if len(lost) > 0 {
		s.env.invalidate(lost, &ending{cause: causeLoss, why: "taken over by another owner"})
	}
	s.tenure.read(sent, v.change)
}

// releasedFrom reports whether l shows the release of holding t: no owner, and the one counter
// step a Release adds. Only t's holder can write it, so a shard whose retire (checkpoint.go)
// released its lease while a round was listing is not lost: its life still says so when the
// release's answer arrives.
func releasedFrom(l lease.Lease, t lease.Tenure) bool {
	return l.Owner == "" && l.Counter == t.Counter+1
}

// reap deletes the heartbeat rows of other owners that expired: such an owner stopped reading
// at least TTL/3 before (tenure.go), and once its row is gone it can never renew it, so the
// leases bound to it are free to take over at once. It records in v which leases are bound to
// an owner whose row is gone or released: the orphans.
func (c *coordinator) reap(ctx context.Context, v *view) {
	s := c.s
	dead := map[string]bool{}
	reaped := false
	for owner, hb := range v.beats {
		switch {
		case owner == s.cfg.owner:
		case hb.Owner != owner:
			dead[owner] = true // released: its owner closed
		case !hb.Held(v.now):
			cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
			ok, err := s.cfg.store.Delete(cctx, hb.Key, hb.Counter)
			cancel()
			switch {
			case err != nil && ctx.Err() == nil:
				s.report(&ShardError{Stream: s.stream, Op: OpDeleteHeartbeat, Err: fmt.Errorf("lapsed heartbeat of %s: %w", owner, err)})
			case ok:
				s.log.Info("heartbeat of a stopped owner deleted: its shards are free", "owner", owner)
				dead[owner] = true
				reaped = true
			}
		}
	}
	v.orphans = map[string]bool{}
	for id, l := range v.leases {
		if l.Owner == "" || !l.Expiry.IsZero() || l.Owner == s.cfg.owner {
			continue
		}
		if _, ok := v.beats[l.Owner]; !ok || dead[l.Owner] {
			v.orphans[id] = true
		}
	}
	if reaped {
		s.changed(ctx)
	}
}

// takeHow is how a lease is taken: Acquire (free), Steal at counter (an orphan; with wait, a
// live owner's, for balance), and with wait its previous reader may still read it, so the
// shard is read only stealWait after the change row moved (shard.go, awaitStart).
type takeHow struct {
	steal   bool
	counter int64
	wait    bool
}

// howToTake says how to take the lease of shard id, which planTake chose.
func (c *coordinator) howToTake(v *view, id string) takeHow {
	l := v.leases[id]
	switch {
	case v.orphans[id]:
		return takeHow{steal: true, counter: l.Counter}
	case l.Owner == c.s.cfg.owner:
		// Bound to this subscriber but not read here: a steal whose answer was lost, or a shard
		// given up when the heartbeat row was lost. Whoever read it before may read it still.
		return takeHow{wait: true}
	}
	return takeHow{}
}

// handBack hands the shards back cleanly: each drains, writes its checkpoint and releases
// its lease (drain, in shard.go), so that a peer takes it at once and resumes exactly after
// what was acked, instead of stealing it later.
func (c *coordinator) handBack(ids []string) {
	ws, _ := c.s.table.held()
	var back []*worker
	for _, w := range ws {
		for _, id := range ids {
			if w.id == id {
				back = append(back, w)
			}
		}
	}
	if len(back) > 0 {
		c.s.env.invalidate(back, &ending{cause: causeHandBack, why: "handed back for balance"})
	}
}

// take writes the lease, bound to this subscriber's heartbeat row (no TTL of its own), and,
// when it wins, starts the shard's life.
func (c *coordinator) take(ctx context.Context, id string, how takeHow) bool {
	s := c.s
	key := s.leaseKey(id)
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	var ok bool
	var err error
	if how.steal {
		ok, err = s.cfg.store.Steal(cctx, key, s.cfg.owner, how.counter, 0)
	} else {
		ok, err = s.cfg.store.Acquire(cctx, key, s.cfg.owner, 0)
	}
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			op := OpAcquire
			if how.steal {
				op = OpSteal
			}
			s.report(&ShardError{Stream: s.stream, Shard: id, Op: op, Err: err})
		}
		return false
	}
	if !ok {
		return false
	}
	if how.steal {
		s.cfg.probes.at("stolen", id, lease.Tenure{Owner: s.cfg.owner, Counter: how.counter + 1})
	}
	cctx, cancel = context.WithTimeout(ctx, s.cfg.requestTimeout)
	l, err := s.cfg.store.Read(cctx, key)
	cancel()
	if err != nil {
		// The holding is unknown, so it cannot be released: the next round finds it bound to
		// this subscriber and takes it again (waiting, as for a steal).
		s.report(&ShardError{Stream: s.stream, Shard: id, Op: OpReadLease, Err: err})
		return false
	}
	if l.Owner != s.cfg.owner {
		return false
	}
	if l.Checkpoint.Sequence == lease.ShardEnd {
		s.releaseKey(id, l.Tenure())
		s.table.markFinished(id)
		return false
	}
	return c.start(id, l, how.wait)
}

// dropTaken gives up a lease just taken without reading its shard. A stolen one is left to
// expire rather than released: its previous owner may still be reading, and a peer taking a
// released lease reads at once.
func (s *Subscriber) dropTaken(id string, t lease.Tenure, stolen bool) {
	if stolen {
		s.log.Info("stolen lease left to expire", logShard, id, "ttl", s.cfg.leaseTTL)
		return
	}
	s.releaseKey(id, t)
}

func (s *Subscriber) releaseKey(id string, t lease.Tenure) {
	ctx, cancel := context.WithTimeout(s.bgCtx, s.cfg.requestTimeout)
	defer cancel()
	if _, err := s.cfg.store.Release(ctx, s.leaseKey(id), t); err != nil {
		s.report(&ShardError{Stream: s.stream, Shard: id, Op: OpRelease, Err: err})
		return
	}
	s.changed(ctx)
}
