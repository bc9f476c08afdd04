package protosim

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gostream/kinesub/internal/protocol"
)

// The fleet is what the simulator and the explorer share: the instances, the table, the
// Kinesis model, the events on their way and the checker. The simulator takes the events in
// the order of their instants, drawing every delay and fault from its seeded source; the
// explorer takes them in every order.

type evKind uint8

const (
	evApply  evKind = iota + 1 // a sent op reaches the table
	evInput                    // an input reaches an instance (answers, listings, reader news)
	evTick                     // an armed tick is due
	evReader                   // simulator: a reader's next hand-out
	evFault                    // simulator: the fault schedule's next draw
	evJoin                     // a slot's next instance joins
	evResume                   // simulator: a pause ends
	evUncut                    // simulator: a cut from the store ends
)

// event is one thing on its way. Events are values, so that a fleet clones by copying.
type event struct {
	at   time.Duration // true time it is due
	seq  uint64
	kind evKind
	slot int
	gen  int // the instance it is for (an instance's events die with it); 0: the slot's next

	op     protocol.Op   // evApply
	sent   time.Duration // evApply: when it was sent
	wall   time.Time     // evApply: the sender's wall clock then
	answer bool          // evApply: answer the sender with the outcome once applied
	late   bool          // evApply: the sender was told Unknown already (applied late, if ever)

	in     protocol.Input // evInput
	shard  string         // evReader
	reader int            // evReader
	canon  string         // the explorer's canonical description, once made
}

// instance is one running machine.
type instance struct {
	core    Core
	shared  bool   // core is shared with a clone of the fleet: copy it before a step
	str     string // core.String(), once made since its last step (the explorer's hash)
	gen     int
	inc     uint64
	joined  time.Duration
	paused  bool
	queue   []event // what reached it during a pause, stepped when it resumes
	cut     bool    // cut off the store: its ops fail, unapplied
	closing bool
	armed   uint64 // the seq of its armed tick's event; 0: none
	armAt   time.Duration
	readers map[string]*reader
}

type readerState uint8

const (
	reading   readerState = iota + 1
	finishing             // read to its end, SHARD_END asked for
	stopping              // told StopReading
)

// reader is one shard being read by an instance, as the Kinesis side sees it.
type reader struct {
	id       int
	tenure   protocol.Tenure
	start    int64
	pos      int64 // the last record handed out
	cp       int64 // the last checkpoint asked for
	state    readerState
	await    protocol.OpID // the checkpoint write whose answer precedes ReaderStopped
	awaiting bool
	finished bool
	last     time.Duration // its last input's instant: its inputs reach the machine in order
}

// readerInput sends the machine an input from the reader, after the reader's earlier ones.
func (f *fleet) readerInput(slot int, inst *instance, r *reader, d time.Duration, in protocol.Input) {
	at := max(f.now+d, r.last)
	r.last = at
	f.push(event{at: at, kind: evInput, slot: slot, gen: inst.gen, in: in})
}

// kinesis is the stream: its shards, the last record of each closed one, and the highest
// record any holding handed out of each.
type kinesis struct {
	shards []protocol.Shard
	end    map[string]int64
	top    map[string]int64
	next   int
}

func (k *kinesis) clone() *kinesis {
	c := &kinesis{shards: append([]protocol.Shard(nil), k.shards...), end: map[string]int64{}, top: map[string]int64{}, next: k.next}
	for s, v := range k.end {
		c.end[s] = v
	}
	for s, v := range k.top {
		c.top[s] = v
	}
	return c
}

func (k *kinesis) add(parents ...string) string {
	id := fmt.Sprintf("shardId-%012d", k.next)
	k.next++
	k.shards = append(k.shards, protocol.Shard{ID: id, Parents: parents})
	return id
}

func (k *kinesis) shard(id string) (protocol.Shard, bool) {
	for _, s := range k.shards {
		if s.ID == id {
			return s, true
		}
	}
	return protocol.Shard{}, false
}

// listing is a copy of the shards for a ShardsListed input.
func (k *kinesis) listing() []protocol.Shard {
	out := make([]protocol.Shard, len(k.shards))
	for i, s := range k.shards {
		out[i] = s
		out[i].Parents = append([]string(nil), s.Parents...)
	}
	return out
}

// fleet is one run's whole state.
type fleet struct {
	cfg   *Config
	now   time.Duration
	seq   uint64
	hosts []host
	slots []*instance
	gens  int
	incs  []int // joins per slot (the explorer's incarnations)
	table *table
	kin   *kinesis
	chk   *checker
	queue []event

	rng       *rand.Rand // the simulator's one source; nil in the explorer
	faulty    bool       // store faults drawn (simulator, until the quiet spell)
	log       *eventLog  // nil: not logged
	readers   int
	splits    int
	budget    int             // the explorer's faults left on this path
	advances  []time.Duration // the explorer's spells of time let pass at once
	pauses    []time.Duration // and of an instance paused meanwhile
	records   int             // the explorer's new records a holding (ExploreConfig.Records)
	lives     []life          // every instance's life, for the goals (simulator)
	misses    []string
	failovers []time.Duration
	steps     int // machine steps
	events    int // events run
}

// instant is the checker's notion of "at once": the instant in the simulator; in the
// explorer, where deliveries take no time, the event (two holdings that may both hand out
// after one event could hand out at one instant).
func (f *fleet) instant() time.Duration {
	if f.rng == nil {
		return time.Duration(f.events)
	}
	return f.now
}

func (f *fleet) clone() *fleet {
	c := *f
	c.slots = make([]*instance, len(f.slots))
	for i, in := range f.slots {
		if in == nil {
			continue
		}
		// The cores are copied on their next step only: most choices step one instance.
		in.shared = true
		ci := *in
		ci.queue = append([]event(nil), in.queue...)
		ci.readers = make(map[string]*reader, len(in.readers))
		for s, r := range in.readers {
			cr := *r
			ci.readers[s] = &cr
		}
		c.slots[i] = &ci
	}
	c.incs = append([]int(nil), f.incs...)
	c.lives = append([]life(nil), f.lives...)
	c.table = f.table.clone()
	c.kin = f.kin.clone()
	c.chk = f.chk.clone()
	c.queue = append([]event(nil), f.queue...)
	return &c
}

func (f *fleet) key(shard string) string { return f.cfg.Stream + "/" + shard }

// shardOf returns the shard a lease key names, if it is one of the stream's shards.
func (f *fleet) shardOf(key string) (string, bool) {
	s, ok := strings.CutPrefix(key, f.cfg.Stream+"/")
	if !ok {
		return "", false
	}
	_, ok = f.kin.shard(s)
	return s, ok
}

func (f *fleet) logf(format string, args ...any) {
	if f.log != nil {
		f.log.add(f.now, fmt.Sprintf(format, args...))
	}
}

// between draws a duration in [lo, hi] from the simulator's source; the explorer has none and
// takes lo.
func (f *fleet) between(lo, hi time.Duration) time.Duration {
	if f.rng == nil || hi <= lo {
		return lo
	}
	return lo + time.Duration(f.rng.Int64N(int64(hi-lo)+1))
}

func (f *fleet) chance(p float64) bool { return f.rng != nil && p > 0 && f.rng.Float64() < p }

// push schedules e.
func (f *fleet) push(e event) {
	f.seq++
	e.seq = f.seq
	f.queue = append(f.queue, e)
	f.up(len(f.queue) - 1)
}

// The queue is a binary heap by (at, seq), so that the simulator pops the next event; the
// explorer takes any.
func (f *fleet) less(i, j int) bool {
	a, b := &f.queue[i], &f.queue[j]
	return a.at < b.at || a.at == b.at && a.seq < b.seq
}

func (f *fleet) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !f.less(i, p) {
			return
		}
		f.queue[i], f.queue[p] = f.queue[p], f.queue[i]
		i = p
	}
}

func (f *fleet) down(i int) {
	n := len(f.queue)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && f.less(r, l) {
			m = r
		}
		if !f.less(m, i) {
			return
		}
		f.queue[i], f.queue[m] = f.queue[m], f.queue[i]
		i = m
	}
}

// take removes the queue's i-th event.
func (f *fleet) take(i int) event {
	e := f.queue[i]
	n := len(f.queue) - 1
	f.queue[i] = f.queue[n]
	f.queue = f.queue[:n]
	if i < n {
		f.down(i)
		f.up(i)
	}
	return e
}

// live returns the instance an event for (slot, gen) reaches, or nil when it is gone.
func (f *fleet) live(slot, gen int) *instance {
	in := f.slots[slot]
	if in == nil || in.gen != gen {
		return nil
	}
	return in
}

// run handles e at its instant (the explorer may take it later than e.at, never earlier).
func (f *fleet) run(e event) {
	f.events++
	if e.at > f.now {
		f.now = e.at
	}
	switch e.kind {
	case evApply:
		f.apply(e)
	case evInput:
		f.input(e.slot, e.gen, e.in, e)
	case evTick:
		in := f.live(e.slot, e.gen)
		if in == nil || in.armed != e.seq {
			return
		}
		if in.paused { // held, still armed: stepped when the pause ends
			in.queue = append(in.queue, e)
			return
		}
		in.armed = 0
		f.input(e.slot, e.gen, protocol.Tick{}, e)
	case evReader:
		f.readerTurn(e)
	case evJoin:
		f.join(e.slot)
	default:
		f.simEvent(e)
	}
}

// join starts a new instance in slot, under a new incarnation.
func (f *fleet) join(slot int) {
	if f.slots[slot] != nil {
		return
	}
	f.gens++
	inc := f.incarnation(slot)
	var choose protocol.Chooser // nil, not a nil *rand.Rand
	if f.rng != nil {
		choose = f.rng
	}
	in := &instance{core: f.cfg.NewCore(slot, choose), gen: f.gens, inc: inc, joined: f.now, readers: map[string]*reader{}}
	f.slots[slot] = in
	f.lives = append(f.lives, life{gen: in.gen, from: f.now, to: -1})
	f.step(slot, in, protocol.Join{Incarnation: inc})
	f.push(event{at: f.now + f.between(time.Millisecond, 20*time.Millisecond), kind: evInput, slot: slot, gen: in.gen,
		in: protocol.ShardsListed{Shards: f.kin.listing()}})
}

// incarnation draws the next Join's incarnation for slot: from the seeded source in the
// simulator, counted in the explorer (so that states differ by what happened, not by a draw).
func (f *fleet) incarnation(slot int) uint64 {
	f.incs[slot]++
	if f.rng != nil {
		return f.rng.Uint64()
	}
	return uint64(slot+1)<<32 | uint64(f.incs[slot])
}

// input steps the instance with in, or holds it while the instance is paused.
func (f *fleet) input(slot, gen int, in protocol.Input, e event) {
	inst := f.live(slot, gen)
	if inst == nil {
		return
	}
	if inst.paused {
		inst.queue = append(inst.queue, e)
		return
	}
	f.step(slot, inst, in)
}

// step is one step of a machine, with what follows from its outputs.
func (f *fleet) step(slot int, inst *instance, in protocol.Input) {
	f.steps++
	if c, ok := in.(protocol.Checkpointed); ok {
		f.chk.onAck(c.Shard, c.Checkpoint)
	}
	now := f.hosts[slot].instant(f.now)
	if inst.shared {
		inst.core, inst.shared = inst.core.Clone(), false
	}
	inst.str = ""
	outs := inst.core.Step(now, in)
	if f.log != nil {
		f.logf("i%d.%x %s -> %s", slot, inst.inc&0xffff, fmtInput(in), fmtOutputs(outs))
	}
	if a, ok := in.(protocol.Answered); ok {
		for s, r := range inst.readers {
			if r.awaiting && r.await == a.ID {
				r.awaiting = false
				f.stopped(slot, inst, s, r)
			}
		}
	}
	var cpOp map[string]protocol.OpID
	for _, o := range outs {
		switch o := o.(type) {
		case protocol.Send:
			if o.Op.Kind == protocol.OpCheckpoint {
				if cpOp == nil {
					cpOp = map[string]protocol.OpID{}
				}
				cpOp[o.Op.Key] = o.Op.ID
			}
			f.send(slot, inst, o.Op)
		case protocol.StartReading:
			f.startReading(slot, inst, o)
		case protocol.StopReading:
			f.stopReading(slot, inst, o)
		case protocol.Arm:
			at := f.hosts[slot].at(o.At)
			if at < f.now {
				at = f.now
			}
			if inst.armed != 0 && inst.armAt <= at {
				continue // the earlier tick stands; the machine re-arms at each tick
			}
			f.push(event{at: at, kind: evTick, slot: slot, gen: inst.gen})
			inst.armed, inst.armAt = f.seq, at
		case protocol.Rejoin:
			// The heartbeat row was taken over: join anew, under a new incarnation, at once
			// (as the runtime does).
			inst.inc = f.incarnation(slot)
			f.push(event{at: f.now, kind: evInput, slot: slot, gen: inst.gen, in: protocol.Join{Incarnation: inst.inc}})
		case protocol.Closed:
			f.logf("i%d closed", slot)
			f.gone(slot, inst, false)
		case protocol.Failed:
			// Subscribe returned the error: the process starts a new subscriber later.
			f.logf("i%d failed: %s", slot, o.Why)
			f.gone(slot, inst, false)
		}
	}
	// A reader that asked for a checkpoint before stopping waits for its write's answer.
	if c, ok := in.(protocol.Checkpointed); ok {
		if r := inst.readers[c.Shard]; r != nil && r.state != reading {
			if id, ok := cpOp[f.key(c.Shard)]; ok {
				r.await, r.awaiting = id, true
			} else {
				f.stopped(slot, inst, c.Shard, r)
			}
		}
	}
}

// send puts op on its way: to the table and back, or, with a fault, not quite.
func (f *fleet) send(slot int, inst *instance, op protocol.Op) {
	e := event{kind: evApply, slot: slot, gen: inst.gen, op: op, sent: f.now, wall: f.hosts[slot].instant(f.now).Wall, answer: true}
	unknown := func(d time.Duration) {
		f.push(event{at: f.now + d, kind: evInput, slot: slot, gen: inst.gen, in: protocol.Answered{ID: op.ID, Outcome: protocol.Unknown}})
	}
	fl := f.cfg.Faults
	if inst.cut {
		unknown(f.between(fl.Latency, fl.Timeout))
		return
	}
	e.at = f.now + f.between(fl.Latency/4, fl.Latency)
	if f.faulty && f.rng != nil {
		write := op.Kind != protocol.OpList && op.Kind != protocol.OpRead
		switch p := f.rng.Float64(); {
		case p < fl.Refuse:
			unknown(f.between(fl.Latency, fl.Timeout))
			return
		case !write:
		case p < fl.Refuse+fl.Lost:
			e.answer = false
			unknown(f.between(e.at-f.now, fl.Timeout))
		case p < fl.Refuse+fl.Lost+fl.Late:
			e.answer, e.late = false, true
			d := f.between(fl.Latency, fl.Timeout)
			unknown(d)
			e.at = f.now + f.between(d, fl.LateMax)
		}
	}
	f.push(e)
}

// apply performs an op that reached the table, checks the write, and answers its sender.
func (f *fleet) apply(e event) {
	lag := time.Duration(0)
	if e.op.Kind == protocol.OpList && f.faulty {
		lag = f.between(0, f.cfg.Faults.IndexLag)
	}
	out, rows, w := f.table.apply(e.op, e.wall, f.now, lag)
	if f.log != nil {
		late := ""
		if e.late {
			late = " late"
		}
		f.logf("table i%d %s%s: %s", e.slot, fmtOp(e.op), late, fmtOutcome(out))
	}
	if w != nil {
		f.chk.onWrite(f, w)
	}
	if !e.answer {
		return
	}
	d := f.between(f.cfg.Faults.Latency/4, f.cfg.Faults.Latency)
	f.push(event{at: f.now + d, kind: evInput, slot: e.slot, gen: e.gen, in: protocol.Answered{ID: e.op.ID, Outcome: out, Rows: rows}})
}

func parsePos(cp string) int64 {
	if cp == ShardEnd {
		return 1 << 62
	}
	n, err := strconv.ParseInt(cp, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

func fmtPos(n int64) string { return fmt.Sprintf("%08d", n) }

func (f *fleet) startReading(slot int, inst *instance, o protocol.StartReading) {
	f.readers++
	r := &reader{id: f.readers, tenure: o.Tenure, start: parsePos(o.Checkpoint), state: reading}
	r.pos, r.cp = r.start, r.start
	inst.readers[o.Shard] = r
	f.chk.onStart(f, slot, o)
	if o.Checkpoint == ShardEnd {
		r.state, r.finished = finishing, true
		f.stopped(slot, inst, o.Shard, r)
		return
	}
	f.readerNext(slot, inst, o.Shard, r)
}

// readerNext schedules the reader's next turn: in the simulator at a random instant soon, in
// the explorer at once (the explorer asks every reader at every step besides).
func (f *fleet) readerNext(slot int, inst *instance, shard string, r *reader) {
	if r.state != reading {
		return
	}
	if end, ok := f.kin.end[shard]; ok && r.pos >= end {
		r.state, r.finished, r.cp = finishing, true, 1<<62
		f.readerInput(slot, inst, r, f.between(time.Millisecond, 50*time.Millisecond),
			protocol.Checkpointed{Shard: shard, Checkpoint: ShardEnd, Finished: true})
		return
	}
	if f.rng == nil {
		return
	}
	f.push(event{at: f.now + f.between(20*time.Millisecond, f.cfg.HandOutEvery), kind: evReader, slot: slot, gen: inst.gen, shard: shard, reader: r.id})
}

// readerTurn asks the machine whether the reader may hand a record out now, and now and then
// asks for a checkpoint of what it handed out.
func (f *fleet) readerTurn(e event) {
	inst := f.live(e.slot, e.gen)
	if inst == nil {
		return
	}
	if inst.paused {
		inst.queue = append(inst.queue, e)
		return
	}
	r := inst.readers[e.shard]
	if r == nil || r.id != e.reader || r.state != reading {
		return
	}
	f.handOut(e.slot, inst, e.shard, r)
	if r.state == reading && r.pos > r.cp && f.chance(0.3) {
		r.cp = r.pos
		f.readerInput(e.slot, inst, r, f.between(0, 20*time.Millisecond), protocol.Checkpointed{Shard: e.shard, Checkpoint: fmtPos(r.cp)})
	}
	f.readerNext(e.slot, inst, e.shard, r)
}

// handOut hands the reader's next record out if the machine says it may, and checks it.
func (f *fleet) handOut(slot int, inst *instance, shard string, r *reader) bool {
	if end, ok := f.kin.end[shard]; ok && r.pos >= end {
		return false
	}
	t, ok := inst.core.MayHandOut(f.hosts[slot].mono(f.now), shard)
	if !ok {
		return false
	}
	if f.rng != nil || r.pos == r.cp && r.pos-r.start < int64(f.records) {
		// The explorer counts a few new records a holding (positions tell states apart), the
		// next only once the last was asked to be checkpointed.
		r.pos++
	}
	if r.pos > f.kin.top[shard] {
		f.kin.top[shard] = r.pos
	}
	if f.log != nil {
		f.logf("i%d hand-out %s #%d under %s/%d", slot, shard, r.pos, t.Owner, t.Counter)
	}
	f.chk.onHandOut(f, slot, shard, t, r)
	return true
}

func (f *fleet) stopReading(slot int, inst *instance, o protocol.StopReading) {
	r := inst.readers[o.Shard]
	if r == nil || r.tenure != o.Tenure || r.state == stopping {
		return
	}
	r.state = stopping
	if !o.Clean {
		r.finished, r.awaiting = false, false
		f.stopped(slot, inst, o.Shard, r)
		return
	}
	if r.finished {
		return // its SHARD_END is on its way; ReaderStopped follows its answer
	}
	if r.pos > r.cp {
		r.cp = r.pos
		f.readerInput(slot, inst, r, f.between(0, 10*time.Millisecond), protocol.Checkpointed{Shard: o.Shard, Checkpoint: fmtPos(r.cp)})
		return
	}
	f.stopped(slot, inst, o.Shard, r)
}

// stopped tells the machine the reader stopped (soon), and forgets it.
func (f *fleet) stopped(slot int, inst *instance, shard string, r *reader) {
	if inst.readers[shard] != r {
		return
	}
	delete(inst.readers, shard)
	f.readerInput(slot, inst, r, f.between(0, 10*time.Millisecond), protocol.ReaderStopped{Shard: shard, Finished: r.finished})
}

// gone drops an instance: closed, or crashed (its machine dropped mid-flight; its ops still
// on their way may yet land).
func (f *fleet) gone(slot int, inst *instance, crashed bool) {
	f.slots[slot] = nil
	for i := range f.lives {
		if f.lives[i].gen == inst.gen {
			f.lives[i].to = f.now
		}
	}
	if crashed {
		f.chk.onCrash(f, slot, inst)
	}
	if f.rng == nil {
		f.push(event{at: f.now, kind: evJoin, slot: slot})
		return
	}
	if f.now < f.cfg.Duration+f.cfg.Quiet {
		lo, hi := f.cfg.TTL/10, f.cfg.TTL
		if !f.faulty {
			lo, hi = time.Millisecond, f.cfg.TTL/10
		}
		f.push(event{at: f.now + f.between(lo, hi), kind: evJoin, slot: slot})
	}
}

// hash is the fleet's canonical state for the explorer, hashed: every instance's machine
// (String) and readers, the table, the events on their way (as a multiset), the checker's
// memory, the Kinesis side, the budget and the time to a bucket.
func (f *fleet) hash() uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "t%d b%d s%d\n", f.now/f.cfg.Bucket, f.budget, f.splits)
	for i, in := range f.slots {
		if in == nil {
			fmt.Fprintf(h, "slot%d -\n", i)
			continue
		}
		fmt.Fprintf(h, "slot%d inc=%x cut=%t\n", i, in.inc, in.cut)
		if in.str == "" {
			in.str = in.core.String()
		}
		h.Write([]byte(in.str))
		for _, s := range sortedKeys(in.readers) {
			r := in.readers[s]
			fmt.Fprintf(h, " r %s %s/%d %d..%d cp%d st%d aw%t/%d fin%t\n", s, r.tenure.Owner, r.tenure.Counter, r.start, r.pos, r.cp, r.state, r.awaiting, r.await, r.finished)
		}
	}
	var rows, evs uint64
	for _, r := range f.table.rows {
		if r.str == "" {
			r.str = r.String()
		}
		rows += fnvString(r.str)
	}
	for i := range f.queue {
		e := &f.queue[i]
		if e.canon == "" {
			e.canon = f.fmtEvent(*e, true)
		}
		evs += fnvString(e.canon)
	}
	fmt.Fprintf(h, "rows %x events %x\n", rows, evs)
	h.Write([]byte(f.chk.String()))
	for _, s := range f.kin.shards {
		fmt.Fprintf(h, "%s %v %t end=%d\n", s.ID, s.Parents, s.Closed, f.kin.end[s.ID])
	}
	return h.Sum64()
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func fnvString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// fmtEvent describes e; canon leaves out what does not tell states apart (sequence numbers,
// and instants but a tick's, to the bucket).
func (f *fleet) fmtEvent(e event, canon bool) string {
	var s string
	switch e.kind {
	case evApply:
		s = fmt.Sprintf("apply i%d/%d %s answer=%t late=%t", e.slot, e.gen, fmtOp(e.op), e.answer, e.late)
		if e.late && canon {
			s += fmt.Sprintf(" by%d", (e.sent+f.cfg.Faults.LateMax)/f.cfg.Bucket)
		}
	case evInput:
		s = fmt.Sprintf("input i%d/%d %s", e.slot, e.gen, fmtInput(e.in))
	case evTick:
		s = fmt.Sprintf("tick i%d/%d at%d", e.slot, e.gen, e.at/f.cfg.Bucket)
	case evJoin:
		s = fmt.Sprintf("join i%d", e.slot)
	default:
		s = fmt.Sprintf("ev%d i%d/%d %s", e.kind, e.slot, e.gen, e.shard)
	}
	if !canon {
		s = fmt.Sprintf("%s @%v", s, e.at)
	}
	return s
}
