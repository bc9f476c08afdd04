package sim

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/gostream/kinesub/lease"
)

// Sink models dynamosink (dynamosink/sink.go, skip.go) as the fleet simulation's consumers use
// it, and keeps the ledger of the effects it applied, to check its promise: every record's
// effect is applied exactly once in the latest epoch, unless the user explicitly skipped it
// (a dead letter left parked). Where Checker.Apply keeps one mark per key, the model keeps
// dynamosink's: one per shard and key, holding the position (epoch, sequence and sub-sequence
// number) of the last record applied, the lease table and counter of the holding that applied
// it, and the records skipped (SkipMark) and not yet redriven. A record's write lands when its
// key has no mark in its shard, or the mark is below it and was not written by a later holding
// of the shard in the same lease table; a redrive lands once for a skipped record the mark has
// passed.
//
// It is safe for concurrent use.
type Sink struct {
	// Faults to plant, each breaking the promise in a way the ledger must catch: marks kept
	// per key rather than per shard and key (a key in two open shards then loses records as
	// replays); the epoch left out of positions (a seek back in a new epoch then applies
	// nothing again); redrives that apply nothing; lease counters compared across lease
	// tables (a new lease table's holdings then stall behind the old table's marks).
	PerKeyMarks, IgnoreEpoch, NoRedrive, CountersAcrossTables bool

	mu       sync.Mutex
	marks    map[markID]*sinkMark
	keyOf    map[string]string
	applied  map[effect]int  // (record, epoch) → times its effect was applied
	left     map[string]bool // records the user skipped for good (Left)
	epoch    int64           // the latest epoch (Raise)
	answers  [4]int          // by SinkAnswer
	redriven int
	errs     []string
}

// SinkRecord is one record as the modelled sink sees it: dynamosink's Mark.
type SinkRecord struct {
	ID     string // the record's identity: its effect is the same on every copy and delivery
	Shard  string
	Key    string
	At     lease.Checkpoint // sequence and sub-sequence number in its shard
	Epoch  int64            // WithEpoch's answer for it
	Leases string           // WithLeaseTable's name; "" compares no holdings
	Tenure lease.Tenure
}

// SinkAnswer is what the modelled sink answered.
type SinkAnswer int

const (
	SinkApplied    SinkAnswer = iota // the effect landed (or, for Skip, the record was recorded as skipped)
	SinkReplay                       // at or below the mark and not skipped: ack it
	SinkOutOfOrder                   // skipped, and passed by a later record: redrive applies it
	SinkSuperseded                   // a later holding (same lease table) or a later epoch wrote the mark
)

func (a SinkAnswer) String() string {
	return [...]string{"applied", "replay", "out of order", "superseded"}[a]
}

type markID struct{ shard, key string }

type effect struct {
	id    string
	epoch int64
}

type sinkPos struct {
	epoch int64
	at    lease.Checkpoint
}

func (a sinkPos) less(b sinkPos) bool {
	if a.epoch != b.epoch {
		return a.epoch < b.epoch
	}
	return after(b.at, a.at)
}

type sinkMark struct {
	pos     sinkPos
	leases  string
	counter int64
	skipped map[sinkPos]bool
}

// NewSink returns a model of an empty mark table.
func NewSink() *Sink {
	return &Sink{marks: map[markID]*sinkMark{}, keyOf: map[string]string{}, applied: map[effect]int{}, left: map[string]bool{}}
}

func (s *Sink) fail(format string, args ...any) {
	s.errs = append(s.errs, fmt.Sprintf("%s: ", time.Now().UTC().Format("15:04:05.000"))+fmt.Sprintf(format, args...))
}

// Put records a record published under key: its effect is owed from now on.
func (s *Sink) Put(id, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keyOf[id] = key
}

// Raise makes epoch the latest: every record's effect is owed once in it.
func (s *Sink) Raise(epoch int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epoch = max(s.epoch, epoch)
}

// Left records that the user skipped record id for good (a dead letter never redriven): its
// effect is owed no more.
func (s *Sink) Left(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.left[id] = true
}

func (s *Sink) pos(r SinkRecord) sinkPos {
	p := sinkPos{r.Epoch, r.At}
	if s.IgnoreEpoch {
		p.epoch = 0
	}
	return p
}

func (s *Sink) mark(r SinkRecord) *sinkMark {
	id := markID{r.Shard, r.Key}
	if s.PerKeyMarks {
		id.shard = ""
	}
	m := s.marks[id]
	if m == nil {
		m = &sinkMark{skipped: map[sinkPos]bool{}}
		s.marks[id] = m
	}
	return m
}

// land applies r's effect, checking it was not applied before in its epoch.
func (s *Sink) land(r SinkRecord, how string) {
	e := effect{r.ID, r.Epoch}
	s.applied[e]++
	if n := s.applied[e]; n > 1 {
		s.fail("key %s: %s's effect applied %d times in epoch %d (%s, %s at %s/%d under %s/%d)",
			r.Key, r.ID, n, r.Epoch, how, r.Shard, r.At.Sequence, r.At.SubSequence, r.Tenure.Owner, r.Tenure.Counter)
	}
}

// refusal is dynamosink's answer to a record its condition refused, mark m standing.
func (s *Sink) refusal(m *sinkMark, me sinkPos) SinkAnswer {
	switch {
	case !me.less(m.pos) && me != m.pos:
		return SinkSuperseded // below the mark is false: a later holding wrote it
	case m.pos.epoch > me.epoch:
		return SinkSuperseded
	case m.skipped[me]:
		return SinkOutOfOrder
	}
	return SinkReplay
}

// Apply models Sink.Apply: the record's effect and its key's new mark in one conditional write.
func (s *Sink) Apply(r SinkRecord) SinkAnswer {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.apply(r, "applied")
	s.answers[a]++
	return a
}

func (s *Sink) apply(r SinkRecord, how string) SinkAnswer {
	m, me := s.mark(r), s.pos(r)
	exists := m.pos.at.Sequence != ""
	fenced := r.Leases != "" && m.counter > r.Tenure.Counter && (m.leases == r.Leases || s.CountersAcrossTables && m.leases != "")
	if exists && (!m.pos.less(me) || fenced) {
		return s.refusal(m, me)
	}
	s.land(r, how)
	m.pos, m.leases, m.counter = me, r.Leases, r.Tenure.Counter
	delete(m.skipped, me)
	return SinkApplied
}

// Skip models Sink.SkipMark: the record is recorded as skipped unless its mark passed it
// already (then it was applied: SinkReplay, or a later epoch's mark: SinkSuperseded).
func (s *Sink) Skip(r SinkRecord) SinkAnswer {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, me := s.mark(r), s.pos(r)
	if m.pos.at.Sequence == "" || m.pos.less(me) || m.skipped[me] {
		m.skipped[me] = true
		return SinkApplied
	}
	if m.pos.epoch > me.epoch {
		return SinkSuperseded
	}
	return SinkReplay
}

// Redrive models Sink.RedriveMark: a skipped record the mark passed is applied once, the mark
// left where it is; one the mark did not pass is applied in order.
func (s *Sink) Redrive(r SinkRecord) SinkAnswer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.NoRedrive {
		return SinkApplied
	}
	m, me := s.mark(r), s.pos(r)
	if m.pos.at.Sequence == "" || m.pos.less(me) {
		a := s.apply(r, "redriven in order")
		if a == SinkApplied {
			s.redriven++
		}
		return a
	}
	if m.skipped[me] && m.pos.epoch == me.epoch {
		s.land(r, "redriven")
		delete(m.skipped, me)
		s.redriven++
		return SinkApplied
	}
	return s.refusal(m, me)
}

// Violations returns the effects applied twice in one epoch, in order.
func (s *Sink) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.errs...)
}

// Unapplied returns the records put whose effect was not applied in the latest epoch and that
// the user did not skip for good, sorted.
func (s *Sink) Unapplied() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id := range s.keyOf {
		if s.applied[effect{id, s.epoch}] == 0 && !s.left[id] {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// SinkStats is what the modelled sink did in a run.
type SinkStats struct {
	Applied, Replays, OutOfOrder, Superseded, Redriven, Left int
}

// Stats reports what the modelled sink answered.
func (s *Sink) Stats() SinkStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SinkStats{Applied: s.answers[SinkApplied], Replays: s.answers[SinkReplay], OutOfOrder: s.answers[SinkOutOfOrder],
		Superseded: s.answers[SinkSuperseded], Redriven: s.redriven, Left: len(s.left)}
}
