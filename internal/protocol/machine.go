package protocol

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config is what a Machine is built with.
type Config struct {
	Stream string        // the stream's name: the prefix of every row's key
	Owner  string        // WithOwner's name; the owner name is Owner#<16 hex digits of Join.Incarnation>
	TTL    time.Duration // the lease TTL
	// Balance is the balance interval (default 2 × TTL).
	Balance time.Duration
	// ClaimTick is how often the change row is read and the watched peers looked at (default
	// ClaimTick(TTL, TTL): TTL/3, at most a second).
	ClaimTick time.Duration
	// Choose draws the planner's random choices; nil: always the first (the runtime draws at
	// random, so that instances starting together spread out).
	Choose Chooser
}

// The Machine's phases.
type phase int

const (
	phaseIdle      phase = iota // not joined yet
	phaseJoining                // the heartbeat row is being made
	phaseJoined                 // running
	phaseRejoining              // the heartbeat row was taken over: waiting for a Join
	phaseClosing                // Close: draining and releasing
	phaseDropping               // Close: every lease released; the heartbeat row is being dropped
	phaseClosed                 // done (Closed or Failed sent)
)

var phaseNames = [...]string{"idle", "joining", "joined", "rejoining", "closing", "dropping", "closed"}

// Machine is one instance's side of the lease protocol, as a state machine with no I/O: see the
// package doc. It is not safe for concurrent use: its interpreter steps it from one goroutine
// (or under a lock).
type Machine struct {
	cfg    Config
	nextID OpID
	phase  phase
	now    Instant // the instant of the Step under way

	name string // the owner name ("" before a join, and once the row was found taken over)
	hb   Tenure // the heartbeat row's holding
	d    Deadline

	peers   Peers
	pending PendingNotes
	ops     map[OpID]*opCtx

	shards   map[string]Shard // the stream's shards, as last listed; nil: not listed yet
	held     map[string]*heldShard
	finished map[string]bool  // shards found read to their end
	readTop  map[string]int64 // per shard, the highest counter this instance read under
	endedAt  map[string]time.Duration

	// Timers, on the monotonic clock.
	nextRenew, nextClaim, nextBalance time.Duration
	renewing, confirming, checking    bool // a renewal, a confirmation, a claim tick's look in flight
	// noted: a renewal landed since the join, so the heartbeat row notes this instance's TTL
	// (ttlnote.go); claim rounds take nothing before.
	noted bool

	round      *round // the claim round under way
	roundSeq   int    // the rounds started
	again      bool   // another round was asked for meanwhile
	againBal   bool   // and it balances
	lastRound  roundResult
	live       map[string]bool // the owners live at the last round (PlanBalance's wasLive)
	orphanAt   OrphanClock     // per orphan, the send of the first round that found it free
	watched    []string        // the owners the last claim tick watched
	reaping    map[string]bool // owners whose row is being taken over
	joinSent   time.Duration   // the send of the joining write
	closeOuts  int             // releases in flight (Close waits for them)
	dropCount  int64           // Close: the heartbeat row's counter the release is at
	armedAt    time.Duration   // the last Arm sent; -1: none
	stoppedWhy string          // why the Machine stopped, or why the last join failed
	rejoins    int             // joins anew after the heartbeat row was taken over
}

// roundResult is what the last claim round saw, for the claim tick (watch, in the root).
type roundResult struct {
	read   bool  // a round read the table, and nothing in it was unsure
	change int64 // the change row's counter it read
	hungry bool  // it left this instance below its share, or wanting free leases
}

// heldShard is a shard held here.
type heldShard struct {
	tenure     Tenure
	state      LocalState
	bindAt     time.Duration // a pending lease binds at this instant, once waitKnown
	waitTTL    time.Duration // the TTL a pending lease's wait counts in (TakeHow.WaitTTL)
	waitKnown  bool
	binding    bool // a bind in flight
	announce   bool // a bump for this steal is in flight
	order      int64
	endSent    bool // a SHARD_END checkpoint was sent in this holding
	ckpts      int  // checkpoint writes in flight
	stopped    bool // the reader stopped (ReaderStopped)
	finished   bool // it stopped at the shard's end
	releasing  bool
	checkpoint string
}

// New returns the Machine of one instance, not joined yet: step it with Join.
func New(cfg Config) *Machine {
	if cfg.Balance <= 0 {
		cfg.Balance = 2 * cfg.TTL
	}
	if cfg.ClaimTick <= 0 {
		cfg.ClaimTick = ClaimTick(cfg.TTL, cfg.TTL)
	}
	if cfg.Choose == nil {
		cfg.Choose = firstChoice{}
	}
	return &Machine{cfg: cfg, d: NewDeadline(cfg.TTL), ops: map[OpID]*opCtx{}, held: map[string]*heldShard{},
		finished: map[string]bool{}, readTop: map[string]int64{}, endedAt: map[string]time.Duration{},
		live: map[string]bool{}, orphanAt: OrphanClock{}, reaping: map[string]bool{}, armedAt: -1}
}

// firstChoice always draws 0.
type firstChoice struct{}

func (firstChoice) IntN(int) int { return 0 }

// epoch anchors the monotonic instants as times for the pieces that take time.Time (Deadline,
// Peers, PendingNotes): only differences count.
var epoch = time.Unix(1<<31, 0)

// at returns the monotonic instant mono as a time.
func at(mono time.Duration) time.Time { return epoch.Add(mono) }

// Owner returns the owner name ("" when not joined).
func (m *Machine) Owner() string { return m.name }

// Step feeds one input, happening at now, and returns what to do. now must not go back from one
// Step to the next. An Arm among the outputs replaces every earlier one.
func (m *Machine) Step(now Instant, in Input) []Output {
	if now.Mono < m.now.Mono {
		now.Mono = m.now.Mono
	}
	m.now = now
	if m.phase == phaseClosed {
		return nil
	}
	var out []Output
	switch in := in.(type) {
	case Join:
		out = m.join(out, in)
	case Tick:
		out = m.tick(out)
	case Answered:
		out = m.answered(out, in)
	case ShardsListed:
		out = m.listed(out, in)
	case Close:
		out = m.close(out)
	case HandBack:
		out = m.handBack(out, in.Shard, "handed back")
	case Checkpointed:
		out = m.checkpointed(out, in)
	case ReaderStopped:
		out = m.readerStopped(out, in)
	}
	return m.arm(out)
}

// MayHandOut reports whether a record of shard may be handed out at now (monotonic), and under
// which holding: the shard is read here (or drains after a hand-back, its reader not stopped
// yet) under that holding and the deadline has not passed.
func (m *Machine) MayHandOut(now time.Duration, shard string) (Tenure, bool) {
	h := m.held[shard]
	if h == nil || h.state != LocalReading && h.state != LocalDraining || h.stopped || h.releasing || !m.d.MayHandOut(at(now)) {
		return Tenure{}, false
	}
	return h.tenure, true
}

// send adds an operation to out, remembering what it is for.
func (m *Machine) send(out []Output, op Op, c *opCtx) []Output {
	m.nextID++
	op.ID = m.nextID
	c.sent = m.now
	c.name = m.name
	m.ops[op.ID] = c
	return append(out, Send{Op: op})
}

// Keys of the stream's rows.
func (m *Machine) leaseKey(shard string) string { return m.cfg.Stream + "/" + shard }
func (m *Machine) ownerKey(owner string) string { return m.cfg.Stream + "/~v2/owner/" + owner }
func (m *Machine) changeKey() string            { return m.cfg.Stream + "/~table/changes" }

// arm appends the Arm of the earliest instant the Machine wants a Tick at.
func (m *Machine) arm(out []Output) []Output {
	if m.phase == phaseClosed {
		return out
	}
	next := time.Duration(-1)
	want := func(t time.Duration) {
		if next < 0 || t < next {
			next = t
		}
	}
	if m.phase == phaseJoined || m.phase == phaseClosing || m.phase == phaseRejoining && m.stoppedWhy != "" {
		want(m.nextRenew)
	}
	if m.phase == phaseJoined {
		want(m.nextClaim)
		want(m.nextBalance)
		if d, ok := m.peers.NextReap(m.name, m.watched, m.lastRound.hungry, at(m.now.Mono), m.cfg.TTL, m.cfg.ClaimTick); ok {
			want(m.now.Mono + d)
		}
	}
	if len(m.held) > 0 && !m.d.IsPassed() && !m.d.resigned {
		want(m.d.Until().Sub(epoch))
	}
	for _, h := range m.held {
		if h.state == LocalStarting && h.waitKnown && !h.binding {
			want(h.bindAt)
		}
	}
	if next < 0 {
		return out
	}
	next = max(next, m.now.Mono)
	if next == m.armedAt {
		return out
	}
	m.armedAt = next
	return append(out, Arm{At: next})
}

// tick looks at the timers.
func (m *Machine) tick(out []Output) []Output {
	now := m.now.Mono
	m.armedAt = -1
	if (m.phase == phaseJoined || m.phase == phaseClosing) && now >= m.nextRenew {
		m.nextRenew = now + RenewEvery(m.cfg.TTL)
		out = m.renew(out)
		if m.phase == phaseJoined {
			out = m.confirm(out)
		}
	}
	if m.phase == phaseRejoining && m.stoppedWhy != "" && now >= m.nextRenew {
		m.stoppedWhy = ""
		out = append(out, Rejoin{}) // the last join anew failed: another, under a new name
	}
	out = m.checkDeadline(out)
	if m.phase != phaseJoined {
		return out
	}
	for _, id := range sortedKeys(m.held) {
		h := m.held[id]
		if h.state == LocalStarting && h.waitKnown && !h.binding && now >= h.bindAt {
			out = m.bind(out, id, h)
		}
	}
	if now >= m.nextBalance {
		m.nextBalance = now + m.cfg.Balance
		m.nextClaim = now + m.cfg.ClaimTick
		return m.startRound(out, true)
	}
	reapDue := false
	if d, ok := m.peers.NextReap(m.name, m.watched, m.lastRound.hungry, at(now), m.cfg.TTL, m.cfg.ClaimTick); ok && d <= 0 {
		reapDue = true
	}
	if now >= m.nextClaim || reapDue || m.peerDue(now) {
		if now >= m.nextClaim {
			m.nextClaim = now + m.cfg.ClaimTick
		}
		out = m.claimTick(out)
	}
	return out
}

// peerDue reports whether a watched row has reached ReapAfter or SilentAfter (NextReap finds
// only those still ahead).
func (m *Machine) peerDue(now time.Duration) bool {
	for _, o := range m.watched {
		b := m.peers.Seen[o]
		if b == nil || b.Gone(o) {
			continue
		}
		if s, ttl := b.StillFor(at(now)), b.TTL(m.cfg.TTL); s >= ReapAfter(ttl) || !b.Missed && s >= SilentAfter(ttl) {
			return !m.reaping[o] && !m.checking
		}
	}
	return false
}

// checkDeadline loses every shard once the deadline has passed, then lets it move on.
func (m *Machine) checkDeadline(out []Output) []Output {
	if m.d.resigned || !m.d.Fire(at(m.now.Mono)) {
		return out
	}
	out = m.loseAll(out, "the deadline passed")
	m.d.Restart(at(m.now.Mono))
	return out
}

// applyDeadline acts on what a renewal or a confirmation did to the deadline.
func (m *Machine) applyDeadline(out []Output, ch Change) []Output {
	if ch == Passed {
		return m.checkDeadline(out)
	}
	return out
}

// loseAll loses every shard held here: readers stop, nothing is written.
func (m *Machine) loseAll(out []Output, why string) []Output {
	for _, id := range sortedKeys(m.held) {
		out = m.lose(out, id, why)
	}
	return out
}

// lose gives up shard id at once: its reader stops with no checkpoint; nothing more is written
// under its holding.
func (m *Machine) lose(out []Output, id, why string) []Output {
	h := m.held[id]
	if h == nil {
		return out
	}
	out = m.ended(out, id)
	if h.state == LocalStarting {
		return out // never read: nothing to stop
	}
	return append(out, StopReading{Shard: id, Tenure: h.tenure, Clean: false, Why: why})
}

// ended forgets shard id, whose life here is over, and reads the table again (as the root's
// coordinator does when a shard's life ends); closing, the heartbeat row is dropped once the
// last shard's life ended.
func (m *Machine) ended(out []Output, id string) []Output {
	delete(m.held, id)
	m.endedAt[id] = m.now.Mono
	return m.closeIfDrained(m.startRound(out, false))
}

func sortedKeys[V any](mp map[string]V) []string {
	ks := make([]string, 0, len(mp))
	for k := range mp {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// Clone returns a deep copy of m, for a search that branches.
func (m *Machine) Clone() *Machine {
	c := *m
	c.pending = m.pending.Clone()
	c.peers = m.peers.Clone()
	c.ops = make(map[OpID]*opCtx, len(m.ops))
	for id, o := range m.ops {
		oc := *o
		c.ops[id] = &oc
	}
	if m.shards != nil {
		c.shards = make(map[string]Shard, len(m.shards))
		for id, s := range m.shards {
			s.Parents = slices.Clone(s.Parents)
			c.shards[id] = s
		}
	}
	c.held = make(map[string]*heldShard, len(m.held))
	for id, h := range m.held {
		hc := *h
		c.held[id] = &hc
	}
	c.finished = cloneMap(m.finished)
	c.readTop = cloneMap(m.readTop)
	c.endedAt = cloneMap(m.endedAt)
	c.live = cloneMap(m.live)
	c.orphanAt = cloneMap(m.orphanAt)
	c.reaping = cloneMap(m.reaping)
	c.watched = slices.Clone(m.watched)
	if m.round != nil {
		c.round = m.round.clone()
	}
	return &c
}

func cloneMap[K comparable, V any](mp map[K]V) map[K]V {
	out := make(map[K]V, len(mp))
	for k, v := range mp {
		out[k] = v
	}
	return out
}

// String returns a canonical dump of the Machine's state: keys sorted, no pointers, so that two
// Machines in the same state print the same text (for hashing and dedup in a search). Instants
// print as monotonic nanoseconds.
func (m *Machine) String() string {
	var b strings.Builder
	w := func(parts ...string) {
		b.WriteString(strings.Join(parts, " "))
		b.WriteByte('\n')
	}
	d := func(t time.Duration) string { return strconv.FormatInt(int64(t), 10) }
	tm := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return d(t.Sub(epoch))
	}
	i64 := func(n int64) string { return strconv.FormatInt(n, 10) }
	bl := strconv.FormatBool
	w("phase", phaseNames[m.phase], "now", d(m.now.Mono), "next_op", i64(int64(m.nextID)))
	w("owner", strconv.Quote(m.name), "hb", strconv.Quote(m.hb.Owner), i64(m.hb.Counter))
	w("deadline", tm(m.d.beatSent), tm(m.d.attempted), tm(m.d.confirmed), i64(m.d.verified), bl(m.d.passed), bl(m.d.resigned), tm(m.d.until))
	w("timers", d(m.nextRenew), d(m.nextClaim), d(m.nextBalance), bl(m.renewing), bl(m.confirming), bl(m.checking), d(m.armedAt), "noted", bl(m.noted))
	w("last_round", strconv.Itoa(m.roundSeq), bl(m.lastRound.read), i64(m.lastRound.change), bl(m.lastRound.hungry), "again", bl(m.again), bl(m.againBal))
	w("join", d(m.joinSent), strconv.Itoa(m.rejoins), "close", strconv.Itoa(m.closeOuts), i64(m.dropCount), strconv.Quote(m.stoppedWhy))
	for _, o := range sortedKeys(m.peers.Seen) {
		s := m.peers.Seen[o]
		w("peer", strconv.Quote(o), rowString(s.Row), tm(s.Since), tm(s.Read), bl(s.Missed), tm(s.First))
	}
	for _, id := range sortedKeys(m.pending.notes) {
		n := m.pending.notes[id]
		w("pending", id, strconv.Quote(n.t.Owner), i64(n.t.Counter), tm(n.seen), i64(n.base), bl(n.hasBase), tm(n.moved), bl(n.bumped))
	}
	if m.shards != nil {
		for _, id := range sortedKeys(m.shards) {
			s := m.shards[id]
			w("shard", id, strings.Join(s.Parents, ","), bl(s.Closed))
		}
	}
	for _, id := range sortedKeys(m.held) {
		h := m.held[id]
		w("held", id, strconv.Quote(h.tenure.Owner), i64(h.tenure.Counter), strconv.Itoa(int(h.state)), d(h.bindAt), bl(h.waitKnown), d(h.waitTTL),
			bl(h.binding), bl(h.announce), i64(h.order), bl(h.endSent), strconv.Itoa(h.ckpts), bl(h.stopped), bl(h.finished), bl(h.releasing), strconv.Quote(h.checkpoint))
	}
	for _, id := range sortedKeys(m.finished) {
		w("finished", id, bl(m.finished[id]))
	}
	for _, id := range sortedKeys(m.readTop) {
		w("read_top", id, i64(m.readTop[id]))
	}
	for _, id := range sortedKeys(m.endedAt) {
		w("ended", id, d(m.endedAt[id]))
	}
	for _, o := range sortedKeys(m.live) {
		w("live", strconv.Quote(o))
	}
	for _, id := range sortedKeys(m.orphanAt) {
		w("orphan", id, d(m.orphanAt[id].Sub(epoch)))
	}
	for _, o := range sortedKeys(m.reaping) {
		w("reaping", strconv.Quote(o))
	}
	w("watched", strconv.Quote(strings.Join(m.watched, "\x00")))
	if m.round != nil {
		b.WriteString(m.round.String())
	}
	ids := make([]OpID, 0, len(m.ops))
	for id := range m.ops {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		w("op", i64(int64(id)), m.ops[id].String())
	}
	return b.String()
}

// rowString prints a row canonically.
func rowString(r Row) string {
	exp := "-"
	if !r.Expiry.IsZero() {
		exp = strconv.FormatInt(r.Expiry.UnixNano(), 10)
	}
	return strings.Join([]string{strconv.Quote(r.Key), strconv.Quote(r.Owner), exp, strconv.FormatInt(r.Counter, 10),
		strconv.Quote(r.Checkpoint), strconv.FormatBool(r.Finished), strconv.Quote(r.Note)}, " ")
}
