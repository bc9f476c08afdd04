package kinesub

import (
	"context"
	"sync"
	"time"

	"github.com/gostream/kinesub/lease"
)

const claimParallel = 8 // lease writes in flight at once while claiming

// claim reads the lease table, takes free and expired leases up to this subscriber's fair
// share, hands back what it holds beyond it and, when balance is set, steals one lease if it
// holds too few (see balance.go for the rules). It returns the round's view, or nil when the
// shards or the leases could not be read.
func (c *coordinator) claim(ctx context.Context, balance bool) *view {
	s := c.s
	if !s.table.isListed() {
		return nil
	}
	v, err := c.look(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.report(&ShardError{Stream: s.stream, Op: OpListLeases, Err: err})
		}
		return nil
	}
	in := &balanceIn{owner: s.cfg.owner, now: v.now, readable: v.readable, leases: v.leases, beats: v.beats,
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
			if c.take(ctx, id, false, func(cctx context.Context) (bool, error) {
				return s.cfg.store.Acquire(cctx, s.leaseKey(id), s.cfg.owner, s.cfg.leaseTTL)
			}) {
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
	// bump (a peer that does not bump, or a lease that lapsed).
	owners, mine := in.counts()
	v.hungry = len(taken) < len(want) || mine < len(in.readable)/in.sharers(owners)
	c.live = p.live
	c.handBack(p.handBack)
	if p.steal != "" && c.take(ctx, p.steal, true, func(cctx context.Context) (bool, error) {
		return s.cfg.store.Steal(cctx, s.leaseKey(p.steal), s.cfg.owner, p.counter, s.cfg.leaseTTL)
	}) {
		s.log.Info("lease taken over for balance", logShard, p.steal, "from", p.victim)
		s.changed(ctx)
	}
	return v
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

// take runs a lease write and, when it wins, starts the shard's life.
func (c *coordinator) take(ctx context.Context, id string, stolen bool, write func(context.Context) (bool, error)) bool {
	s := c.s
	// The lease runs from when the store applies the write, which is after it was sent: count
	// from the sending, so this owner's deadlines are never later than the store's.
	acquired := time.Now()
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	ok, err := write(cctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			op := OpAcquire
			if stolen {
				op = OpSteal
			}
			s.report(&ShardError{Stream: s.stream, Shard: id, Op: op, Err: err})
		}
		return false
	}
	if !ok {
		return false
	}
	cctx, cancel = context.WithTimeout(ctx, s.cfg.requestTimeout)
	l, err := s.cfg.store.Read(cctx, s.leaseKey(id))
	cancel()
	if err != nil {
		// The holding is unknown, so it cannot be released: it lapses after its TTL.
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
	return c.start(id, l, acquired, stolen)
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
