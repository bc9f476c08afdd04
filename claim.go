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
	c.reconcile(ctx, v, sent, me)
	planned := make(map[string]protocol.Row, len(v.leases))
	orphans := map[string]bool{}
	for id, l := range v.leases {
		r := rowOf(l)
		if v.dead[l.Owner] {
			r.Owner, r.Expiry = "", time.Time{} // free: its owner stopped
			orphans[id] = true
		}
		planned[id] = r
	}
	in := &protocol.BalanceIn{Owner: me, Now: v.now, Readable: v.readable, Leases: planned, Orphans: orphans, Overdue: c.overdue(orphans, sent),
		Beats: c.liveness(v, me),
		Local: localsOf(s.table.states(v.readable)), Load: s.env.loads.view(c.peers.Seen)}
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
	if p.Steal != "" && c.take(ctx, p.Steal, c.pendingHow(v, p.Steal, takeHow{steal: true, counter: p.Counter, pending: true})) {
		s.log.Info("lease taken over for balance", logShard, p.Steal, "from", p.Victim)
	}
	return v
}

// overdue returns the orphans this subscriber found free at rounds a claim tick apart at least,
// the first of them read before sent; it forgets the others.
func (c *coordinator) overdue(orphans map[string]bool, sent time.Time) map[string]bool {
	out := map[string]bool{}
	for id := range c.orphanSince {
		if !orphans[id] {
			delete(c.orphanSince, id)
		}
	}
	for id := range orphans {
		since, ok := c.orphanSince[id]
		switch {
		case !ok:
			c.orphanSince[id] = sent
		case sent.Sub(since) >= c.claimEvery:
			out[id] = true
		}
	}
	return out
}

// checkHeld loses every shard held here whose lease the round read shows in another holding
// (stolen, or taken after this subscriber was taken for dead), and, the others being its own,
// confirms them (tenure.go).
func (c *coordinator) checkHeld(v *view, sent time.Time) {
	s := c.s
	ws, _ := s.table.held()
	var lost []*worker
	for _, w := range ws {
		if l, t := v.leases[w.id], w.tenureOf(); l.Tenure() != t && !releasedFrom(l, t) && !boundFrom(l, t) {
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

// boundFrom reports whether l shows the binding of the pending holding t (shard.go, bind): the
// same owner, no expiry, the one counter step the binding adds. A round that lists while the
// binding's answer is on its way sees it.
func boundFrom(l lease.Lease, t lease.Tenure) bool {
	return l.Owner == t.Owner && l.Counter == t.Counter+1 && l.Expiry.IsZero()
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
		switch {
		case owner == me, unknown[owner] && b == nil:
			// Never read, and this round's read failed: nothing says it stopped. (A row read
			// before is judged by that read: absent or taken over, or standing still.)
		case b.Gone(owner):
			v.dead[owner] = true
			if b != nil {
				s.log.Debug("owner stopped: its heartbeat row is not its own", "owner", owner, "row_owner", b.Row.Owner, "row_counter", b.Row.Counter)
			}
		case b.StillFor(time.Now()) >= protocol.ReapAfter(s.cfg.leaseTTL):
			if c.reap(ctx, owner, b) {
				v.dead[owner] = true
			}
		}
	}
	keep[me] = true
	c.peers.Forget(keep)
}

// liveness returns the heartbeat rows balancing counts owners by: one per owner whose row is its
// own, without an expiry (live) or with one in the past (lapsed: it missed a renewal, as this
// subscriber has seen).
func (c *coordinator) liveness(v *view, me string) map[string]protocol.Row {
	beats := map[string]protocol.Row{}
	now := time.Now()
	for owner, b := range c.peers.Seen {
		if owner == me || b.Gone(owner) || v.dead[owner] {
			continue
		}
		l := protocol.Row{Key: b.Row.Key, Owner: owner, Counter: b.Row.Counter}
		if b.StillFor(now) >= protocol.SilentAfter(c.s.cfg.leaseTTL) {
			l.Expiry = v.now.Add(-time.Millisecond)
		}
		beats[owner] = l
	}
	return beats
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
	local := s.table.states(v.readable)
	var ids []string
	for id, l := range v.leases {
		if l.Owner != me {
			continue
		}
		if _, ok := local[id]; ok || s.table.endedSince(id, sent) {
			continue
		}
		if l.Checkpoint.Sequence == lease.ShardEnd {
			if !s.table.holds(id) {
				s.releaseKey(id, l.Tenure())
			}
			continue
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		if !v.readable.has(id) {
			continue
		}
		s.log.Info("lease held in the table but not read here: taken up", logShard, id)
		l := v.leases[id]
		c.take(ctx, id, c.pendingHow(v, id, takeHow{own: true, counter: l.Counter, pending: pendingAt(l, v.now)}))
	}
}

// takeHow is how a lease is taken: Acquire (free; own: already this subscriber's), Steal at
// counter (an orphan, or with pending a live owner's for balance, or a pending lease whose
// owner stopped). A pending take is read only stealWait after the change row moved (shard.go,
// awaitStart).
type takeHow struct {
	steal bool
	// counter is the lease's counter as the listing showed it: Steal's condition, and for
	// every take a floor. The take's write adds one to the counter, so a holding read back
	// at or below it is an older one, perhaps one this subscriber read under before (see
	// take).
	counter int64
	pending bool
	own     bool
	// after, for a pending take, is when a change-row move was first known to have landed
	// after the pending holding the listing showed (pending.go); zero when none is.
	after time.Time
	// victim, for a pending steal, is the holder its wait protects, noted on the lease
	// (pending.go); zero when not known.
	victim lease.Tenure
}

// howToTake says how to take the lease of shard id, which the planner (protocol.PlanTake) chose.
func (c *coordinator) howToTake(v *view, id, me string) takeHow {
	l := v.leases[id]
	switch {
	case l.Owner == "":
		return takeHow{counter: l.Counter}
	case l.Owner == me:
		return c.pendingHow(v, id, takeHow{own: true, counter: l.Counter, pending: pendingAt(l, v.now)})
	case v.dead[l.Owner]:
		return c.pendingHow(v, id, takeHow{steal: true, counter: l.Counter, pending: pendingAt(l, v.now)})
	}
	return takeHow{counter: l.Counter} // shown free to the planner but held: the Acquire fails
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
	if how.pending {
		ttl = pendingTTL
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	defer cancel()
	var ok bool
	var err error
	note, noted := noteVictim(how.counter+1, how.victim)
	switch {
	case how.steal && how.pending && noted:
		ok, err = s.cfg.store.StealNote(cctx, key, me, how.counter, ttl, note)
	case how.steal:
		ok, err = s.cfg.store.Steal(cctx, key, me, how.counter, ttl)
	default:
		ok, err = s.cfg.store.Acquire(cctx, key, me, ttl)
	}
	if err != nil && ctx.Err() == nil {
		op := OpAcquire
		if how.steal {
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
	case l.Owner != me || pendingAt(l, time.Now()) != how.pending:
		return false
	case !ok && how.steal && l.Counter != how.counter+1:
		return false // ours from another write: a later round takes it up
	case l.Counter <= how.counter:
		// This take's write did not land (or not yet: it may land late): the holding read
		// back is an older one of this subscriber's, whose writes may still be in flight. A
		// late Release or checkpoint of that holding would land in this one, had it the same
		// counter. A later round takes the lease up with a write of its own.
		return false
	}
	if how.pending {
		s.cfg.probes.at("stolen", id, l.Tenure())
	}
	if l.Checkpoint.Sequence == lease.ShardEnd {
		s.releaseKey(id, l.Tenure())
		s.table.markFinished(id)
		return false
	}
	return c.start(id, l, how.pending, how.after)
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
