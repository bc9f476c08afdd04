package protosim

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gostream/kinesub/internal/protocol"
)

// toy is a small lease machine for the simulator's own tests, so that they do not wait for
// protocol.Machine: it takes free shard leases for good (no TTL) and gives them up only on
// Close or a hand-back, after its reader stopped. That is safe whatever the store, the clocks
// or the network do, though a crashed toy's leases are never read again (a goal, not a
// promise). Its broken modes are what the checks must catch.
type toy struct {
	mode   toyMode
	slot   int
	stream string
	ttl    time.Duration

	owner    string
	closing  bool
	closed   bool
	next     protocol.OpID
	shards   []protocol.Shard
	finished map[string]bool // parent rows read as SHARD_END
	held     map[string]*toyHolding
	ops      map[protocol.OpID]toyOp
	armed    time.Duration
}

type toyMode int

const (
	toySafe toyMode = iota
	// toyNoDeadline takes leases with a TTL, never renews them and reads until told to stop:
	// once the lease lapses on a peer's wall clock, the peer takes it and reads too.
	toyNoDeadline
	// toyLateHandOut stops reading at a deadline (TTL after its take, on its own monotonic
	// clock), but only on a tick: MayHandOut does not look, so after a pause it hands out past
	// the deadline.
	toyLateHandOut
	// toyCheckpointAhead writes each checkpoint a few records past the one its reader asked
	// for, as a consumer that checkpoints on hand-out rather than on acknowledgement does.
	toyCheckpointAhead
)

type toyHolding struct {
	counter  int64
	reading  bool
	stopping bool // a reader stop asked for; release once it stopped
	release  bool
	order    int64
	deadline time.Duration
	known    bool // counter known (read back)
}

type toyOp struct {
	kind  protocol.OpKind
	shard string
	sent  time.Duration
}

func newToy(mode toyMode, stream string, ttl time.Duration) NewCore {
	return func(slot int, _ protocol.Chooser) Core {
		return &toy{mode: mode, slot: slot, stream: stream, ttl: ttl, finished: map[string]bool{},
			held: map[string]*toyHolding{}, ops: map[protocol.OpID]toyOp{}}
	}
}

func (m *toy) Clone() Core {
	c := *m
	c.shards = append([]protocol.Shard(nil), m.shards...)
	c.finished = make(map[string]bool, len(m.finished))
	for k, v := range m.finished {
		c.finished[k] = v
	}
	c.held = make(map[string]*toyHolding, len(m.held))
	for k, v := range m.held {
		h := *v
		c.held[k] = &h
	}
	c.ops = make(map[protocol.OpID]toyOp, len(m.ops))
	for k, v := range m.ops {
		c.ops[k] = v
	}
	return &c
}

func (m *toy) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s closing=%t closed=%t next=%d armed=%d\n", m.owner, m.closing, m.closed, m.next, m.armed)
	for _, k := range sortedKeys(m.held) {
		h := m.held[k]
		fmt.Fprintf(&b, " held %s %+v\n", k, *h)
	}
	ids := make([]int, 0, len(m.ops))
	for id := range m.ops {
		ids = append(ids, int(id))
	}
	sort.Ints(ids)
	for _, id := range ids {
		o := m.ops[protocol.OpID(id)]
		fmt.Fprintf(&b, " op %d %d %s\n", id, o.kind, o.shard)
	}
	for _, k := range sortedKeys(m.finished) {
		fmt.Fprintf(&b, " fin %s\n", k)
	}
	for _, s := range m.shards {
		fmt.Fprintf(&b, " shard %s %v\n", s.ID, s.Parents)
	}
	return b.String()
}

func (m *toy) key(shard string) string { return m.stream + "/" + shard }

func (m *toy) send(outs []protocol.Output, now time.Duration, op protocol.Op, shard string) []protocol.Output {
	m.next++
	op.ID = m.next
	m.ops[op.ID] = toyOp{kind: op.Kind, shard: shard, sent: now}
	return append(outs, protocol.Send{Op: op})
}

func (m *toy) busy(shard string) bool {
	for _, o := range m.ops {
		if o.shard == shard {
			return true
		}
	}
	return false
}

func (m *toy) Step(now protocol.Instant, in protocol.Input) []protocol.Output {
	if m.closed {
		return nil
	}
	var outs []protocol.Output
	switch in := in.(type) {
	case protocol.Join:
		m.owner = fmt.Sprintf("i%d#%08x", m.slot, uint32(in.Incarnation))
		outs = m.arm(outs, now.Mono)
	case protocol.ShardsListed:
		m.shards = in.Shards
	case protocol.Tick:
		if m.armed <= now.Mono {
			m.armed = 0
		}
		outs = m.tick(outs, now.Mono)
		outs = m.arm(outs, now.Mono)
	case protocol.Answered:
		outs = m.answered(outs, now.Mono, in)
	case protocol.Checkpointed:
		if h := m.held[in.Shard]; h != nil && h.reading {
			h.order++
			cp := in.Checkpoint
			if m.mode == toyCheckpointAhead && cp != ShardEnd {
				cp = fmtPos(parsePos(cp) + 3)
			}
			outs = m.send(outs, now.Mono, protocol.Op{Kind: protocol.OpCheckpoint, Key: m.key(in.Shard), Owner: m.owner,
				Counter: h.counter, Checkpoint: cp, Finished: in.Finished, Order: h.order}, "")
		}
	case protocol.ReaderStopped:
		if h := m.held[in.Shard]; h != nil {
			h.reading = false
			if h.release {
				outs = m.send(outs, now.Mono, protocol.Op{Kind: protocol.OpRelease, Key: m.key(in.Shard), Owner: m.owner, Counter: h.counter}, in.Shard)
				delete(m.held, in.Shard)
			}
		}
	case protocol.HandBack:
		outs = m.stop(outs, in.Shard, true, true, "hand-back")
	case protocol.Close:
		m.closing = true
		for _, s := range sortedKeys(m.held) {
			outs = m.stop(outs, s, true, true, "close")
		}
		for _, s := range sortedKeys(m.held) {
			if h := m.held[s]; !h.reading && !h.stopping && h.known {
				outs = m.send(outs, now.Mono, protocol.Op{Kind: protocol.OpRelease, Key: m.key(s), Owner: m.owner, Counter: h.counter}, s)
				delete(m.held, s)
			}
		}
	}
	if m.closing && len(m.held) == 0 && len(m.ops) == 0 {
		m.closed = true
		outs = append(outs, protocol.Closed{})
	}
	return outs
}

func (m *toy) arm(outs []protocol.Output, now time.Duration) []protocol.Output {
	if m.armed != 0 {
		return outs
	}
	m.armed = now + m.ttl/3
	return append(outs, protocol.Arm{At: m.armed})
}

func (m *toy) stop(outs []protocol.Output, shard string, clean, release bool, why string) []protocol.Output {
	h := m.held[shard]
	if h == nil || !h.reading || h.stopping {
		if h != nil {
			h.release = h.release || release
		}
		return outs
	}
	h.stopping, h.release = true, release
	return append(outs, protocol.StopReading{Shard: shard, Tenure: protocol.Tenure{Owner: m.owner, Counter: h.counter}, Clean: clean, Why: why})
}

func (m *toy) tick(outs []protocol.Output, now time.Duration) []protocol.Output {
	if m.closing {
		return outs
	}
	for _, s := range sortedKeys(m.held) {
		if h := m.held[s]; m.mode == toyLateHandOut && h.reading && now >= h.deadline {
			outs = m.stop(outs, s, false, false, "deadline")
			delete(m.held, s)
		}
	}
	for _, s := range m.shards {
		if m.held[s.ID] != nil || m.busy(s.ID) {
			continue
		}
		ready := true
		for _, p := range s.Parents {
			if !m.finished[p] {
				ready = false
				if !m.busy(p) {
					outs = m.send(outs, now, protocol.Op{Kind: protocol.OpRead, Key: m.key(p)}, p)
				}
			}
		}
		if !ready {
			continue
		}
		ttl := time.Duration(0)
		if m.mode == toyNoDeadline || m.mode == toyLateHandOut {
			ttl = m.ttl
		}
		outs = m.send(outs, now, protocol.Op{Kind: protocol.OpAcquire, Key: m.key(s.ID), Owner: m.owner, TTL: ttl}, s.ID)
	}
	return outs
}

func (m *toy) answered(outs []protocol.Output, now time.Duration, a protocol.Answered) []protocol.Output {
	o, ok := m.ops[a.ID]
	if !ok {
		return outs
	}
	delete(m.ops, a.ID)
	switch o.kind {
	case protocol.OpAcquire:
		if a.Outcome != protocol.Refused && !m.closing {
			// The answer carries no counter: read it back (also after Unknown: it may have landed).
			m.held[o.shard] = &toyHolding{deadline: o.sent + m.ttl}
			outs = m.send(outs, now, protocol.Op{Kind: protocol.OpRead, Key: m.key(o.shard)}, o.shard)
		}
	case protocol.OpRead:
		if a.Outcome != protocol.Applied || len(a.Rows) != 1 {
			if h := m.held[o.shard]; h != nil && !h.known {
				delete(m.held, o.shard)
			}
			break
		}
		row := a.Rows[0]
		if row.Finished {
			m.finished[o.shard] = true
		}
		h := m.held[o.shard]
		if h == nil || h.known {
			break
		}
		if row.Owner != m.owner || m.closing {
			delete(m.held, o.shard)
			break
		}
		h.counter, h.known = row.Counter, true
		if row.Finished {
			break // held, nothing to read
		}
		h.reading = true
		outs = append(outs, protocol.StartReading{Shard: o.shard, Tenure: protocol.Tenure{Owner: m.owner, Counter: h.counter}, Checkpoint: row.Checkpoint})
	}
	return outs
}

func (m *toy) MayHandOut(now time.Duration, shard string) (protocol.Tenure, bool) {
	h := m.held[shard]
	if h == nil || !h.reading || h.stopping {
		return protocol.Tenure{}, false
	}
	return protocol.Tenure{Owner: m.owner, Counter: h.counter}, true
}
