package sim

import (
	"fmt"
	"math/big"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gostream/kinesub/lease"
)

// Checker checks the fleet's promises as a run goes, on the simulation's clock:
//
//   - never two holders hand out one shard's records in overlapping time: once a delivery
//     carried a lease counter (the fencing token), none with a lower counter follows;
//   - an owner hands out nothing once its heartbeat row is no longer its own (taken over by a
//     peer that took it for stopped, or dropped at Close): peers take the shards bound to the
//     row at once. This holds whether or not a peer got to read the shard in time to overlap,
//     so a deadline kept too long shows on every takeover that comes near it;
//   - a holder whose shard lease a peer stole hands out nothing from 3/4 TTL after the first
//     move of the change row applied after the steal (with TTL set): it stops within 2/3 TTL
//     of the last confirmation sent before that move, and hands out within TTL/12 of checking
//     its deadline. This holds whether or not the thief reads in time to overlap, so a holder
//     that misses the move, or keeps reading after it, shows on every steal;
//   - a holder never hands out a record at or before the checkpoint its holding started from,
//     and a holding handed back cleanly leaves a checkpoint at or past every record acked
//     before its drain began (so nothing acknowledged is delivered again);
//   - no write moves a shard's checkpoint back;
//   - every record put is delivered (Missing, once the faults stopped);
//   - a key's record is first started by a handler only once the key's record before it was
//     handled somewhere (Started, Handled: Process's order per key, across lease moves,
//     crashes and reshards). Reported as a missed goal, not yet as a broken promise: "handled"
//     is an Ack that returned nil, and whether an Ack that returned an error may still have
//     moved the checkpoint is not settled.
//   - through a fenced, marked sink (Apply: a model of dynamosink's condition), every record's
//     effect lands exactly once and in its key's order: none is applied after a later record of
//     its key (which would refuse it as a replay for good), none twice, and every record put
//     has its effect applied once the faults stopped (EffectsMissing). A promise, where the
//     handlers' starts above are a goal: a handler that outlives its lease may start out of
//     order, and the fencing token it carries keeps its write out;
//   - Process holds no more of a shard's records than its in-flight cap allows (Held).
//
// It is safe for concurrent use.
type Checker struct {
	stream string

	mu         sync.Mutex
	violations []string
	misses     []string             // goals missed that are no safety promise (miss)
	put        map[string]time.Time // record id → when it was put
	delivered  map[string]int       // record id → hand-outs
	top        map[string]token     // shard → the highest counter handed out, and by whom
	started    map[holding]lease.Checkpoint
	acked      map[holding]lease.Checkpoint // the newest record acked in a holding
	ackedBy    map[holding]string           // the instance that acked it
	drained    map[holding]lease.Checkpoint // acked when its drain began
	handOuts   int

	keyOf   map[string]string // record id → its key
	prevOf  map[string]string // record id → the key's record put before it
	lastOf  map[string]string // key → its record put last
	begun   map[string]bool   // record ids whose handler was started
	handled map[string]bool   // record ids whose handler returned, having acked

	marks    map[string]mark // key → the sink's high-water mark
	applied  map[string]bool // record ids whose effect the sink applied
	outcomes [3]int          // the sink's answers, by Outcome
	heldTop  int             // the most a Process held of one shard
	atCap    bool            // a Process held its shard's in-flight cap

	rewound map[string]bool // owners whose current run sought back (Rewound)

	rowGone map[string]time.Time // owner → when its heartbeat row stopped being its own

	// TTL is the fleet's lease TTL; zero: stolen holdings are not held to a deadline.
	TTL time.Duration
	// taken: holdings a peer stole, each with the time from which it may hand out nothing
	// (zero until a move of the change row was applied after the steal).
	taken map[holding]time.Time
}

// mark is a key's high-water mark in the modelled sink: the record applied last, its shard and
// the counter of the holding that applied it.
type mark struct {
	at      lease.Checkpoint
	shard   string
	counter int64
}

// Outcome is what the modelled sink did with a record's effect.
type Outcome int

const (
	Applied    Outcome = iota // the effect landed
	Replay                    // refused: the key's mark is at or past the record
	Superseded                // refused: a later holding of the record's shard wrote the key's mark
)

type token struct {
	owner   string
	counter int64
	at      time.Time
}

type holding struct {
	shard   string
	counter int64
}

// NewChecker returns a checker of the fleet reading stream.
func NewChecker(stream string) *Checker {
	return &Checker{
		stream: stream, put: map[string]time.Time{}, delivered: map[string]int{}, top: map[string]token{},
		started: map[holding]lease.Checkpoint{}, acked: map[holding]lease.Checkpoint{}, ackedBy: map[holding]string{}, drained: map[holding]lease.Checkpoint{},
		keyOf: map[string]string{}, prevOf: map[string]string{}, lastOf: map[string]string{},
		begun: map[string]bool{}, handled: map[string]bool{},
		marks: map[string]mark{}, applied: map[string]bool{}, rewound: map[string]bool{},
		rowGone: map[string]time.Time{}, taken: map[holding]time.Time{},
	}
}

func (c *Checker) fail(format string, args ...any) {
	c.violations = append(c.violations, fmt.Sprintf("%s: ", time.Now().UTC().Format("15:04:05.000"))+fmt.Sprintf(format, args...))
}

// miss records a goal the run missed that is no safety promise: acknowledged records delivered
// again after a clean hand-back (at-least-once still holds).
func (c *Checker) miss(format string, args ...any) {
	c.misses = append(c.misses, fmt.Sprintf("%s: ", time.Now().UTC().Format("15:04:05.000"))+fmt.Sprintf(format, args...))
}

// Misses returns the goals the run missed, in order.
func (c *Checker) Misses() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.misses...)
}

// Violations returns what the run broke, in order.
func (c *Checker) Violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.violations...)
}

// Put records a record published, by its id, under key. Records of one key are put one after
// another, in the order Put is called.
func (c *Checker) Put(id, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.put[id] = time.Now()
	c.keyOf[id] = key
	if last, ok := c.lastOf[key]; ok {
		c.prevOf[id] = last
	}
	c.lastOf[key] = id
}

// Started checks a handler's start on record id by instance: the first start of a key's record
// must come after the key's record before it was handled.
func (c *Checker) Started(instance, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.begun[id] {
		return // a replay: the order was checked at the first start
	}
	c.begun[id] = true
	if prev, ok := c.prevOf[id]; ok && !c.handled[prev] {
		c.miss("key %s: %s started %s before %s, the key's record before it, was handled", c.keyOf[id], instance, id, prev)
	}
}

// Handled records that a handler on record id returned having acked it.
func (c *Checker) Handled(id string) {
	c.mu.Lock()
	c.handled[id] = true
	c.mu.Unlock()
}

// Rewound records that owner's subscription is about to seek back to the start of the stream:
// from now until the owner starts anew (Restarted), its holdings hand out records before the
// checkpoints they started from, move those checkpoints back and hand back shards behind what
// they acked, as asked. Two readers, lost records and the sink's order are checked as before.
func (c *Checker) Rewound(owner string) {
	c.mu.Lock()
	c.rewound[owner] = true
	c.mu.Unlock()
}

// Restarted records that owner's subscription is a new one: its holdings start from their
// checkpoints again.
func (c *Checker) Restarted(owner string) {
	c.mu.Lock()
	delete(c.rewound, owner)
	c.mu.Unlock()
}

// instanceOf returns the instance an owner name belongs to: a holding's owner is the
// instance's name and its incarnation (name#incarnation).
func instanceOf(owner string) string {
	name, _, _ := strings.Cut(owner, "#")
	return name
}

// Apply models a sink that writes a record's effect with its key's high-water mark in one
// conditional write (dynamosink): the write lands when the key has no mark, or its mark is
// below the record and was not written by a later holding of the record's shard. It checks
// that the key's records land in order, each once, and returns what the sink did.
func (c *Checker) Apply(d Delivery) Outcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.apply(d)
	c.outcomes[out]++
	return out
}

func (c *Checker) apply(d Delivery) Outcome {
	key := c.keyOf[d.ID]
	m, ok := c.marks[key]
	switch {
	case ok && !after(d.At, m.at):
		if !c.applied[d.ID] {
			c.fail("key %s: %s's effect refused as a replay, never applied (mark %s): lost", key, d.ID, m.at.Sequence)
		}
		return Replay
	case ok && m.shard == d.Shard && m.counter > d.Tenure.Counter:
		return Superseded
	}
	if c.applied[d.ID] {
		c.fail("key %s: %s's effect applied twice (by %s under counter %d)", key, d.ID, d.Instance, d.Tenure.Counter)
	}
	if prev, ok := c.prevOf[d.ID]; ok && !c.applied[prev] {
		c.fail("key %s: %s applied %s's effect before %s's, the key's record before it: that one is lost",
			key, d.Instance, d.ID, prev)
	}
	c.applied[d.ID] = true
	c.marks[key] = mark{d.At, d.Shard, d.Tenure.Counter}
	return Applied
}

// EffectsMissing returns the records put whose effect the sink never applied, sorted.
func (c *Checker) EffectsMissing() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for id := range c.put {
		if !c.applied[id] {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// Held checks what a Process holds of one shard: n records, where its in-flight cap and its
// workers (a handler that outlives its shard's generation keeps its record) allow bound;
// limit is its cap alone.
func (c *Checker) Held(instance, shard string, n, limit, bound int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.heldTop = max(c.heldTop, n)
	c.atCap = c.atCap || n >= limit
	if n <= bound {
		return
	}
	c.fail("shard %s: %s's Process holds %d records, above its bound %d (in-flight cap and workers)", shard, instance, n, bound)
}

// Delivery is one record handed out.
type Delivery struct {
	Instance string
	Shard    string
	Tenure   lease.Tenure
	At       lease.Checkpoint // the record's sequence and sub-sequence number
	ID       string
}

// HandOut checks a delivery as it is handed out, at at: when the consumer's code got it (for
// Messages, when the consumer received it), or, for the one whose hand-out was under way when
// its instance paused and completed as it resumed (a send into Messages that waited for the
// consumer, checked before the pause began), when its deadline was checked: no one can tell
// that from the consumer's receiving it before the pause. A record that waited in a buffer
// across the pause, its send complete before it, is no such hand-out. One handed out under a
// lower counter of the shard's lease than another one, at or after that one was, means two
// readers.
func (c *Checker) HandOut(d Delivery, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handOuts++
	c.delivered[d.ID]++
	top := c.top[d.Shard]
	switch {
	case d.Tenure.Counter < top.counter && at.Before(top.at):
		// Handed out before the later holding's first hand-out, reported after it.
	case d.Tenure.Counter < top.counter:
		c.fail("shard %s: %s handed out %s under lease counter %d after %s handed out under counter %d at %s: two readers",
			d.Shard, d.Instance, d.ID, d.Tenure.Counter, top.owner, top.counter, top.at.UTC().Format("15:04:05.000"))
	case d.Tenure.Counter > top.counter:
		c.top[d.Shard] = token{d.Tenure.Owner, d.Tenure.Counter, at}
	case d.Tenure.Owner != top.owner:
		c.fail("shard %s: lease counter %d handed out by %s and by %s", d.Shard, d.Tenure.Counter, top.owner, d.Tenure.Owner)
	}
	if gone, ok := c.rowGone[d.Tenure.Owner]; ok && !at.Before(gone) {
		c.fail("shard %s: %s handed out %s under %s/%d at %s, after its heartbeat row stopped being its own at %s: peers take its shards at once",
			d.Shard, d.Instance, d.ID, d.Tenure.Owner, d.Tenure.Counter, at.UTC().Format("15:04:05.000"), gone.UTC().Format("15:04:05.000"))
	}
	h := holding{d.Shard, d.Tenure.Counter}
	if end := c.taken[h]; !end.IsZero() && at.After(end) {
		c.fail("shard %s: %s handed out %s under %s/%d at %s, after %s: its lease was stolen and the change row moved 3/4 TTL before",
			d.Shard, d.Instance, d.ID, d.Tenure.Owner, d.Tenure.Counter, at.UTC().Format("15:04:05.000"), end.UTC().Format("15:04:05.000"))
	}
	if from, ok := c.started[h]; ok && handledBy(from, d.At) && !c.rewound[instanceOf(d.Tenure.Owner)] {
		c.fail("shard %s: %s handed out %s (%s) under counter %d, at or before the checkpoint %s its holding started from",
			d.Shard, d.Instance, d.ID, d.At.Sequence, d.Tenure.Counter, from.Sequence)
	}
}

// Acked records that a delivery was acknowledged.
func (c *Checker) Acked(d Delivery) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := holding{d.Shard, d.Tenure.Counter}
	if a, ok := c.acked[h]; !ok || after(d.At, a) {
		c.acked[h] = d.At
		c.ackedBy[h] = d.Instance
	}
}

// Abandoned records that instance's Process call ended with records taken and not handled:
// they are read again (a shard still read moves back to the first of them; a draining one's
// drain has them given back), and so are the records acked after them in their holding. What
// the instance acked so far is no longer held against its next checkpoints or hand-backs.
func (c *Checker) Abandoned(instance string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for h, by := range c.ackedBy {
		if by == instance {
			delete(c.acked, h)
			delete(c.ackedBy, h)
			delete(c.drained, h)
		}
	}
}

// Draining records that the holding t of shard begins to drain for a clean hand-back (or a
// close): what it acked so far must be in its last checkpoint.
func (c *Checker) Draining(shard string, t lease.Tenure) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := holding{shard, t.Counter}
	if a, ok := c.acked[h]; ok {
		c.drained[h] = a
	}
}

// GaveUp records that a draining holding stopped waiting for its deliveries to be settled:
// what it acked after a gap is then delivered again, as documented.
func (c *Checker) GaveUp(shard string, t lease.Tenure) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.drained, holding{shard, t.Counter})
}

// Applied checks a write the table applied.
func (c *Checker) Applied(w Write) {
	shard, ok := strings.CutPrefix(w.Key, c.stream+"/")
	if ok && lease.KindOf(w.Key) == lease.KindHeartbeat {
		c.heartbeat(w)
		return
	}
	if ok && lease.KindOf(w.Key) == lease.KindChanges {
		c.moved(w.Applied)
		return
	}
	if !ok || lease.KindOf(w.Key) != lease.KindShard {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.After.Counter != w.Before.Counter && w.After.Key != "" {
		c.started[holding{shard, w.After.Counter}] = w.After.Checkpoint
	}
	if (w.Op == "Steal" || w.Op == "StealNote") && w.Before.Owner != "" && w.After.Owner != w.Before.Owner {
		if _, ok := c.taken[holding{shard, w.Before.Counter}]; !ok {
			c.taken[holding{shard, w.Before.Counter}] = time.Time{}
		}
	}
	if c.rewound[instanceOf(w.Writer)] {
		return
	}
	switch w.Op {
	case "Checkpoint", "CheckpointOrdered":
		if w.Before.Checkpoint.Sequence != "" && checkpointAfter(w.Before.Checkpoint, w.After.Checkpoint) {
			c.fail("shard %s: %s moved the checkpoint back from %s/%d to %s/%d (late: %v)", shard, w.Writer,
				w.Before.Checkpoint.Sequence, w.Before.Checkpoint.SubSequence, w.After.Checkpoint.Sequence, w.After.Checkpoint.SubSequence, w.Late)
		}
	case "Release":
		h := holding{shard, w.Before.Counter}
		if a, ok := c.drained[h]; ok && !handledBy(w.After.Checkpoint, a) {
			c.miss("shard %s: %s handed back under counter %d with checkpoint %s, before %s it had acked: acked records are delivered again",
				shard, w.Writer, w.Before.Counter, w.After.Checkpoint.Sequence, a.Sequence)
		}
	}
}

// SinkStats reports how often the modelled sink applied an effect and refused a replay or a
// superseded holding's, the most a Process held of one shard, and whether one held its cap.
func (c *Checker) SinkStats() (applied, replays, superseded, heldTop int, atCap bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.outcomes[Applied], c.outcomes[Replay], c.outcomes[Superseded], c.heldTop, c.atCap
}

// Missing returns the records put and never delivered, sorted.
func (c *Checker) Missing() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for id := range c.put {
		if c.delivered[id] == 0 {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// Stats reports what the run did.
func (c *Checker) Stats() (put, handedOut, again int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.delivered {
		if n > 1 {
			again += n - 1
		}
	}
	return len(c.put), c.handOuts, again
}

// after reports whether a is after b in a shard: markers (TRIM_HORIZON, AT_TIMESTAMP:…) come
// before every record, SHARD_END after them; sequence numbers compare as numbers, then
// sub-sequence numbers.
func after(a, b lease.Checkpoint) bool {
	ra, rb := rank(a.Sequence), rank(b.Sequence)
	if ra != rb {
		return ra > rb
	}
	if ra != 1 {
		return false
	}
	x, okx := new(big.Int).SetString(a.Sequence, 10)
	y, oky := new(big.Int).SetString(b.Sequence, 10)
	if !okx || !oky {
		return a.Sequence > b.Sequence
	}
	if d := x.Cmp(y); d != 0 {
		return d > 0
	}
	return a.SubSequence > b.SubSequence
}

func rank(seq string) int {
	switch {
	case seq == "" || seq == lease.TrimHorizon || strings.HasPrefix(seq, lease.AtTimestampPrefix) || strings.HasPrefix(seq, "AT_TIMESTAMP"):
		return 0
	case seq == lease.ShardEnd:
		return 2
	}
	return 1
}

// moved notes a move of the change row, applied at: holdings stolen before it and not yet
// bounded are held to 3/4 TTL after it.
func (c *Checker) moved(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.TTL == 0 {
		return
	}
	for h, end := range c.taken {
		if end.IsZero() {
			c.taken[h] = at.Add(c.TTL * 3 / 4)
		}
	}
}

// heartbeat notes when an owner's heartbeat row stopped being its own: a write that moved it
// from the owner (a peer's takeover, the owner's release at Close) or deleted it.
func (c *Checker) heartbeat(w Write) {
	owner := strings.TrimPrefix(w.Key, c.stream+"/~v2/owner/")
	if w.Before.Owner != owner || w.After.Owner == owner && w.After.Key != "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.rowGone[owner]; !ok {
		c.rowGone[owner] = w.Applied
	}
}
