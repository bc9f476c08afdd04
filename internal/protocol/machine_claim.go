package protocol

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// A claim round reads the change row, lists the stream's rows, works out which owners stopped
// (reading the rows its listing lacks, taking over those that stood still for ReapAfter), loses
// the shards whose leases show another holding (and confirms the others), takes up the leases
// the table shows as this instance's that it does not read, takes free leases and stopped
// owners' up to its share (PlanTake), then hands back and steals (PlanBalance).

// The stages of a claim round.
type stage int

const (
	stChange    stage = iota + 1 // reading the change row
	stList                       // listing the stream's rows
	stOwners                     // reading owners' rows the listing lacked, taking silent ones over
	stReconcile                  // taking up its own leases
	stTakes                      // taking what the plan wants
)

// round is one claim round under way.
type round struct {
	id       int
	balance  bool
	stage    stage
	sent     Instant // the change row's read: the round's confirmation instant
	change   int64
	listSent Instant
	leases   map[string]Row // shard leases by shard id
	beats    map[string]Row // heartbeat rows by owner
	readable []string
	keep     map[string]bool // the owners the round concerns
	unknown  map[string]bool // owners whose row could not be read: taken for live
	dead     map[string]bool
	unsure   bool
	waiting  int // operations the stage waits for
	in       *BalanceIn
	want     int
	taken    map[string]bool
}

func (r *round) clone() *round {
	c := *r
	c.leases, c.beats = cloneMap(r.leases), cloneMap(r.beats)
	c.readable = slices.Clone(r.readable)
	c.keep, c.unknown, c.dead, c.taken = cloneMap(r.keep), cloneMap(r.unknown), cloneMap(r.dead), cloneMap(r.taken)
	if r.in != nil {
		in := *r.in
		in.Readable = slices.Clone(r.in.Readable)
		in.Leases, in.Orphans, in.Overdue = cloneMap(r.in.Leases), cloneMap(r.in.Orphans), cloneMap(r.in.Overdue)
		in.Beats, in.Local, in.Taken = cloneMap(r.in.Beats), cloneMap(r.in.Local), cloneMap(r.in.Taken)
		c.in = &in
	}
	return &c
}

func (r *round) String() string {
	var b strings.Builder
	b.WriteString("round " + strconv.Itoa(r.id) + " " + strconv.FormatBool(r.balance) + " " + strconv.Itoa(int(r.stage)) + " " +
		strconv.FormatInt(int64(r.sent.Mono), 10) + " " + strconv.FormatInt(r.change, 10) + " " + strconv.FormatInt(int64(r.listSent.Mono), 10) +
		" " + strconv.FormatBool(r.unsure) + " " + strconv.Itoa(r.waiting) + " " + strconv.Itoa(r.want) + "\n")
	for _, id := range sortedKeys(r.leases) {
		b.WriteString("round-lease " + id + " " + rowString(r.leases[id]) + "\n")
	}
	for _, o := range sortedKeys(r.beats) {
		b.WriteString("round-beat " + strconv.Quote(o) + " " + rowString(r.beats[o]) + "\n")
	}
	b.WriteString("round-readable " + strings.Join(r.readable, ",") + "\n")
	for _, kv := range []struct {
		name string
		set  map[string]bool
	}{{"keep", r.keep}, {"unknown", r.unknown}, {"dead", r.dead}, {"taken", r.taken}} {
		b.WriteString("round-" + kv.name)
		for _, k := range sortedKeys(kv.set) {
			b.WriteString(" " + strconv.Quote(k) + "=" + strconv.FormatBool(kv.set[k]))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// listed records the stream's shards; a changed listing starts a claim round.
func (m *Machine) listed(out []Output, l ShardsListed) []Output {
	next := make(map[string]Shard, len(l.Shards))
	for _, s := range l.Shards {
		s.Parents = slices.Clone(s.Parents)
		next[s.ID] = s
	}
	changed := m.shards == nil || len(next) != len(m.shards)
	for id, s := range next {
		if o, ok := m.shards[id]; !ok || o.Closed != s.Closed || !slices.Equal(o.Parents, s.Parents) {
			changed = true
		}
	}
	m.shards = next
	if changed && m.phase == phaseJoined {
		out = m.startRound(out, false)
	}
	return out
}

// claimTick reads the lease table when it must (the root's watch.stale): the last round failed
// or left this instance wanting leases, a watched owner's row is gone or stood still (taken
// over when due), or the change row moved; otherwise the change row's read confirms the leases.
func (m *Machine) claimTick(out []Output) []Output {
	if m.round != nil || m.checking {
		return out
	}
	if !m.lastRound.read || m.lastRound.hungry {
		return m.startRound(out, false)
	}
	out, changed := m.watchPeers(out)
	if changed {
		return m.startRound(out, false)
	}
	m.checking = true
	return m.send(out, Op{Kind: OpRead, Key: m.changeKey()}, &opCtx{purpose: pTickChange})
}

func (m *Machine) tickChangeAnswered(out []Output, c *opCtx, oc Outcome, row Row) []Output {
	if c.name != m.name {
		return out
	}
	m.checking = false
	if m.phase != phaseJoined {
		return out
	}
	if oc == Applied {
		m.pending.ChangeRead(at(c.sent.Mono), at(m.now.Mono), row.Counter)
	}
	out, bumped := m.bumpPending(out)
	if bumped || oc != Applied || row.Counter != m.lastRound.change {
		return m.startRound(out, false)
	}
	ok, ch := m.d.Confirm(at(c.sent.Mono), row.Counter, at(m.now.Mono))
	_ = ok
	return m.applyDeadline(out, ch)
}

// bumpPending moves the change row when a pending lease whose owner looks silent has no move
// known after it, and reports whether it did: the table is then read again.
func (m *Machine) bumpPending(out []Output) ([]Output, bool) {
	now := at(m.now.Mono)
	if !m.pending.ToBump(func(o string) bool { return m.peers.Suspect(m.name, o, now, m.cfg.TTL) }) {
		return out, false
	}
	return m.bump(out, ""), true
}

// startRound starts a claim round, or asks for one more after the one under way.
func (m *Machine) startRound(out []Output, balance bool) []Output {
	if m.phase != phaseJoined || m.shards == nil {
		return out
	}
	if m.round != nil {
		m.again, m.againBal = true, m.againBal || balance
		return out
	}
	m.roundSeq++
	m.round = &round{id: m.roundSeq, balance: balance, stage: stChange}
	return m.send(out, Op{Kind: OpRead, Key: m.changeKey()}, &opCtx{purpose: pRoundChange, round: m.roundSeq})
}

// endRound records what round r saw (nil view: it failed) and starts the one asked for
// meanwhile.
func (m *Machine) endRound(out []Output, ok bool, hungry bool) []Output {
	r := m.round
	m.round = nil
	if ok {
		m.lastRound = roundResult{read: !r.unsure, change: r.change, hungry: hungry}
	} else {
		m.lastRound.read = false
	}
	if m.again {
		bal := m.againBal
		m.again, m.againBal = false, false
		out = m.startRound(out, bal)
	}
	return out
}

// roundAnswered continues the round the answer belongs to.
func (m *Machine) roundAnswered(out []Output, c *opCtx, a Answered) []Output {
	r := m.round
	if r == nil || r.id != c.round || c.name != m.name || m.phase != phaseJoined {
		return out
	}
	switch c.purpose {
	case pRoundChange:
		if a.Outcome != Applied {
			return m.endRound(out, false, false)
		}
		r.sent, r.change = c.sent, 0
		if len(a.Rows) > 0 {
			r.change = a.Rows[0].Counter
		}
		m.pending.ChangeRead(at(c.sent.Mono), at(m.now.Mono), r.change)
		r.stage = stList
		return m.send(out, Op{Kind: OpList, Key: m.cfg.Stream + "/"}, &opCtx{purpose: pRoundList, round: r.id})
	case pRoundList:
		if a.Outcome != Applied {
			return m.endRound(out, false, false)
		}
		r.listSent = c.sent
		return m.look(out, r, a.Rows)
	default: // pOwnerRead
		if a.Outcome != Applied {
			r.unsure = true
			r.unknown[c.owner] = true
		} else {
			row := Row{}
			if len(a.Rows) > 0 {
				row = a.Rows[0]
			}
			m.peers.Observe(c.owner, row, at(m.now.Mono))
		}
		r.waiting--
		return m.settle(out, r)
	}
}

// look works out the round's view from the listing: shard leases, heartbeat rows, readable
// shards; notes the pending leases; then reads the rows of the owners the leases name that the
// listing lacks.
func (m *Machine) look(out []Output, r *round, rows []Row) []Output {
	prefix := m.cfg.Stream + "/"
	r.leases, r.beats = map[string]Row{}, map[string]Row{}
	for _, row := range rows {
		id, ok := strings.CutPrefix(row.Key, prefix)
		if !ok {
			continue
		}
		if owner, ok := strings.CutPrefix(id, "~v2/owner/"); ok {
			r.beats[owner] = row
			continue
		}
		if strings.HasPrefix(id, "~") || strings.HasPrefix(id, "kinesub-lease-protocol-") {
			continue
		}
		r.leases[id] = row
	}
	recv := at(m.now.Mono)
	m.pending.Listed(r.leases, r.listSent.Wall, recv)
	for _, id := range sortedKeys(m.shards) {
		if r.leases[id].Finished {
			m.finished[id] = true
			continue
		}
		if BlockingParent(m.shards[id].Parents, m.isListed, r.leases) == "" {
			r.readable = append(r.readable, id)
		}
	}
	r.keep, r.unknown, r.dead = map[string]bool{}, map[string]bool{}, map[string]bool{}
	for owner, hb := range r.beats {
		r.keep[owner] = true
		m.peers.Observe(owner, hb, recv)
	}
	r.stage = stOwners
	for _, id := range sortedKeys(r.leases) {
		owner := r.leases[id].Owner
		if owner == "" || owner == m.name || r.keep[owner] {
			continue
		}
		r.keep[owner] = true
		r.waiting++
		out = m.send(out, Op{Kind: OpRead, Key: m.ownerKey(owner)}, &opCtx{purpose: pOwnerRead, round: r.id, owner: owner})
	}
	return m.settle(out, r)
}

// settle, once every owner's row was read, works out which owners stopped (their row gone,
// released or taken over), and takes over those that stood still for ReapAfter; then the round
// goes on.
func (m *Machine) settle(out []Output, r *round) []Output {
	if r.stage != stOwners || r.waiting > 0 {
		return out
	}
	now := at(m.now.Mono)
	for _, owner := range sortedKeys(r.keep) {
		b := m.peers.Seen[owner]
		if owner == m.name || r.unknown[owner] && b == nil {
			continue // never read, and this round's read failed: nothing says it stopped
		}
		switch Judge(owner, b, now, m.cfg.TTL) {
		case Gone:
			r.dead[owner] = true
		case Reap:
			if !m.reaping[owner] {
				r.waiting++
				out = m.reap(out, owner, b, r.id)
			}
		}
	}
	if r.waiting > 0 {
		return out // reapAnswered comes back with each
	}
	return m.afterOwners(out, r)
}

// reaped records, for round rid, that owner's row was taken over (or found gone).
func (m *Machine) reaped(out []Output, rid int, owner string, dead bool) []Output {
	r := m.round
	if r == nil || r.id != rid || r.stage != stOwners {
		return out
	}
	if dead {
		r.dead[owner] = true
	}
	r.waiting--
	if r.waiting > 0 {
		return out
	}
	return m.afterOwners(out, r)
}

// afterOwners checks the shards held here against the listing, then takes up its own leases.
func (m *Machine) afterOwners(out []Output, r *round) []Output {
	r.keep[m.name] = true
	m.peers.Forget(r.keep)
	// checkHeld: a shard whose lease shows another holding is lost at once.
	for _, id := range sortedKeys(m.held) {
		if ShowsLoss(r.leases[id], m.held[id].tenure) {
			out = m.lose(out, id, "taken over by another owner")
		}
	}
	out = m.applyDeadline(out, m.d.Read(at(r.sent.Mono), r.change, at(m.now.Mono)))
	out, _ = m.bumpPending(out)
	if !m.d.MayHandOut(at(m.now.Mono)) {
		return m.endRound(out, true, false) // it takes nothing until its shards were given up
	}
	if !m.noted {
		return m.endRound(out, true, true) // its row does not note its TTL yet: a later round takes
	}
	// reconcile: what the table shows as this instance's and it does not read.
	r.stage = stReconcile
	takeUp, release := Reconcile(r.leases, m.name, func(id string) bool {
		at, ended := m.endedAt[id]
		return m.held[id] != nil || ended && at >= r.sent.Mono
	}, r.readable)
	for _, id := range release {
		l := r.leases[id]
		out = m.send(out, Op{Kind: OpRelease, Key: m.leaseKey(id), Owner: l.Owner, Counter: l.Counter},
			&opCtx{purpose: pRelease, shard: id, counter: l.Counter})
		m.closeOuts++
	}
	for _, id := range takeUp {
		how := m.pendingHow(r, id, HowToTake(r.leases[id], m.name, r.dead, r.listSent.Wall))
		r.waiting++
		out = m.take(out, id, how, r.id)
	}
	if r.waiting > 0 {
		return out
	}
	return m.planTakes(out, r)
}

// pendingHow completes a pending take: when a move after the listed holding was first known.
func (m *Machine) pendingHow(r *round, id string, how TakeHow) takeHow {
	if how.Pending {
		how.After = m.pending.MovedAfter(id, r.leases[id].Tenure())
		how.WaitTTL = m.peers.LongestTTL(m.cfg.TTL)
	}
	return takeHow(how)
}

// planTakes takes free leases and stopped owners' up to the share.
func (m *Machine) planTakes(out []Output, r *round) []Output {
	planned, orphans := Planned(r.leases, r.dead)
	r.in = &BalanceIn{Owner: m.name, Now: r.listSent.Wall, Readable: r.readable, Leases: planned, Orphans: orphans,
		Overdue: m.orphanAt.Overdue(orphans, at(r.sent.Mono), m.cfg.ClaimTick), Beats: m.liveness(r), Local: m.locals(),
		Taken: map[string]bool{}}
	r.taken = map[string]bool{}
	want := PlanTake(r.in, m.cfg.Choose)
	r.want = len(want)
	r.stage = stTakes
	for _, id := range want {
		how := m.pendingHow(r, id, HowToTake(r.leases[id], m.name, r.dead, r.listSent.Wall))
		r.waiting++
		out = m.take(out, id, how, r.id)
	}
	if r.waiting > 0 {
		return out
	}
	return m.balance(out, r)
}

// liveness returns the heartbeat rows balancing counts owners by: one per owner whose row is
// its own, lapsed (an expiry in the past) when it stood still for SilentAfter.
func (m *Machine) liveness(r *round) map[string]Row {
	return m.peers.Beats(m.name, r.dead, at(m.now.Mono), r.listSent.Wall.Add(-time.Millisecond), m.cfg.TTL)
}

// isListed reports whether the last listing shows shard id.
func (m *Machine) isListed(id string) bool {
	_, ok := m.shards[id]
	return ok
}

// locals returns the states of the shards held here.
func (m *Machine) locals() map[string]LocalState {
	out := make(map[string]LocalState, len(m.held))
	for id, h := range m.held {
		out[id] = h.state
	}
	return out
}

// tookFor records, for round rid, the end of a take.
func (m *Machine) tookFor(out []Output, rid int, id string, ok bool) []Output {
	r := m.round
	if r == nil || r.id != rid || (r.stage != stReconcile && r.stage != stTakes) {
		return out
	}
	r.waiting--
	if ok && r.stage == stTakes {
		r.taken[id] = true
	}
	if r.waiting > 0 {
		return out
	}
	if r.stage == stReconcile {
		return m.planTakes(out, r)
	}
	return m.balance(out, r)
}

// balance hands back what is above the share and, on balance rounds, steals one lease.
func (m *Machine) balance(out []Output, r *round) []Output {
	r.in.Local, r.in.Taken = m.locals(), r.taken
	p := PlanBalance(r.in, m.live, r.balance, m.cfg.Choose)
	hungry := r.in.Hungry(r.want, len(r.taken))
	m.live = p.Live
	for _, id := range p.HandBack {
		out = m.handBack(out, id, "handed back for balance")
	}
	if p.Steal != "" {
		how := m.pendingHow(r, p.Steal, TakeHow{Steal: true, Counter: p.Counter, Pending: true})
		out = m.take(out, p.Steal, how, 0)
	}
	return m.endRound(out, true, hungry)
}
