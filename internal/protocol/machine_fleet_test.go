package protocol

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"
)

var fleetSeeds = flag.Int("fleet.seeds", 100, "TestMachineFleet: the seeds to run")

// fleetEvent is one thing due at an instant of a fleet run.
type fleetEvent struct {
	at    time.Duration
	seq   int // ties in the order scheduled
	node  int
	apply *Op         // apply this operation to the table
	input Input       // step the node with this
	op    *inflightOp // answer this operation
}

// inflightOp is an operation sent and not yet answered.
type inflightOp struct {
	op      Op
	applied bool
	answer  Answered
	lost    bool // answer Unknown, whether or not it was applied
}

// fleet runs Machines on one table in one goroutine: every operation is applied at a random
// later instant and answered at another, some answers lost (Unknown) while the write still
// lands, some writes never applied, some applied after their Unknown answer; instances pause
// and crash. It checks at every instant that no two instances may hand out one shard's records.
type fleet struct {
	t      *testing.T
	r      *rand.Rand
	tb     *table
	nodes  []*Machine
	dead   []bool
	paused []time.Duration // the node steps nothing before this instant
	arms   []time.Duration
	now    time.Duration
	events []fleetEvent
	seq    int
	shards []string
	reads  map[string]map[int]bool // shard → nodes that read it, at some point
	calm   bool                    // no more faults
}

func (f *fleet) schedule(e fleetEvent) {
	f.seq++
	e.seq = f.seq
	f.events = append(f.events, e)
}

// outputs carries out what node i asked for.
func (f *fleet) outputs(i int, outs []Output) {
	for _, o := range outs {
		switch o := o.(type) {
		case Send:
			op := o.Op
			in := &inflightOp{op: op}
			applyAt := f.now + time.Duration(f.r.IntN(80))*time.Millisecond
			answerAt := applyAt + time.Duration(f.r.IntN(80))*time.Millisecond
			x := f.r.IntN(100)
			if f.calm {
				x = 100
			}
			switch {
			case x < 4: // never applied, answered Unknown
				in.lost = true
				f.schedule(fleetEvent{at: answerAt, node: i, op: in})
				continue
			case x < 8: // applied, its answer lost
				in.lost = true
			case x < 11: // answered Unknown, applied later
				in.lost = true
				applyAt, answerAt = answerAt+time.Duration(f.r.IntN(500))*time.Millisecond, applyAt
			}
			f.schedule(fleetEvent{at: applyAt, node: i, apply: &op, op: in})
			f.schedule(fleetEvent{at: answerAt, node: i, op: in})
		case Arm:
			f.arms[i] = o.At
		case StartReading:
			if f.reads[o.Shard] == nil {
				f.reads[o.Shard] = map[int]bool{}
			}
			f.reads[o.Shard][i] = true
			f.schedule(fleetEvent{at: f.now + 300*time.Millisecond, node: i, input: Checkpointed{Shard: o.Shard, Checkpoint: fmt.Sprint(f.now)}})
		case StopReading:
			if o.Clean {
				d := time.Duration(f.r.IntN(300)) * time.Millisecond
				f.schedule(fleetEvent{at: f.now + d, node: i, input: Checkpointed{Shard: o.Shard, Checkpoint: fmt.Sprint(f.now + d)}})
				f.schedule(fleetEvent{at: f.now + d + time.Millisecond, node: i, input: ReaderStopped{Shard: o.Shard}})
			}
		case Rejoin:
			f.schedule(fleetEvent{at: f.now, node: i, input: Join{Incarnation: f.r.Uint64()}})
		case Failed:
			// Subscribe failed: the process tries again with a new subscriber.
			f.nodes[i] = New(f.nodes[i].cfg)
			f.arms[i] = -1
			f.schedule(fleetEvent{at: f.now + time.Second, node: i, input: ShardsListed{Shards: listing(f.shards)}})
			f.schedule(fleetEvent{at: f.now + time.Second, node: i, input: Join{Incarnation: f.r.Uint64()}})
		}
	}
}

func (f *fleet) step(i int, in Input) {
	if f.dead[i] {
		return
	}
	f.outputs(i, f.nodes[i].Step(Instant{Mono: f.now, Wall: f.tb.wall}, in))
}

// check holds the promise: at most one instance may hand out a shard's records at any instant.
func (f *fleet) check() {
	for _, s := range f.shards {
		var who []string
		for i, m := range f.nodes {
			if f.dead[i] || f.paused[i] > f.now {
				// A paused process hands nothing out while paused; the deadline is checked at
				// each hand-out when it resumes.
				continue
			}
			if t, ok := m.MayHandOut(f.now, s); ok {
				who = append(who, fmt.Sprintf("%d:%s/%d", i, t.Owner, t.Counter))
			}
		}
		if len(who) > 1 {
			f.t.Fatalf("at %v, shard %s may be handed out by %v", f.now, s, who)
		}
	}
}

func (f *fleet) run(until time.Duration) {
	for f.now < until {
		// The next instant anything is due.
		next := until
		for _, e := range f.events {
			next = min(next, e.at)
		}
		for i, a := range f.arms {
			if a >= 0 && !f.dead[i] {
				next = min(next, max(a, f.paused[i]))
			}
		}
		if next < f.now {
			next = f.now
		}
		f.tb.wall = f.tb.wall.Add(next - f.now)
		f.now = next
		sort.SliceStable(f.events, func(a, b int) bool {
			if f.events[a].at != f.events[b].at {
				return f.events[a].at < f.events[b].at
			}
			return f.events[a].seq < f.events[b].seq
		})
		var due []fleetEvent
		for len(f.events) > 0 && f.events[0].at <= f.now {
			due = append(due, f.events[0])
			f.events = f.events[1:]
		}
		for _, e := range due {
			switch {
			case e.apply != nil:
				e.op.answer = f.tb.apply(*e.apply)
				e.op.applied = true
			case e.op != nil:
				if f.paused[e.node] > f.now {
					e.at = f.paused[e.node]
					f.schedule(e)
					continue
				}
				a := e.op.answer
				if e.op.lost || !e.op.applied {
					a = Answered{ID: e.op.op.ID, Outcome: Unknown}
				}
				f.step(e.node, a)
			default:
				if f.paused[e.node] > f.now {
					e.at = f.paused[e.node]
					f.schedule(e)
					continue
				}
				f.step(e.node, e.input)
			}
			f.check()
		}
		for i, a := range f.arms {
			if a >= 0 && a <= f.now && !f.dead[i] && f.paused[i] <= f.now {
				f.arms[i] = -1
				f.step(i, Tick{})
				f.check()
			}
		}
	}
}

// TestMachineFleet: three or four Machines on a table whose store loses answers, applies writes
// late and never, whose instances pause and crash: no shard may be handed out by two at any
// instant, and once the faults stop, every shard is read again within two balance intervals.
func TestMachineFleet(t *testing.T) {
	for seed := range *fleetSeeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(seed), 7))
			f := &fleet{t: t, r: r, tb: newTable(), reads: map[string]map[int]bool{}}
			n := 3 + r.IntN(2)
			for i := range 4 + r.IntN(5) {
				f.shards = append(f.shards, fmt.Sprintf("shard-%d", i))
			}
			for i := range n {
				m := New(Config{Stream: "s", Owner: fmt.Sprintf("node-%d", i), TTL: 3 * time.Second, Choose: r})
				f.nodes = append(f.nodes, m)
				f.dead = append(f.dead, false)
				f.paused = append(f.paused, 0)
				f.arms = append(f.arms, -1)
				at := time.Duration(r.IntN(2000)) * time.Millisecond
				f.schedule(fleetEvent{at: at, node: i, input: ShardsListed{Shards: listing(f.shards)}})
				f.schedule(fleetEvent{at: at, node: i, input: Join{Incarnation: r.Uint64()}})
			}
			// Faults: a pause past the deadline, a crash, a close.
			f.run(8 * time.Second)
			p := r.IntN(n)
			f.paused[p] = f.now + time.Duration(2000+r.IntN(4000))*time.Millisecond
			f.run(16 * time.Second)
			crashed := r.IntN(n)
			f.dead[crashed] = true
			f.run(24 * time.Second)
			closing := (crashed + 1) % n
			f.step(closing, Close{})
			f.run(30 * time.Second)
			// Calm: within a balance interval and a reap, every shard is read again.
			f.calm = true
			f.run(30*time.Second + 2*2*3*time.Second)
			// Every shard is read again by a live instance.
			for _, s := range f.shards {
				var readers []int
				for i, m := range f.nodes {
					if _, ok := m.MayHandOut(f.now, s); ok && !f.dead[i] {
						readers = append(readers, i)
					}
				}
				if len(readers) != 1 {
					for i, m := range f.nodes {
						if !f.dead[i] {
							t.Logf("node %d:\n%s", i, m.String())
						}
					}
					for _, k := range sortedKeys(f.tb.rows) {
						t.Logf("row %s", rowString(f.tb.rows[k]))
					}
					t.Fatalf("at %v, shard %s read by %v (crashed %d, closed %d)", f.now, s, readers, crashed, closing)
				}
				if slices.Contains(readers, crashed) || slices.Contains(readers, closing) {
					t.Fatalf("shard %s read by a stopped instance", s)
				}
			}
		})
	}
}
