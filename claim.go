package kinesub

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gostream/kinesub/internal/protocol"
	"github.com/gostream/kinesub/lease"
)

const claimParallel = 8 // lease writes in flight at once while claiming

// A shard's lease is, at any time, in one of three forms:
//
//   - free: no owner (never taken, or released after its holder stopped reading and wrote its
//     last checkpoint). Whoever takes it reads at once.
//   - bound: an owner and no expiry: held while the owner's heartbeat row is its own (tenure.go).
//     Only the owner reads it, and it bound the lease only once nobody else could be reading.
//   - pending: an owner and a far expiry (pendingTTL): the owner took it from a holder that may
//     still be reading (a steal for balance, or the takeover of another pending lease), moved
//     the change row, and binds and reads it only stealWait later (shard.go, awaitStart).
//
// So a subscriber reads at once a lease it takes free, a lease bound to an owner whose heartbeat
// row is gone or taken over (reap.go), and a lease bound to itself that it does not read (its
// own take whose answer was lost, or a shard it gave up when its deadline passed). It waits
// after taking any pending lease (its previous holder's victim may still read), and after a
// steal for balance.

// pendingTTL is the expiry a pending lease is written with (protocol.PendingTTL).
const pendingTTL = protocol.PendingTTL

// pendingAt reports whether l is pending at now: held with an expiry decades away.
func pendingAt(l lease.Lease, now time.Time) bool { return protocol.PendingAt(rowOf(l), now) }

// claim reads the lease table, takes free leases (and those of owners that stopped) up to this
// subscriber's fair share, takes up the leases the table shows as its own that it does not
// read, hands back what it holds beyond its share and, when balance is set, steals one lease if
// it holds too few (see balance.go for the rules). It returns the round's view, or nil when the
// shards or the leases could not be read.
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
	if err := s.guard(v.rows, v.now); err != nil {
		s.loseAll("another lease protocol reads the stream")
		s.fail(err)
		return nil
	}
	me := s.tenure.owner()
	c.checkHeld(v, sent)
	c.settleOwners(ctx, v, me)
	c.bumpPending(ctx) // before the takes below, which time their wait from it
	if !s.tenure.mayHandOut() {
		return v // its deadline passed: it takes nothing until its shards were given up
	}
	if !s.mayTake() {
		v.hungry = true // read again at the next tick
		return v        // its heartbeat row does not note its TTL yet: the next renewal does
	}
	v.waitTTL = c.peers.LongestTTL(s.cfg.leaseTTL)
	c.reconcile(ctx, v, sent, me)
	planned, orphans := protocol.Planned(v.shards, v.dead)
	in := &protocol.BalanceIn{Owner: me, Now: v.now, Readable: v.readable, Leases: planned, Orphans: orphans,
		Overdue: c.orphanSince.Overdue(orphans, sent, c.claimEvery),
		Beats:   c.peers.Beats(me, v.dead, time.Now(), v.now.Add(-time.Millisecond), s.cfg.leaseTTL),
		Local:   localsOf(s.table.states(v.readable)), Load: s.env.loads.view(c.peers.Seen)}
	c.noteFleet(in)
	// Several writes at a time, so that taking many shards does not wait on one slow write.
	var mu sync.Mutex
	taken := map[string]bool{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, claimParallel)
	want := protocol.PlanTake(in, s.cfg.probes.chooser())
	for _, id := range want {
		wg.Add(1)
		sem <- struct{}{}
		go func() { // owned by this round, which waits for it (wg)
			defer wg.Done()
			defer func() { <-sem }()
			if c.take(ctx, id, c.howToTake(v, id, me)) {
				mu.Lock()
				taken[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	in.Local, in.Taken = localsOf(s.table.states(v.readable)), taken
	p := protocol.PlanBalance(in, c.live, balance, s.cfg.probes.chooser())
	// Below its share, it reads every tick: leases to take may free up without a change-row
	// bump (a peer that does not bump, or an owner that stopped).
	v.hungry = in.Hungry(len(want), len(taken))
	c.live = p.Live
	c.handBack(p.HandBack)
	if p.Steal != "" && c.take(ctx, p.Steal, c.pendingHow(v, p.Steal, takeHow{Steal: true, Counter: p.Counter, Pending: true})) {
		s.log.Info("lease taken over for balance", logShard, p.Steal, "from", p.Victim)
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
		if protocol.ShowsLoss(rowOf(v.leases[w.id]), protocol.Tenure(w.tenureOf())) {
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
	return protocol.ReleasedFrom(rowOf(l), protocol.Tenure(t))
}

// boundFrom reports whether l shows the binding of the pending holding t (shard.go, bind): the
// same owner, no expiry, the one counter step the binding adds. A round that lists while the
// binding's answer is on its way sees it.
func boundFrom(l lease.Lease, t lease.Tenure) bool {
	return protocol.BoundFrom(rowOf(l), protocol.Tenure(t))
}

// settleOwners works out, for every owner the round's leases name (as holders, or as the
// victims pending leases protect: pending.go), whether it stopped: its
// heartbeat row is absent (read on its own when the listing lacks it: an index listing may not
// show a row just made), released or taken over. Rows that stood still for reapAfter are taken
// over (reap.go). It records the owners that stopped in v.dead.
func (c *coordinator) settleOwners(ctx context.Context, v *view, me string) {
	s := c.s
	v.dead = map[string]bool{}
	keep := map[string]bool{}
	unknown := map[string]bool{} // owners whose row could not be read: taken for live
	for owner, hb := range v.beats {
		keep[owner] = true
		c.peers.Observe(owner, rowOf(hb), v.recv)
	}
	var named []string // the owners the leases name, and the victims of pending ones
	for _, l := range v.leases {
		named = append(named, l.Owner)
		if t, ok := victimOf(l, v.now); ok {
			named = append(named, t.Owner)
		}
	}
	for _, owner := range named {
		if owner == "" || owner == me || keep[owner] {
			continue
		}
		keep[owner] = true
		cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
		hb, err := s.cfg.store.Read(cctx, s.ownerKeyOf(owner))
		if err == nil && hb.Owner == "" {
			// Gone from this protocol's rows: a subscriber of kinesub 0.1 under that name?
			var old lease.Lease
			if old, err = s.cfg.store.Read(cctx, s.leaseKey(v1OwnerPrefix+owner)); err == nil {
				err = s.guard([]lease.Lease{old}, time.Now())
			}
		}
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.report(&ShardError{Stream: s.stream, Op: OpReadLease, Err: fmt.Errorf("heartbeat of %s: %w", owner, err)})
			}
			v.unsure = true
			unknown[owner] = true
			continue // unknown: taken for live this round
		}
		c.peers.Observe(owner, rowOf(hb), time.Now())
	}
	for owner := range keep {
		b := c.peers.Seen[owner]
		if owner == me || unknown[owner] && b == nil {
			// Never read, and this round's read failed: nothing says it stopped. (A row read
			// before is judged by that read: absent or taken over, or standing still.)
			continue
		}
		switch protocol.Judge(owner, b, time.Now(), s.cfg.leaseTTL) {
		case protocol.Gone:
			v.dead[owner] = true
			if b != nil {
				s.log.Debug("owner stopped: its heartbeat row is not its own", "owner", owner, "row_owner", b.Row.Owner, "row_counter", b.Row.Counter)
			}
		case protocol.Reap:
			if c.reap(ctx, owner, b) {
				v.dead[owner] = true
			}
		}
	}
	keep[me] = true
	c.peers.Forget(keep)
}

// reconcile takes up what the table shows as this subscriber's and it does not read: its own
// takes whose answers were lost, shards it gave up when its deadline passed, hand-backs whose
// release did not land. A bound lease is read again at once (nobody else reads a lease bound
// to a live owner); a pending one is waited for, as after a steal. Finished shards are
// released. Whatever this puts it above its share, balancing hands back. A shard whose life
// here ended after the round's listing was sent is left for the next round: the listing may
// predate its release (a hand-back), and taking it up would undo the hand-back.
func (c *coordinator) reconcile(ctx context.Context, v *view, sent time.Time, me string) {
	s := c.s
	takeUp, release := protocol.Reconcile(v.shards, me, func(id string) bool {
		return s.table.holds(id) || s.table.endedSince(id, sent)
	}, v.readable)
	for _, id := range release {
		s.releaseKey(id, v.leases[id].Tenure())
	}
	for _, id := range takeUp {
		s.log.Info("lease held in the table but not read here: taken up", logShard, id)
		c.take(ctx, id, c.howToTake(v, id, me))
	}
}

// takeHow is how a lease is taken (protocol.TakeHow). Victim, for a pending steal, is noted on
// the lease (pending.go).
type takeHow = protocol.TakeHow

// howToTake says how to take the lease of shard id (protocol.HowToTake): the planner chose it,
// or the table shows it as this subscriber's.
func (c *coordinator) howToTake(v *view, id, me string) takeHow {
	return c.pendingHow(v, id, protocol.HowToTake(rowOf(v.leases[id]), me, v.dead, v.now))
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

// take writes the lease, bound to this subscriber's heartbeat row (no TTL of its own) or
// pending, and, when it wins, starts the shard's life. A write whose outcome is not known (an
// error; or a refusal, which a retry of a write that landed also gets) is resolved by a strong
// read: the lease as this write would have left it means it landed.
func (c *coordinator) take(ctx context.Context, id string, how takeHow) bool {
	s := c.s
	me := s.tenure.owner()
	key := s.leaseKey(id)
	ttl := time.Duration(0)
	if how.Pending {
		ttl = pendingTTL
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	defer cancel()
	var ok bool
	var err error
	note, noted := noteVictim(how.Counter+1, lease.Tenure(how.Victim))
	switch {
	case how.Steal && how.Pending && noted:
		ok, err = s.cfg.store.StealNote(cctx, key, me, how.Counter, ttl, note)
	case how.Steal:
		ok, err = s.cfg.store.Steal(cctx, key, me, how.Counter, ttl)
	default:
		ok, err = s.cfg.store.Acquire(cctx, key, me, ttl)
	}
	if err != nil && ctx.Err() == nil {
		op := OpAcquire
		if how.Steal {
			op = OpSteal
		}
		s.report(&ShardError{Stream: s.stream, Shard: id, Op: op, Err: err})
	}
	l, rerr := s.cfg.store.Read(cctx, key)
	switch {
	case rerr != nil:
		// The holding is unknown: a later round finds the lease as it is, this subscriber's
		// (reconcile) or not.
		if ctx.Err() == nil {
			s.report(&ShardError{Stream: s.stream, Shard: id, Op: OpReadLease, Err: rerr})
		}
		return false
	case !protocol.TakeLanded(rowOf(l), me, how, ok, time.Now()):
		// Another's, or ours from another write, or an older holding of ours whose late
		// writes may still land: a later round finds the lease as it is, and takes it up with
		// a write of its own if it is ours.
		return false
	}
	if how.Pending {
		s.cfg.probes.at("stolen", id, l.Tenure())
	}
	if l.Checkpoint.Sequence == lease.ShardEnd {
		s.releaseKey(id, l.Tenure())
		s.table.markFinished(id)
		return false
	}
	return c.start(id, l, how)
}

// dropTaken gives up a lease just taken without reading its shard. A pending one is left
// pending rather than released: its previous owner may still be reading, and a peer taking a
// released lease reads at once.
func (s *Subscriber) dropTaken(id string, t lease.Tenure, pending bool) {
	if pending {
		s.log.Info("pending lease left pending", logShard, id)
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

// shardIDs is a sorted list of shard ids.
type shardIDs []string

// has reports whether id is in the list.
func (ids shardIDs) has(id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
