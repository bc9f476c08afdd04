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
func (s *Subscriber) claim(ctx context.Context, balance bool) *view {
	s.mu.Lock()
	listed := s.listed
	s.mu.Unlock()
	if !listed {
		return nil
	}
	v, err := s.look(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.report(&ShardError{Stream: s.stream, Op: OpListLeases, Err: err})
		}
		return nil
	}
	in := &balanceIn{owner: s.cfg.owner, now: v.now, readable: v.readable, leases: v.leases, beats: v.beats,
		local: s.localStates(v.readable)}
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
			if s.take(ctx, id, false, func(cctx context.Context) (bool, error) {
				return s.cfg.store.Acquire(cctx, s.leaseKey(id), s.cfg.owner, s.cfg.leaseTTL)
			}) {
				mu.Lock()
				taken[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	in.local, in.taken = s.localStates(v.readable), taken
	p := planBalance(in, s.live, balance, globalRand{})
	// Below its share, it reads every tick: leases to take may free up without a change-row
	// bump (a peer that does not bump, or a lease that lapsed).
	owners, mine := in.counts()
	v.hungry = len(taken) < len(want) || mine < len(in.readable)/in.sharers(owners)
	s.live = p.live
	s.handBack(p.handBack)
	if p.steal != "" && s.take(ctx, p.steal, true, func(cctx context.Context) (bool, error) {
		return s.cfg.store.Steal(cctx, s.leaseKey(p.steal), s.cfg.owner, p.counter, s.cfg.leaseTTL)
	}) {
		s.log.Info("lease taken over for balance", logShard, p.steal, "from", p.victim)
		s.changed(ctx)
	}
	return v
}

// localStates reports what this subscriber's workers on the given shards are doing.
func (s *Subscriber) localStates(ids []string) map[string]localState {
	s.mu.Lock()
	defer s.mu.Unlock()
	local := make(map[string]localState)
	for _, id := range ids {
		w := s.workers[id]
		switch {
		case w == nil:
			continue
		case w.lost.Load():
			local[id] = localLost
		case w.ended.Load():
			local[id] = localEnded
		case w.leaving.Load():
			local[id] = localLeaving
		case w.starting.Load():
			local[id] = localStarting
		default:
			local[id] = localReading
		}
	}
	return local
}

// handBack hands the shards back cleanly: checkpoint written, lease released, so a peer
// takes each at once and resumes exactly after what was acked, instead of stealing it later.
func (s *Subscriber) handBack(ids []string) {
	for _, id := range ids {
		s.mu.Lock()
		w := s.workers[id]
		s.mu.Unlock()
		if w == nil || w.lost.Load() || !w.leaving.CompareAndSwap(false, true) {
			continue
		}
		s.keepers.Add(1)
		go func() { // owned by the subscriber; Close waits for it (keepers)
			defer s.keepers.Done()
			w.handBack()
		}()
	}
}

// take runs a lease write and, when it wins, starts the shard's reader.
func (s *Subscriber) take(ctx context.Context, id string, stolen bool, write func(context.Context) (bool, error)) bool {
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
		s.report(&ShardError{Stream: s.stream, Shard: id, Op: OpReadLease, Err: err})
		s.dropTaken(id, stolen)
		return false
	}
	if l.Owner != s.cfg.owner {
		return false
	}
	if l.Checkpoint == lease.ShardEnd {
		s.releaseKey(id)
		s.mu.Lock()
		s.finished[id] = true
		s.mu.Unlock()
		return false
	}
	w := s.startWorker(id, l, acquired, stolen)
	return w
}

// dropTaken gives up a lease just taken without reading its shard. A stolen one is left to
// expire rather than released: its previous owner may still be reading, and a peer taking a
// released lease reads at once.
func (s *Subscriber) dropTaken(id string, stolen bool) {
	if stolen {
		s.log.Info("stolen lease left to expire", logShard, id, "ttl", s.cfg.leaseTTL)
		return
	}
	s.releaseKey(id)
}

func (s *Subscriber) releaseKey(id string) {
	ctx, cancel := context.WithTimeout(s.bgCtx, s.cfg.requestTimeout)
	defer cancel()
	if err := s.cfg.store.Release(ctx, s.leaseKey(id), s.cfg.owner); err != nil {
		s.report(&ShardError{Stream: s.stream, Shard: id, Op: OpRelease, Err: err})
		return
	}
	s.changed(ctx)
}

// stealWait is how long a thief waits after stealing a lease before it reads the shard. The
// victim's last successful renewal was sent before the thief read the lease's counter (a later
// renewal would have changed it and failed the steal), and the victim stops reading at the
// latest 2/3 TTL after sending it (renewDeadline), however its store calls fail. Both measure
// elapsed time on their own monotonic clocks, so clock offsets between hosts do not matter;
// the extra TTL/12 covers the victim's scheduling delay in stopping and clock rate drift.
func stealWait(ttl time.Duration) time.Duration { return ttl*2/3 + ttl/12 }
