package protocol

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// table is a lease table for driving Machines by hand, with lease.Memory's conditions.
type table struct {
	rows  map[string]Row
	order map[string]int64 // per key, the last checkpoint write number applied
	wall  time.Time
}

func newTable() *table {
	return &table{rows: map[string]Row{}, order: map[string]int64{}, wall: time.Unix(1_700_000_000, 0)}
}

// apply performs op and returns its answer.
func (tb *table) apply(op Op) Answered {
	a := Answered{ID: op.ID, Outcome: Applied}
	r, ok := tb.rows[op.Key]
	expiry := func() time.Time {
		if op.TTL == 0 {
			return time.Time{}
		}
		return tb.wall.Add(op.TTL)
	}
	refuse := func() Answered { a.Outcome = Refused; return a }
	holds := func() bool { return ok && r.Owner == op.Owner && r.Counter == op.Counter }
	switch op.Kind {
	case OpList:
		for _, k := range sortedKeys(tb.rows) {
			if strings.HasPrefix(k, op.Key) {
				a.Rows = append(a.Rows, tb.rows[k])
			}
		}
		return a
	case OpRead:
		if !ok {
			r = Row{Key: op.Key}
		}
		a.Rows = []Row{r}
		return a
	case OpCreate:
		if ok {
			return refuse()
		}
		fallthrough
	case OpAcquire:
		if r.Owner != op.Owner && r.Held(tb.wall) {
			return refuse()
		}
		r.Key, r.Owner, r.Expiry = op.Key, op.Owner, expiry()
		r.Counter++
	case OpSteal:
		if !ok || r.Counter != op.Counter {
			return refuse()
		}
		r.Owner, r.Expiry, r.Note = op.Owner, expiry(), op.Note
		r.Counter++
	case OpRelease:
		if !holds() {
			return refuse()
		}
		r.Owner, r.Expiry = "", time.Time{}
		r.Counter++
	case OpCheckpoint:
		if !holds() {
			return refuse()
		}
		if op.Order > tb.order[op.Key] {
			r.Checkpoint, r.Finished, tb.order[op.Key] = op.Checkpoint, op.Finished, op.Order
		}
	case OpDelete:
		if !ok || r.Counter != op.Counter || r.Held(tb.wall) {
			return refuse()
		}
		delete(tb.rows, op.Key)
		return a
	}
	tb.rows[op.Key] = r
	return a
}

// node is one Machine driven by hand on a table, with its monotonic clock.
type node struct {
	t    *testing.T
	m    *Machine
	tb   *table
	mono time.Duration
	// fault, when set, decides each operation's fate: apply it or not, and the outcome to
	// answer (Unknown after applying: the answer was lost).
	fault func(op Op) (apply bool, oc Outcome)
	// outs collects what the Machine asked for other than operations.
	outs []Output
	arm  time.Duration
	// autoStop answers a clean StopReading with ReaderStopped at once.
	autoStop bool
}

func newNode(t *testing.T, tb *table, owner string) *node {
	return &node{t: t, tb: tb, m: New(Config{Stream: "s", Owner: owner, TTL: 3 * time.Second, Choose: firstChoice{}}), arm: -1}
}

func (n *node) instant() Instant { return Instant{Mono: n.mono, Wall: n.tb.wall} }

// step feeds in and performs every operation asked for, answering at once, until none is left.
func (n *node) step(in Input) {
	queue := n.m.Step(n.instant(), in)
	for len(queue) > 0 {
		o := queue[0]
		queue = queue[1:]
		switch o := o.(type) {
		case Send:
			apply, oc := true, Outcome(0)
			if n.fault != nil {
				apply, oc = n.fault(o.Op)
			}
			a := Answered{ID: o.Op.ID, Outcome: Unknown}
			if apply {
				a = n.tb.apply(o.Op)
			}
			if oc != 0 {
				a.Outcome = oc
			}
			if a.Outcome == Unknown {
				a.Rows = nil
			}
			queue = append(queue, n.m.Step(n.instant(), a)...)
		case Arm:
			n.arm = o.At
		case StopReading:
			n.outs = append(n.outs, o)
			if o.Clean && n.autoStop {
				queue = append(queue, n.m.Step(n.instant(), ReaderStopped{Shard: o.Shard})...)
			}
		default:
			n.outs = append(n.outs, o)
		}
	}
}

// advance moves the clocks to mono, ticking the Machine at every instant it armed on the way.
func (n *node) advance(to time.Duration) {
	for n.arm >= 0 && n.arm <= to {
		at := n.arm
		n.tb.wall = n.tb.wall.Add(at - n.mono)
		n.mono = at
		n.arm = -1
		n.step(Tick{})
	}
	n.tb.wall = n.tb.wall.Add(to - n.mono)
	n.mono = to
}

// took returns and forgets the outputs of type T collected so far.
func took[T Output](n *node) []T {
	var got []T
	rest := n.outs[:0]
	for _, o := range n.outs {
		if x, ok := o.(T); ok {
			got = append(got, x)
		} else {
			rest = append(rest, o)
		}
	}
	n.outs = rest
	return got
}

// joined returns a node joined with the given shards listed.
func joined(t *testing.T, tb *table, owner string, inc uint64, shards ...string) *node {
	return joinedWith(t, tb, owner, inc, 0, shards...)
}

// joinedWith is joined with a balance interval (0: the default).
func joinedWith(t *testing.T, tb *table, owner string, inc uint64, balance time.Duration, shards ...string) *node {
	n := newNode(t, tb, owner)
	n.m.cfg.Balance = max(n.m.cfg.Balance, balance)
	n.step(ShardsListed{Shards: listing(shards)})
	n.step(Join{Incarnation: inc})
	require.Equal(t, OwnerName(owner, inc), n.m.Owner())
	return n
}

// TestMachineJoinRenewClaim: a Machine joins (the heartbeat row created, read back, and renewed
// at once so that it notes the TTL), takes a free lease and reads it; its renewals move the
// row's counter every TTL/3 and, with the confirmations, keep the deadline ahead.
func TestMachineJoinRenewClaim(t *testing.T) {
	tb := newTable()
	n := joined(t, tb, "a", 0x1f, "shard-0")
	me := "a#000000000000001f"
	require.Equal(t, Row{Key: "s/~v2/owner/" + me, Owner: me, Expiry: tb.wall.Add(3 * time.Second), Counter: 2, Note: "ttl/3000"}, tb.rows["s/~v2/owner/"+me])
	starts := took[StartReading](n)
	require.Equal(t, []StartReading{{Shard: "shard-0", Tenure: Tenure{Owner: me, Counter: 1}}}, starts)
	require.Equal(t, me, tb.rows["s/shard-0"].Owner)
	require.True(t, tb.rows["s/shard-0"].Expiry.IsZero(), "bound to the heartbeat row: no expiry of its own")
	got, ok := n.m.MayHandOut(n.mono, "shard-0")
	require.True(t, ok)
	require.Equal(t, Tenure{Owner: me, Counter: 1}, got)
	_, ok = n.m.MayHandOut(n.mono, "shard-1")
	require.False(t, ok, "not held")

	for i := 1; i <= 6; i++ {
		n.advance(time.Duration(i) * time.Second)
		require.Equal(t, int64(2+i), tb.rows["s/~v2/owner/"+me].Counter, "renewed every TTL/3")
	}
	_, ok = n.m.MayHandOut(n.mono+1900*time.Millisecond, "shard-0")
	require.True(t, ok, "renewed and confirmed at 6 s: until 8 s")
	_, ok = n.m.MayHandOut(n.mono+2*time.Second, "shard-0")
	require.False(t, ok, "not at 2/3 TTL after the last renewal's send")
	require.Empty(t, took[StopReading](n))
}

// TestMachineDeadlineStopsHandOuts: when no renewal lands, hand-outs stop 2/3 TTL after the
// last one that did, and the shard is lost (no checkpoint, no release); a renewal whose answer
// was lost counts from its send once a read finds it landed.
func TestMachineDeadlineStopsHandOuts(t *testing.T) {
	tb := newTable()
	n := joined(t, tb, "a", 1, "shard-0")
	me := n.m.Owner()
	require.Len(t, took[StartReading](n), 1)
	hb := "s/~v2/owner/" + me
	n.fault = func(op Op) (bool, Outcome) {
		if op.Key == hb {
			return false, Unknown // the store hangs for the heartbeat row
		}
		return true, 0
	}
	n.advance(1999 * time.Millisecond)
	_, ok := n.m.MayHandOut(n.mono, "shard-0")
	require.True(t, ok)
	require.Empty(t, took[StopReading](n))
	n.advance(2 * time.Second)
	_, ok = n.m.MayHandOut(n.mono, "shard-0")
	require.False(t, ok, "2/3 TTL after the join's write")
	require.Equal(t, []StopReading{{Shard: "shard-0", Tenure: Tenure{Owner: me, Counter: 1}, Why: "the deadline passed"}}, took[StopReading](n))
	require.Equal(t, me, tb.rows["s/shard-0"].Owner, "nothing written: the lease is left")

	// The renewal at 3 s lands but its answer is lost; the read after it finds it.
	n.fault = func(op Op) (bool, Outcome) {
		if op.Key == hb && op.Kind == OpSteal {
			return true, Unknown
		}
		return true, 0
	}
	n.advance(3 * time.Second)
	require.Equal(t, int64(3), tb.rows[hb].Counter)
	n.advance(5900 * time.Millisecond)
	require.Empty(t, took[StartReading](n), "the round at the loss took nothing: the deadline had passed")
	n.advance(6 * time.Second)
	starts := took[StartReading](n)
	require.Len(t, starts, 1, "the lease, its own in the table and read nowhere, is taken up at the balance round")
	require.Greater(t, starts[0].Tenure.Counter, int64(1), "under a holding of its own write, never the old one")
	_, ok = n.m.MayHandOut(n.mono, "shard-0")
	require.True(t, ok)
}

// TestMachineReapSilentOwner: a second Machine takes over the heartbeat row of one that fell
// silent once its counter stood still for 3/4 TTL on its own clock, and then reads the shards
// bound to it at once.
func TestMachineReapSilentOwner(t *testing.T) {
	tb := newTable()
	a := joined(t, tb, "a", 1, "shard-0", "shard-1")
	require.Len(t, took[StartReading](a), 2)
	b := joined(t, tb, "b", 2, "shard-0", "shard-1")
	require.Empty(t, took[StartReading](b), "both held by a")
	// Both run in step for a while: a hands one shard back to b (b joined, so a is above its share).
	for ms := 100; ms <= 3000; ms += 100 {
		a.advance(time.Duration(ms) * time.Millisecond)
		b.advance(time.Duration(ms) * time.Millisecond)
	}
	for _, s := range took[StopReading](a) {
		require.True(t, s.Clean, "handed back cleanly")
		a.step(ReaderStopped{Shard: s.Shard})
	}
	for ms := 3100; ms <= 4000; ms += 100 {
		a.advance(time.Duration(ms) * time.Millisecond)
		b.advance(time.Duration(ms) * time.Millisecond)
	}
	bStarts := took[StartReading](b)
	require.Len(t, bStarts, 1, "b was handed its share")
	var aShard string
	for _, id := range []string{"shard-0", "shard-1"} {
		if _, ok := a.m.MayHandOut(a.mono, id); ok {
			aShard = id
		}
	}
	require.NotEmpty(t, aShard)
	silentFrom := a.mono
	aRow := tb.rows["s/~v2/owner/"+a.m.Owner()]
	// a stops: b alone runs on.
	var tookAt time.Duration
	for ms := 4100; ms <= 12000 && tookAt == 0; ms += 100 {
		b.advance(time.Duration(ms) * time.Millisecond)
		for _, s := range took[StartReading](b) {
			require.Equal(t, aShard, s.Shard)
			tookAt = b.mono
		}
	}
	require.NotZero(t, tookAt, "a's shard taken over")
	require.Equal(t, b.m.Owner(), tb.rows["s/"+aShard].Owner)
	_, ok := tb.rows["s/~v2/owner/"+a.m.Owner()]
	require.False(t, ok, "a's row taken over, released and deleted")
	require.GreaterOrEqual(t, tookAt-silentFrom, ReapAfter(3*time.Second)-RenewEvery(3*time.Second),
		"not before a's counter (%d) stood still for 3/4 TTL as b saw it", aRow.Counter)
	require.LessOrEqual(t, tookAt-silentFrom, 3*time.Second, "within TTL/3 + 3/4 TTL and a claim tick")
	// a, resumed, finds its row taken over: every shard lost, and it asks to join anew.
	a.advance(12 * time.Second)
	lost := took[StopReading](a)
	require.Len(t, lost, 1)
	require.False(t, lost[0].Clean)
	require.Len(t, took[Rejoin](a), 1)
	_, ok = a.m.MayHandOut(a.mono, aShard)
	require.False(t, ok)
}

// TestMachineClose: Close drains every shard read here, writes its checkpoint, releases its
// lease, then resigns the deadline and drops the heartbeat row.
func TestMachineClose(t *testing.T) {
	tb := newTable()
	n := joined(t, tb, "a", 7, "shard-0")
	me := n.m.Owner()
	require.Len(t, took[StartReading](n), 1)
	n.step(Checkpointed{Shard: "shard-0", Checkpoint: "100"})
	require.Equal(t, "100", tb.rows["s/shard-0"].Checkpoint)
	n.step(Close{})
	require.Equal(t, []StopReading{{Shard: "shard-0", Tenure: Tenure{Owner: me, Counter: 1}, Clean: true, Why: "closing"}}, took[StopReading](n))
	_, ok := n.m.MayHandOut(n.mono, "shard-0")
	require.True(t, ok, "draining: what was handed out settles, the deadline still holds")
	n.step(Checkpointed{Shard: "shard-0", Checkpoint: "105"})
	require.Empty(t, took[Closed](n))
	n.step(ReaderStopped{Shard: "shard-0"})
	require.Equal(t, Row{Key: "s/shard-0", Counter: 2, Checkpoint: "105"}, tb.rows["s/shard-0"], "released with its checkpoint")
	_, ok = tb.rows["s/~v2/owner/"+me]
	require.False(t, ok, "heartbeat row dropped")
	require.Len(t, took[Closed](n), 1)
	_, ok = n.m.MayHandOut(n.mono, "shard-0")
	require.False(t, ok)
	require.Nil(t, n.m.Step(n.instant(), Tick{}), "closed: no more inputs")
}

// TestMachineUnknownTake: a take whose answer was lost is read back: applied, the shard is
// read under the holding this write made; not applied, it is not read.
func TestMachineUnknownTake(t *testing.T) {
	for _, applied := range []bool{true, false} {
		tb := newTable()
		n := newNode(t, tb, "a")
		n.fault = func(op Op) (bool, Outcome) {
			if op.Key == "s/shard-0" && op.Kind == OpAcquire {
				return applied, Unknown
			}
			return true, 0
		}
		n.step(ShardsListed{Shards: []Shard{{ID: "shard-0"}}})
		n.step(Join{Incarnation: 3})
		starts := took[StartReading](n)
		if !applied {
			require.Empty(t, starts)
			require.Zero(t, tb.rows["s/shard-0"].Owner)
			continue
		}
		require.Equal(t, []StartReading{{Shard: "shard-0", Tenure: Tenure{Owner: n.m.Owner(), Counter: 1}}}, starts)
	}
}

// TestMachineStealWaits: 7 shards split 3/3/1 between three Machines, the two at the ceiling
// not yielding (their balance rounds are far off); the one below the floor steals one on its
// balance round: the lease written pending, the change row moved, and it binds
// and reads the lease only StealWait after the move. The victim, confirming against the change
// row, has lost the shard by then. A thief with a shorter TTL than its victims' waits by the
// longest TTL their rows note.
func TestMachineStealWaits(t *testing.T) {
	for _, thiefTTL := range []time.Duration{3 * time.Second, 1500 * time.Millisecond} {
		t.Run(thiefTTL.String(), func(t *testing.T) { testMachineStealWaits(t, thiefTTL) })
	}
}

func testMachineStealWaits(t *testing.T, thiefTTL time.Duration) {
	tb := newTable()
	shards := []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6"}
	var nodes []*node
	run := func(to time.Duration) {
		for ms := nodes[0].mono + 50*time.Millisecond; ms <= to; ms += 50 * time.Millisecond {
			for _, n := range nodes {
				n.advance(ms)
			}
		}
	}
	held := func(n *node) []string {
		var ids []string
		for _, id := range shards {
			if _, ok := n.m.MayHandOut(n.mono, id); ok {
				ids = append(ids, id)
			}
		}
		return ids
	}
	a := joinedWith(t, tb, "a", 1, time.Hour, shards...)
	a.autoStop = true
	nodes = append(nodes, a)
	run(500 * time.Millisecond)
	c := newNode(t, tb, "c")
	c.m.cfg.Balance = time.Hour
	c.autoStop, c.mono = true, a.mono
	c.step(ShardsListed{Shards: listing(shards)})
	c.step(Join{Incarnation: 3})
	nodes = append(nodes, c)
	run(2 * time.Second)
	require.Len(t, held(a), 4)
	require.Len(t, held(c), 3)
	b := newNode(t, tb, "b")
	b.m = New(Config{Stream: "s", Owner: "b", TTL: thiefTTL, Choose: firstChoice{}})
	b.autoStop, b.mono = true, a.mono
	b.step(ShardsListed{Shards: listing(shards)})
	b.step(Join{Incarnation: 2})
	nodes = append(nodes, b)
	run(4 * time.Second)
	require.Len(t, held(a), 3)
	require.Len(t, held(b), 1)
	require.Len(t, held(c), 3)
	var stolen string
	var stolenAt time.Duration
	for to := b.mono + 50*time.Millisecond; to <= 12*time.Second && stolen == ""; to += 50 * time.Millisecond {
		run(to)
		for id, r := range tb.rows {
			if r.Owner == b.m.Owner() && PendingAt(r, tb.wall) {
				stolen, stolenAt = strings.TrimPrefix(id, "s/"), b.mono
			}
		}
	}
	require.NotEmpty(t, stolen, "b stole for balance")
	victim := a
	if !slices.Contains(held(a), stolen) {
		victim = c
	}
	require.Contains(t, held(victim), stolen, "the victim reads it still")
	took[StartReading](b)
	var readAt time.Duration
	for to := stolenAt + 50*time.Millisecond; to <= stolenAt+4*time.Second && readAt == 0; to += 50 * time.Millisecond {
		run(to)
		for _, s := range took[StartReading](b) {
			require.Equal(t, stolen, s.Shard)
			readAt = b.mono
		}
		if readAt == 0 {
			_, ok := b.m.MayHandOut(b.mono, stolen)
			require.False(t, ok, "pending: not read yet")
		}
	}
	require.NotZero(t, readAt)
	require.GreaterOrEqual(t, readAt-stolenAt, StealWait(3*time.Second))
	require.NotContains(t, held(victim), stolen, "the victim lost it before")
	lost := took[StopReading](victim)
	require.True(t, slices.ContainsFunc(lost, func(s StopReading) bool { return s.Shard == stolen && !s.Clean }), "lost, not handed back")
	require.Len(t, held(b), 2)
}

// TestMachineCloneString: a clone steps on its own; String is canonical, the same for equal
// states, and changes with the state.
func TestMachineCloneString(t *testing.T) {
	tb := newTable()
	n := joined(t, tb, "a", 1, "shard-0", "shard-1")
	before := n.m.String()
	c := n.m.Clone()
	require.Equal(t, before, c.String())
	for range 3 {
		require.Equal(t, before, n.m.String(), "String is stable")
	}
	c.Step(Instant{Mono: 5 * time.Second, Wall: tb.wall.Add(5 * time.Second)}, Close{})
	require.NotEqual(t, before, c.String())
	require.Equal(t, before, n.m.String(), "the original is untouched by its clone's steps")
	_, ok := n.m.MayHandOut(n.mono, "shard-0")
	require.True(t, ok)
}

// listing returns shards with no parents, open.
func listing(ids []string) []Shard {
	var ls []Shard
	for _, s := range ids {
		ls = append(ls, Shard{ID: s})
	}
	return ls
}
