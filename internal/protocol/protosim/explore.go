package protosim

import (
	"fmt"
	"time"

	"github.com/gostream/kinesub/internal/protocol"
)

// ExploreConfig is a small fleet to explore exhaustively.
type ExploreConfig struct {
	Config // Instances (2–3), Shards (1–2), Splits, TTL, Faults.LateMax, Bucket, NewCore
	// Depth bounds the choices on a path from the root.
	Depth int
	// Faults is each path's budget of faults: an answer lost, a write answered Unknown and
	// applied late (or never), an instance crashed, closed, paused or cut off the store (until
	// a free choice reconnects it), a hand-back, a split. Short pauses need no budget: nothing
	// forces a delivery, so every instance may stand still while the others go on; a long one
	// (Pauses) is one choice that runs the others in time order meanwhile.
	Faults int
	// Advances are the spells of time a free choice may let pass at once, every event due
	// meanwhile run in the order of its instant (so that a path reaches a lease's expiry, a
	// reap or a steal in a few choices); Pauses those one instance may stand still while the
	// others run so. Nil: none.
	Advances, Pauses []time.Duration
	// Prefix runs the fleet this many events in order of their instants, with no fault,
	// before the search begins (0: from the start, every instance yet to join).
	Prefix int
	// MaxStates stops the search after this many distinct states (0: no bound).
	MaxStates int
	// Records bounds the new records a holding hands out (0: one). A reader hands the next out
	// only once it asked to checkpoint the last, so that with two or more a holding may have
	// checkpoint writes of its own on their way together, and the search tries them in every
	// order.
	Records int
	// Skew sets the hosts apart: slot i's wall clock is offset by ±Offset and its monotonic
	// clock runs ±PPM millionths fast (slot 0 fast, slot 1 slow, …).
	Offset time.Duration
	PPM    int64
}

// ExploreResult is what a search found.
type ExploreResult struct {
	States      int // distinct states reached
	Transitions int // choices taken
	Deepest     int
	Truncated   bool     // MaxStates reached
	Violation   string   // the first promise broken, if any
	Trace       []string // the choices that led to it, from the root
	Log         string   // the event log of that path
}

func (r *ExploreResult) String() string {
	s := fmt.Sprintf("%d states, %d transitions, depth %d", r.States, r.Transitions, r.Deepest)
	if r.Truncated {
		s += " (truncated)"
	}
	if r.Violation != "" {
		s += "\nPROMISE BROKEN: " + r.Violation
	}
	return s
}

// choice is one thing that can happen next.
type choice struct {
	what  choiceKind
	event int // the queue's index, for the choices that take an event
	slot  int
	shard string
	d     time.Duration // chAdvance, chPause
}

type choiceKind uint8

const (
	chRun        choiceKind = iota + 1 // take the event as it comes: an op applied and answered
	chLost                             // apply it, lose the answer
	chLate                             // answer Unknown now; it may apply later
	chRefuse                           // answer Unknown; never applied
	chCrash                            // crash the slot's instance
	chClose                            // Close it
	chCut                              // cut it off the store
	chUncut                            // reconnect it
	chHandBack                         // hand the shard back
	chCheckpoint                       // the shard's reader asks for a checkpoint
	chSplit                            // split the first open shard
	chAdvance                          // let d pass, running what falls due in order
	chPause                            // the same, the slot standing still meanwhile
)

// Explore searches every order of deliveries, ticks and faults of cfg's fleet up to its depth
// and fault budget, deduplicating states by their canonical dump (the machines' String, the
// table, the events on their way, the checker's memory, the time to cfg.Bucket).
func Explore(cfg ExploreConfig) *ExploreResult {
	root := newFleet(&cfg.Config, nil)
	for i := range root.hosts {
		sign := int64(1 - 2*(i%2))
		if i == 2 {
			sign = 0
		}
		root.hosts[i].ppm = sign * cfg.PPM
		root.hosts[i].offset = time.Duration(sign) * cfg.Offset
	}
	root.budget = cfg.Faults
	root.advances, root.pauses = cfg.Advances, cfg.Pauses
	root.records = max(cfg.Records, 1)
	for i := range cfg.Instances {
		root.push(event{kind: evJoin, slot: i})
	}
	res := &ExploreResult{}
	var prefix []string
	for n := 0; n < cfg.Prefix && len(root.queue) > 0; n++ {
		root.prune()
		if len(root.queue) == 0 {
			break
		}
		prefix = append(prefix, root.fmtEvent(root.queue[0], false))
		root.run(root.take(0))
		root.sample(-1)
		if len(root.chk.violations) > 0 {
			res.Violation, res.Trace = root.chk.violations[0], prefix
			return res
		}
	}
	root.prune()

	type node struct {
		f     *fleet
		depth int
		path  []choice
	}
	seen := map[uint64]int{root.hash(): 0}
	stack := []node{{f: root}}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		res.Deepest = max(res.Deepest, n.depth)
		if n.depth >= cfg.Depth {
			continue
		}
		for _, c := range n.f.choices() {
			g := n.f.clone()
			g.do(c)
			res.Transitions++
			path := append(append([]choice(nil), n.path...), c)
			if len(g.chk.violations) > 0 {
				res.Violation = g.chk.violations[0]
				res.Trace, res.Log = replay(&cfg, root, prefix, path)
				res.States = len(seen)
				return res
			}
			h := g.hash()
			if d, ok := seen[h]; ok && d <= n.depth+1 {
				continue
			}
			seen[h] = n.depth + 1
			if cfg.MaxStates > 0 && len(seen) >= cfg.MaxStates {
				res.Truncated = true
				res.States = len(seen)
				return res
			}
			stack = append(stack, node{f: g, depth: n.depth + 1, path: path})
		}
	}
	res.States = len(seen)
	return res
}

// replay runs a path again from the root with the event log on, for the report.
func replay(cfg *ExploreConfig, root *fleet, prefix []string, path []choice) ([]string, string) {
	f := root.clone()
	f.log = newEventLog(0, true)
	trace := append([]string(nil), prefix...)
	for _, c := range path {
		trace = append(trace, f.describe(c))
		f.do(c)
	}
	return trace, f.log.Tail()
}

// bound is the latest instant time may move to: a write not faulted must apply within
// LateMax of its send.
func (f *fleet) bound() time.Duration {
	b := time.Duration(1<<63 - 1)
	for _, e := range f.queue {
		if e.kind == evApply && !e.late {
			b = min(b, e.sent+f.cfg.Faults.LateMax)
		}
	}
	return b
}

// choices lists what can happen next.
func (f *fleet) choices() []choice {
	var out []choice
	bound := f.bound()
	for i, e := range f.queue {
		if e.at > f.now && e.at > bound {
			continue
		}
		out = append(out, choice{what: chRun, event: i})
		if e.kind == evApply && !e.late && f.budget > 0 {
			write := e.op.Kind != protocol.OpList && e.op.Kind != protocol.OpRead
			if write {
				out = append(out, choice{what: chLost, event: i}, choice{what: chLate, event: i})
			}
			out = append(out, choice{what: chRefuse, event: i})
		}
	}
	for slot, in := range f.slots {
		if in == nil {
			continue
		}
		if in.cut {
			out = append(out, choice{what: chUncut, slot: slot})
		}
		for _, s := range sortedKeys(in.readers) {
			if r := in.readers[s]; r.state == reading && r.pos > r.cp {
				out = append(out, choice{what: chCheckpoint, slot: slot, shard: s})
			}
		}
		if f.budget == 0 {
			continue
		}
		out = append(out, choice{what: chCrash, slot: slot})
		if !in.closing {
			out = append(out, choice{what: chClose, slot: slot})
		}
		if !in.cut {
			out = append(out, choice{what: chCut, slot: slot})
		}
		for _, s := range sortedKeys(in.readers) {
			if in.readers[s].state == reading {
				out = append(out, choice{what: chHandBack, slot: slot, shard: s})
			}
		}
	}
	if f.budget > 0 && f.splits < f.cfg.Splits {
		out = append(out, choice{what: chSplit})
	}
	for _, d := range f.advances {
		out = append(out, choice{what: chAdvance, slot: -1, d: d})
	}
	if f.budget > 0 {
		for slot, in := range f.slots {
			if in == nil {
				continue
			}
			for _, d := range f.pauses {
				out = append(out, choice{what: chPause, slot: slot, d: d})
			}
		}
	}
	return out
}

func (f *fleet) describe(c choice) string {
	switch c.what {
	case chRun, chLost, chLate, chRefuse:
		return fmt.Sprintf("%s %s", [...]string{chRun: "run", chLost: "lose the answer of", chLate: "answer Unknown, apply later:", chRefuse: "refuse"}[c.what], f.fmtEvent(f.queue[c.event], false))
	case chSplit:
		return "split"
	case chAdvance:
		return fmt.Sprintf("let %v pass", c.d)
	case chPause:
		return fmt.Sprintf("pause i%d for %v", c.slot, c.d)
	}
	return fmt.Sprintf("%s i%d %s", [...]string{chCrash: "crash", chClose: "close", chCut: "cut", chUncut: "uncut", chHandBack: "hand back", chCheckpoint: "checkpoint"}[c.what], c.slot, c.shard)
}

// do takes choice c, then asks every reader whether it may hand out, and drops what can no
// longer happen.
func (f *fleet) do(c choice) {
	if f.log != nil {
		f.logf("choice: %s", f.describe(c))
	}
	switch c.what {
	case chRun:
		f.run(f.take(c.event))
	case chLost, chLate, chRefuse:
		f.budget--
		e := f.take(c.event)
		f.events++
		f.now = max(f.now, e.at)
		f.push(event{at: f.now, kind: evInput, slot: e.slot, gen: e.gen, in: protocol.Answered{ID: e.op.ID, Outcome: protocol.Unknown}})
		switch c.what {
		case chLost:
			e.answer = false
			f.apply(e)
		case chLate:
			e.answer, e.late = false, true
			f.push(e)
		}
	case chCrash:
		f.budget--
		f.events++
		f.gone(c.slot, f.slots[c.slot], true)
	case chClose:
		f.budget--
		in := f.slots[c.slot]
		in.closing = true
		f.input(c.slot, in.gen, protocol.Close{}, event{})
	case chCut:
		f.budget--
		f.events++
		f.slots[c.slot].cut = true
	case chUncut:
		f.events++
		f.slots[c.slot].cut = false
	case chHandBack:
		f.budget--
		f.input(c.slot, f.slots[c.slot].gen, protocol.HandBack{Shard: c.shard}, event{})
	case chCheckpoint:
		in := f.slots[c.slot]
		r := in.readers[c.shard]
		r.cp = r.pos
		f.input(c.slot, in.gen, protocol.Checkpointed{Shard: c.shard, Checkpoint: fmtPos(r.cp)}, event{})
	case chSplit:
		f.budget--
		f.splitFirst()
	case chAdvance:
		f.advance(f.now+c.d, -1)
	case chPause:
		f.budget--
		f.advance(f.now+c.d, c.slot)
	}
	f.sample(-1)
	f.prune()
}

// advance runs the events due up to until in the order of their instants, with no fault, and
// moves time there; the inputs, ticks and reader turns of slot paused (-1: none) wait (its
// writes on their way still land), to be chosen once the pause ends.
func (f *fleet) advance(until time.Duration, paused int) {
	for len(f.chk.violations) == 0 {
		f.prune()
		next := -1
		for i := range f.queue {
			e := &f.queue[i]
			if e.at > until || e.slot == paused && e.kind != evApply && e.kind != evJoin {
				continue
			}
			if next < 0 || f.less(i, next) {
				next = i
			}
		}
		if next < 0 {
			break
		}
		f.run(f.take(next))
		f.sample(paused)
	}
	if until > f.now {
		f.now = until
		f.events++
	}
}

// sample asks every reader whether it may hand a record out now (the explorer's hand-outs:
// each reader hands out whenever its machine says it may), but those of slot paused (-1: none).
func (f *fleet) sample(paused int) {
	for slot, in := range f.slots {
		if in == nil || slot == paused {
			continue
		}
		for _, s := range sortedKeys(in.readers) {
			if r := in.readers[s]; r.state == reading {
				f.handOut(slot, in, s, r)
				f.readerNext(slot, in, s, r)
			}
		}
	}
}

// prune drops the events that can no longer happen: those of instances gone (but writes on
// their way), ticks re-armed, late writes past their bound.
func (f *fleet) prune() {
	q := f.queue[:0]
	for _, e := range f.queue {
		switch {
		case e.kind == evApply:
			if e.late && e.sent+f.cfg.Faults.LateMax < f.now {
				continue
			}
		case e.kind == evJoin:
		case f.live(e.slot, e.gen) == nil:
			continue
		case e.kind == evTick && f.slots[e.slot].armed != e.seq:
			continue
		}
		q = append(q, e)
	}
	f.queue = q
	for i := len(q)/2 - 1; i >= 0; i-- {
		f.down(i)
	}
}

// splitFirst splits the first open shard (the explorer's split: which one matters little
// with one or two shards, and a choice of each would double the search).
func (f *fleet) splitFirst() {
	for i, s := range f.kin.shards {
		if s.Closed {
			continue
		}
		f.splits++
		f.kin.shards[i].Closed = true
		f.kin.end[s.ID] = f.kin.top[s.ID]
		a, b := f.kin.add(s.ID), f.kin.add(s.ID)
		f.logf("split %s at #%d into %s %s", s.ID, f.kin.end[s.ID], a, b)
		for slot, in := range f.slots {
			if in != nil {
				f.push(event{at: f.now, kind: evInput, slot: slot, gen: in.gen, in: protocol.ShardsListed{Shards: f.kin.listing()}})
			}
		}
		return
	}
}
