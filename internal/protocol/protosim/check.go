package protosim

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gostream/kinesub/internal/protocol"
)

// checker holds a run to the protocol's promises as it goes (see the package doc), and notes
// what its goals need.
type checker struct {
	shards map[string]*shardCheck
	// acked is, per shard, the highest record its readers asked to checkpoint (the model's
	// acknowledgement: a reader checkpoints only what it handed out and saw acknowledged).
	acked map[string]int64

	violations []string
	handOuts   int
	crashes    []*crashCheck
}

// shardCheck is what the checker keeps of one shard.
type shardCheck struct {
	latest  protocol.Tenure // the holding that began handing out last
	lastT   time.Duration   // its last hand-out
	any     bool
	retired []protocol.Tenure // holdings that handed out before latest, sorted
}

// crashCheck is one crash, for the failover goal.
type crashCheck struct {
	at     time.Duration
	slot   int
	gen    int
	shards map[string]time.Duration // shard it read → when another holding started it (0: not yet)
}

func newChecker() *checker {
	return &checker{shards: map[string]*shardCheck{}, acked: map[string]int64{}}
}

func (c *checker) clone() *checker {
	n := &checker{shards: make(map[string]*shardCheck, len(c.shards)), acked: make(map[string]int64, len(c.acked)),
		handOuts: c.handOuts, violations: append([]string(nil), c.violations...)}
	for s, a := range c.acked {
		n.acked[s] = a
	}
	for s, sc := range c.shards {
		cs := *sc
		cs.retired = append([]protocol.Tenure(nil), sc.retired...)
		n.shards[s] = &cs
	}
	for _, cr := range c.crashes {
		cc := *cr
		cc.shards = make(map[string]time.Duration, len(cr.shards))
		for s, t := range cr.shards {
			cc.shards[s] = t
		}
		n.crashes = append(n.crashes, &cc)
	}
	return n
}

func (c *checker) violate(f *fleet, format string, args ...any) {
	msg := fmt.Sprintf("t=%v: ", f.now) + fmt.Sprintf(format, args...)
	c.violations = append(c.violations, msg)
	f.logf("VIOLATION %s", msg)
}

func (c *checker) shard(s string) *shardCheck {
	sc := c.shards[s]
	if sc == nil {
		sc = &shardCheck{}
		c.shards[s] = sc
	}
	return sc
}

func tenureLess(a, b protocol.Tenure) bool {
	return a.Owner < b.Owner || a.Owner == b.Owner && a.Counter < b.Counter
}

// onHandOut checks one hand-out by holding t of shard at the fleet's instant.
func (c *checker) onHandOut(f *fleet, slot int, shard string, t protocol.Tenure, r *reader) {
	c.handOuts++
	if t != r.tenure {
		c.violate(f, "i%d handed %s out under %s/%d, but reads it under %s/%d", slot, shard, t.Owner, t.Counter, r.tenure.Owner, r.tenure.Counter)
	}
	s, _ := f.kin.shard(shard)
	for _, p := range s.Parents {
		if row, ok := f.table.rows[f.key(p)]; !ok || !row.Finished {
			c.violate(f, "i%d handed %s out before its parent %s was read to its end", slot, shard, p)
		}
	}
	sc := c.shard(shard)
	switch {
	case !sc.any:
		sc.any = true
	case sc.latest == t:
	default:
		i := sort.Search(len(sc.retired), func(i int) bool { return !tenureLess(sc.retired[i], t) })
		if i < len(sc.retired) && sc.retired[i] == t {
			c.violate(f, "two readers: %s handed out by %s/%d (i%d) after %s/%d handed it out (last at %v)",
				shard, t.Owner, t.Counter, slot, sc.latest.Owner, sc.latest.Counter, sc.lastT)
			return
		}
		if sc.lastT == f.instant() {
			c.violate(f, "two readers: %s handed out by %s/%d (i%d) and %s/%d at one instant",
				shard, t.Owner, t.Counter, slot, sc.latest.Owner, sc.latest.Counter)
		}
		sc.retired = append(sc.retired, sc.latest)
		sort.Slice(sc.retired, func(i, j int) bool { return tenureLess(sc.retired[i], sc.retired[j]) })
	}
	sc.latest, sc.lastT = t, f.instant()
}

// onWrite checks a write the table applied to a shard's row.
func (c *checker) onWrite(f *fleet, w *write) {
	shard, ok := f.shardOf(w.op.Key)
	if !ok {
		return
	}
	switch w.op.Kind {
	case protocol.OpDelete:
		if !w.before.Finished {
			c.violate(f, "%s's row deleted at checkpoint %q, before its end", shard, w.before.Checkpoint)
		}
	case protocol.OpCheckpoint:
		if w.before.Finished && !w.after.Finished {
			c.violate(f, "%s's checkpoint moved back from SHARD_END to %q (%s/%d, write %d)", shard, w.after.Checkpoint,
				w.op.Owner, w.op.Counter, w.op.Order)
		}
		if p := parsePos(w.after.Checkpoint); p > c.acked[shard] {
			c.violate(f, "%s's checkpoint set to %q (%s/%d, write %d), past the highest acknowledged record %s: records skipped",
				shard, w.after.Checkpoint, w.op.Owner, w.op.Counter, w.op.Order, fmtAcked(c.acked[shard]))
		}
		t := protocol.Tenure{Owner: w.op.Owner, Counter: w.op.Counter}
		if w.cpBefore == t && parsePos(w.after.Checkpoint) < parsePos(w.before.Checkpoint) {
			c.violate(f, "%s's checkpoint moved back within holding %s/%d: %q to %q (write %d)", shard, t.Owner, t.Counter,
				w.before.Checkpoint, w.after.Checkpoint, w.op.Order)
		}
	}
}

// onAck notes that a reader of shard asked for checkpoint cp: the records up to it were
// handed out and acknowledged.
func (c *checker) onAck(shard, cp string) {
	c.acked[shard] = max(c.acked[shard], parsePos(cp))
}

func fmtAcked(p int64) string {
	if p >= parsePos(ShardEnd) {
		return ShardEnd
	}
	return fmtPos(p)
}

// onStart checks that a reader starts at or before the highest acknowledged record (a later
// start skips records nobody acknowledged), and notes it for the failover goal.
func (c *checker) onStart(f *fleet, slot int, o protocol.StartReading) {
	if p := parsePos(o.Checkpoint); p > c.acked[o.Shard] {
		c.violate(f, "i%d starts %s under %s/%d at %q, past the highest acknowledged record %s: records skipped",
			slot, o.Shard, o.Tenure.Owner, o.Tenure.Counter, o.Checkpoint, fmtAcked(c.acked[o.Shard]))
	}
	for _, cr := range c.crashes {
		if t, ok := cr.shards[o.Shard]; ok && t == 0 && f.now > cr.at {
			cr.shards[o.Shard] = f.now
		}
	}
}

// onCrash notes the shards a crashed instance read.
func (c *checker) onCrash(f *fleet, slot int, inst *instance) {
	cr := &crashCheck{at: f.now, slot: slot, gen: inst.gen, shards: map[string]time.Duration{}}
	for s := range inst.readers {
		cr.shards[s] = 0
	}
	if len(cr.shards) > 0 {
		c.crashes = append(c.crashes, cr)
	}
}

// String is what the checker keeps that tells the explorer's states apart.
func (c *checker) String() string {
	keys := make([]string, 0, len(c.shards))
	for s := range c.shards {
		keys = append(keys, s)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, s := range sortedKeys(c.acked) {
		fmt.Fprintf(&b, "acked %s %d\n", s, c.acked[s])
	}
	for _, s := range keys {
		sc := c.shards[s]
		fmt.Fprintf(&b, "handed %s %s/%d retired", s, sc.latest.Owner, sc.latest.Counter)
		for _, t := range sc.retired {
			fmt.Fprintf(&b, " %s/%d", t.Owner, t.Counter)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
