package protosim

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/gostream/kinesub/internal/protocol"
)

// Config is a fleet to simulate or explore.
type Config struct {
	Instances int           // slots, each running one machine at a time
	Shards    int           // the stream's shards at the start
	Splits    int           // at most this many splits during the faults (simulator)
	TTL       time.Duration // the machines' lease TTL: the faults' bounds and the goals count in it
	Stream    string        // lease keys of shards are Stream + "/" + shard id
	// Duration is how long faults are drawn; a quiet spell of Quiet follows, with no fault,
	// at whose end the goals are checked (simulator).
	Duration, Quiet time.Duration
	// HandOutEvery: a reader asks to hand a record out at random gaps up to this (simulator).
	HandOutEvery time.Duration
	// Bucket is the explorer's time resolution in its states' identity.
	Bucket  time.Duration
	Faults  Faults
	NewCore NewCore
	// LogTail is how many of the event log's last lines a Result keeps; LogAll keeps all.
	LogTail int
	LogAll  bool
}

// Faults is what the network, the store and the hosts do wrong.
type Faults struct {
	Latency time.Duration // one way, at most (at least a quarter of it)
	Timeout time.Duration // an Unknown answer comes at most this late
	// Shares of operations: refused (not applied, Unknown), answer lost (applied, Unknown),
	// applied late (Unknown, then applied up to LateMax after the send). Reads and listings
	// are only refused.
	Refuse, Lost, Late float64
	LateMax            time.Duration
	IndexLag           time.Duration // a listing misses rows created up to this recently
	// Every is the mean gap between process faults: a pause (up to 1.5 TTL), a crash, a Close,
	// a cut off the store (up to a TTL), a hand-back, a split.
	Every time.Duration
	// Offset bounds the hosts' wall clock offsets (±); PPM their monotonic rates' (±, in
	// millionths: 40,000 is 4 %).
	Offset time.Duration
	PPM    int64
}

// DefaultConfig is a small fleet under every fault, with newCore's machines: 3 instances, 2
// shards and a split, a 3 s TTL, 30 s of faults and 15 s of quiet.
func DefaultConfig(newCore NewCore) Config {
	ttl := 3 * time.Second
	return Config{
		Instances: 3, Shards: 2, Splits: 1, TTL: ttl, Stream: "s",
		Duration: 10 * ttl, Quiet: 5 * ttl, HandOutEvery: 300 * time.Millisecond, Bucket: ttl / 12,
		Faults: Faults{
			Latency: 20 * time.Millisecond, Timeout: ttl / 6,
			Refuse: 0.02, Lost: 0.02, Late: 0.02, LateMax: ttl * 7 / 10, IndexLag: time.Second,
			Every: ttl, Offset: 10 * time.Second, PPM: 40000,
		},
		NewCore: newCore, LogTail: 60,
	}
}

// Result is what one run found.
type Result struct {
	Seed       uint64
	Hash       uint64 // FNV-64a of the event log: equal seeds, equal hashes
	Lines      int    // the event log's lines
	Steps      int    // machine steps
	HandOuts   int
	Violations []string        // promises broken (the run stops at the first)
	Misses     []string        // goals missed
	Failovers  []time.Duration // each crashed instance's shards read again after this long
	Tail       string          // the event log's last lines
}

// Failed reports whether a promise was broken.
func (r *Result) Failed() bool { return len(r.Violations) > 0 }

func (r *Result) String() string {
	s := fmt.Sprintf("seed %d: hash %016x, %d steps, %d hand-outs", r.Seed, r.Hash, r.Steps, r.HandOuts)
	for _, v := range r.Violations {
		s += "\n  PROMISE BROKEN: " + v
	}
	for _, m := range r.Misses {
		s += "\n  goal missed: " + m
	}
	return s
}

func newFleet(cfg *Config, rng *rand.Rand) *fleet {
	f := &fleet{cfg: cfg, rng: rng, table: newTable(), kin: &kinesis{end: map[string]int64{}, top: map[string]int64{}},
		chk: newChecker(), slots: make([]*instance, cfg.Instances), incs: make([]int, cfg.Instances)}
	for range cfg.Shards {
		f.kin.add()
	}
	f.hosts = make([]host, cfg.Instances)
	for i := range f.hosts {
		h := host{origin: time.Duration(i+1) * time.Hour}
		if rng != nil {
			h.origin = time.Duration(rng.Int64N(int64(1000 * time.Hour)))
			h.offset = time.Duration(rng.Int64N(2*int64(cfg.Faults.Offset)+1)) - cfg.Faults.Offset
			h.ppm = rng.Int64N(2*cfg.Faults.PPM+1) - cfg.Faults.PPM
		}
		f.hosts[i] = h
	}
	return f
}

// Run simulates cfg's fleet from seed: every delay, fault and choice drawn from one PCG
// source seeded with it.
func Run(cfg Config, seed uint64) *Result {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	f := newFleet(&cfg, rng)
	f.log = newEventLog(cfg.LogTail, cfg.LogAll)
	f.faulty = true
	for i := range cfg.Instances {
		f.push(event{at: f.between(0, cfg.TTL/2), kind: evJoin, slot: i})
	}
	f.push(event{at: f.between(0, 2*cfg.Faults.Every), kind: evFault})
	f.push(event{at: cfg.Duration, kind: evFault, shard: "quiet"})
	end := cfg.Duration + cfg.Quiet
	for len(f.queue) > 0 && f.queue[0].at <= end && len(f.chk.violations) == 0 {
		f.run(f.take(0))
	}
	if len(f.chk.violations) == 0 {
		f.now = end
		f.goals()
	}
	return f.result(seed)
}

func (f *fleet) result(seed uint64) *Result {
	r := &Result{Seed: seed, Steps: f.steps, HandOuts: f.chk.handOuts, Violations: f.chk.violations, Misses: f.misses, Failovers: f.failovers}
	if f.log != nil {
		r.Hash, r.Lines, r.Tail = f.log.h.Sum64(), f.log.lines, f.log.Tail()
	}
	return r
}

// simEvent handles the simulator's own events: the fault schedule, a pause's end, a cut's.
func (f *fleet) simEvent(e event) {
	switch e.kind {
	case evResume:
		in := f.live(e.slot, e.gen)
		if in == nil || !in.paused {
			return
		}
		f.logf("i%d resumes, %d held", e.slot, len(in.queue))
		in.paused = false
		q := in.queue
		in.queue = nil
		for _, h := range q {
			h.at = f.now
			if f.live(e.slot, e.gen) == nil {
				return
			}
			f.run(h)
		}
	case evUncut:
		if in := f.live(e.slot, e.gen); in != nil && in.cut {
			in.cut = false
			f.logf("i%d reaches the store again", e.slot)
		}
	case evFault:
		if e.shard == "quiet" {
			f.quiet()
			return
		}
		if !f.faulty {
			return
		}
		f.fault()
		f.push(event{at: f.now + f.between(f.cfg.Faults.Every/4, 2*f.cfg.Faults.Every), kind: evFault})
	}
}

// quiet ends the faults: pauses and cuts end, the goals' spell begins.
func (f *fleet) quiet() {
	f.faulty = false
	f.logf("faults stop")
	for i, in := range f.slots {
		if in == nil {
			continue
		}
		if in.cut {
			f.push(event{at: f.now, kind: evUncut, slot: i, gen: in.gen})
		}
		if in.paused {
			f.push(event{at: f.now, kind: evResume, slot: i, gen: in.gen})
		}
	}
}

// fault draws one process fault.
func (f *fleet) fault() {
	slot := f.rng.IntN(len(f.slots))
	in := f.slots[slot]
	k := f.rng.IntN(12)
	if k == 11 && f.cfg.Splits > 0 {
		f.split()
		return
	}
	if in == nil || in.paused {
		return
	}
	ttl := f.cfg.TTL
	switch {
	case k < 3:
		in.paused = true
		d := f.between(ttl/20, 3*ttl/2)
		f.disturbed(in.gen, f.now+d)
		f.logf("i%d pauses for %v", slot, d)
		f.push(event{at: f.now + d, kind: evResume, slot: slot, gen: in.gen})
	case k < 5:
		f.logf("i%d crashes", slot)
		f.gone(slot, in, true)
	case k < 7:
		if !in.closing {
			in.closing = true
			f.disturbed(in.gen, f.cfg.Duration+f.cfg.Quiet)
			f.push(event{at: f.now, kind: evInput, slot: slot, gen: in.gen, in: protocol.Close{}})
		}
	case k < 9:
		in.cut = true
		d := f.between(ttl/10, ttl)
		f.disturbed(in.gen, f.now+d)
		f.logf("i%d cut off the store for %v", slot, d)
		f.push(event{at: f.now + d, kind: evUncut, slot: slot, gen: in.gen})
	default:
		shards := make([]string, 0, len(in.readers))
		for s, r := range in.readers {
			if r.state == reading {
				shards = append(shards, s)
			}
		}
		if len(shards) == 0 {
			return
		}
		sort.Strings(shards)
		f.push(event{at: f.now, kind: evInput, slot: slot, gen: in.gen, in: protocol.HandBack{Shard: shards[f.rng.IntN(len(shards))]}})
	}
}

// split closes an open shard at a record a little past the highest handed out, and lists
// two children; each instance learns of it at its next listing.
func (f *fleet) split() {
	var open []int
	for i, s := range f.kin.shards {
		if !s.Closed {
			open = append(open, i)
		}
	}
	if len(open) == 0 || f.splits >= f.cfg.Splits {
		return
	}
	f.splits++
	i := open[f.rng.IntN(len(open))]
	p := f.kin.shards[i].ID
	f.kin.shards[i].Closed = true
	f.kin.end[p] = f.kin.top[p] + f.rng.Int64N(4)
	a, b := f.kin.add(p), f.kin.add(p)
	f.logf("split %s at #%d into %s %s", p, f.kin.end[p], a, b)
	for slot, in := range f.slots {
		if in != nil {
			f.push(event{at: f.now + f.between(0, f.cfg.TTL), kind: evInput, slot: slot, gen: in.gen, in: protocol.ShardsListed{Shards: f.kin.listing()}})
		}
	}
}

// goals checks, at the end of the quiet spell, that every readable shard is read by a live
// instance that may hand it out, and how long each crash's shards waited.
func (f *fleet) goals() {
	for _, s := range f.kin.shards {
		if row, ok := f.table.rows[f.key(s.ID)]; ok && row.Finished {
			continue
		}
		ready := true
		for _, p := range s.Parents {
			if row, ok := f.table.rows[f.key(p)]; !ok || !row.Finished {
				ready = false
			}
		}
		if !ready {
			continue
		}
		read := false
		for slot, in := range f.slots {
			if in == nil {
				continue
			}
			if r := in.readers[s.ID]; r != nil && r.state == reading {
				if _, ok := in.core.MayHandOut(f.hosts[slot].mono(f.now), s.ID); ok {
					read = true
				}
			}
		}
		if !read {
			f.misses = append(f.misses, fmt.Sprintf("%s is read by no live instance at the end", s.ID))
		}
	}
	goal := f.cfg.TTL + 2*time.Second
	for _, cr := range f.chk.crashes {
		shards := make([]string, 0, len(cr.shards))
		for s := range cr.shards {
			shards = append(shards, s)
		}
		sort.Strings(shards)
		worst := time.Duration(0)
		for _, s := range shards {
			t := cr.shards[s]
			if t == 0 {
				t = f.now
			}
			worst = max(worst, t-cr.at)
		}
		f.failovers = append(f.failovers, worst)
		if worst > goal && f.steadyThrough(cr) {
			f.misses = append(f.misses, fmt.Sprintf("i%d's crash at %v: its shards %v read again after %v (goal %v)", cr.slot, cr.at, shards, worst, goal))
		}
	}
}

// life is one instance's time up: from its join to its end (-1: running), and the spells it
// was disturbed (paused, cut off, closing).
type life struct {
	gen      int
	from, to time.Duration
	spells   [][2]time.Duration
}

func (f *fleet) disturbed(gen int, until time.Duration) {
	for i := range f.lives {
		if f.lives[i].gen == gen {
			f.lives[i].spells = append(f.lives[i].spells, [2]time.Duration{f.now, until})
		}
	}
}

// steadyThrough reports whether some instance ran undisturbed from before a crash until its
// failover goal was due: only then is the goal the protocol's to meet.
func (f *fleet) steadyThrough(cr *crashCheck) bool {
	due := cr.at + f.cfg.TTL + 2*time.Second
	for _, l := range f.lives {
		if l.gen == cr.gen || l.from >= cr.at || l.to >= 0 && l.to <= due {
			continue
		}
		calm := true
		for _, s := range l.spells {
			if s[0] <= due && s[1] >= cr.at {
				calm = false
			}
		}
		if calm {
			return true
		}
	}
	return false
}
