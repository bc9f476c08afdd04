package kinesub

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gostream/kinesub/lease"
)

const claimParallel = 8 // lease writes in flight at once while claiming

// claim takes free and expired leases up to this subscriber's fair share and, when balance is
// set, steals one lease from the most loaded owner if this one holds too few. It returns the
// round's view, or nil when the shards or the leases could not be read.
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
	n, k := len(v.readable), len(v.owners)
	// This subscriber's own count is its running readers, not its rows that look held: a
	// renewal that lands late leaves a row lapsed while its reader goes on.
	mine := s.reading(v)
	v.owners[s.cfg.owner] = mine
	fair := (n + k - 1) / k
	// Free leases first, in a random order so that instances starting together spread out,
	// several at a time so that taking many shards does not wait on one slow write.
	order := slices.Clone(v.readable)
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var want []string
	for _, id := range order {
		if len(want) >= fair-mine {
			break
		}
		l := v.leases[id]
		if s.owns(id) || l.Held(v.now) && l.Owner != s.cfg.owner {
			continue
		}
		want = append(want, id)
	}
	var taken atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, claimParallel)
	for _, id := range want {
		wg.Add(1)
		sem <- struct{}{}
		go func() { // owned by this round, which waits for it (wg)
			defer wg.Done()
			defer func() { <-sem }()
			if s.take(ctx, id, false, func(cctx context.Context) (bool, error) {
				return s.cfg.store.Acquire(cctx, s.leaseKey(id), s.cfg.owner, s.cfg.leaseTTL)
			}) {
				taken.Add(1)
			}
		}()
	}
	wg.Wait()
	mine += int(taken.Load())
	v.owners[s.cfg.owner] = mine
	// An owner that just became live is handed its share now rather than at the next balance
	// round.
	joined := false
	for o := range v.owners {
		joined = joined || !s.live[o]
	}
	s.live = make(map[string]bool, len(v.owners))
	for o := range v.owners {
		s.live[o] = true
	}
	if balance || joined {
		s.shed(v, n, k, mine)
	}
	if balance {
		s.steal(ctx, v, n, k, mine)
	}
	return v
}

// shed hands back, cleanly, the leases this subscriber holds beyond its fair share
// (ceil(n/k)) once other owners are live: checkpoint written, lease released, so a peer takes
// each at once and resumes exactly after what was acked, instead of stealing it later. Leases
// still being handed back from an earlier round count as gone.
func (s *Subscriber) shed(v *view, n, k, mine int) {
	fair := (n + k - 1) / k
	if k < 2 || mine <= fair {
		return
	}
	s.mu.Lock()
	var mineNow []*worker
	leaving := 0
	for _, id := range v.readable {
		switch w := s.workers[id]; {
		case w == nil || w.lost.Load() || w.ended.Load():
		case w.leaving.Load():
			leaving++
		default:
			mineNow = append(mineNow, w)
		}
	}
	s.mu.Unlock()
	rand.Shuffle(len(mineNow), func(i, j int) { mineNow[i], mineNow[j] = mineNow[j], mineNow[i] })
	for _, w := range mineNow[:max(min(mine-leaving-fair, len(mineNow)), 0)] {
		w.leaving.Store(true)
		s.keepers.Add(1)
		go func() { // owned by the subscriber; Close waits for it (keepers)
			defer s.keepers.Done()
			w.handBack()
		}()
	}
}

// steal takes one lease from the most loaded live owner when this subscriber holds fewer than
// its share: below floor(n/k), or at it while another owner holds two or more above it. The
// takeover is conditional on the counter observed, so a lease that moved meanwhile is left.
// An owner above the ceiling whose heartbeat is live is left alone: it sheds its excess itself,
// cleanly, by its next balance round.
func (s *Subscriber) steal(ctx context.Context, v *view, n, k, mine int) {
	floor := n / k
	victim, most := "", 0
	for o, c := range v.owners {
		if o != s.cfg.owner && (c > most || c == most && o < victim) {
			victim, most = o, c
		}
	}
	if victim == "" || !(mine < floor && most > floor || mine == floor && most >= floor+2) {
		return
	}
	if most > (n+k-1)/k && v.beats[victim].Held(v.now) {
		return
	}
	var candidates []string
	for _, id := range v.readable {
		if l := v.leases[id]; l.Owner == victim && l.Held(v.now) {
			candidates = append(candidates, id)
		}
	}
	if len(candidates) == 0 {
		return
	}
	id := candidates[rand.IntN(len(candidates))]
	counter := v.leases[id].Counter
	if s.take(ctx, id, true, func(cctx context.Context) (bool, error) {
		return s.cfg.store.Steal(cctx, s.leaseKey(id), s.cfg.owner, counter, s.cfg.leaseTTL)
	}) {
		s.log.Info("lease taken over for balance", logShard, id, "from", victim)
	}
}

// reading counts the readable shards of v that this subscriber has a reader for, its lease
// not lost and not taken over by another owner in the table (a victim of a steal learns of it
// only at its next renewal). A row of its own that looks lapsed still counts: its renewal may
// not have landed yet.
func (s *Subscriber) reading(v *view) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, id := range v.readable {
		w := s.workers[id]
		if o := v.leases[id].Owner; w == nil || w.lost.Load() || o != "" && o != s.cfg.owner {
			continue
		}
		n++
	}
	return n
}

func (s *Subscriber) owns(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.workers[id] != nil
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
		s.releaseKey(id)
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

func (s *Subscriber) releaseKey(id string) {
	ctx, cancel := context.WithTimeout(s.bgCtx, s.cfg.requestTimeout)
	defer cancel()
	if err := s.cfg.store.Release(ctx, s.leaseKey(id), s.cfg.owner); err != nil {
		s.report(&ShardError{Stream: s.stream, Shard: id, Op: OpRelease, Err: err})
	}
}

// stealWait is how long a thief waits after stealing a lease before it reads the shard. The
// victim's last successful renewal was sent before the thief read the lease's counter (a later
// renewal would have changed it and failed the steal), and the victim stops reading at the
// latest 2/3 TTL after sending it (renewDeadline), however its store calls fail. Both measure
// elapsed time on their own monotonic clocks, so clock offsets between hosts do not matter;
// the extra TTL/12 covers the victim's scheduling delay in stopping and clock rate drift.
func stealWait(ttl time.Duration) time.Duration { return ttl*2/3 + ttl/12 }
