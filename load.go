package kinesub

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gostream/kinesub/internal/protocol"
	"github.com/gostream/kinesub/lease"
)

// Load is what a subscriber's readers fetch, in bytes and records a second. Every reader
// counts what it fetches (shardMeter); the subscriber notes the sum on its heartbeat row with
// each renewal (a lease.Store.StealNote at the row's own counter, which writes lease.Lease.Note),
// so that its peers know it at no extra write. Balancing uses
// the notes to move shards from the most to the least loaded owners (balance.go, planLoad).
//
// A rate is what arrived over the last window (the longer of TTL/3 and the balance
// interval), by the records' arrival times: long enough that the batches of a poll interval
// average out, short enough that a moved shard's load shows in its new owner's note before the
// next balance round.

// loadNote is the note format: "load/1 <bytes/s> <records/s> <utilization ‰>", the last the
// consumer's utilization over the same window (utilization.go), in thousandths. Notes written
// before it was added end after the records; a reader takes the fields it knows and ignores
// any after them (fmt.Sscanf stops at the end of its format), so a note with more fields still
// reads as a load.
const loadNote = "load/1 %d %d %d"

// movedRounds is how many balance rounds a shard that moved for load stays where it is: one
// taken here in a round balanced by load is not handed back for load, and one handed back from
// here is not taken again here. Loads take that long to show the move in every note. Shards
// taken while balancing by count (at start, when an owner joins) may move for load at once.
const movedRounds = 2

// shardLoad is one shard's measured load.
type shardLoad struct {
	bytes, records float64 // per second
}

// meterSlots is how many slots of arrival time a meter keeps: a window is a quarter of them.
const meterSlots = 8

// meterSlot is what arrived in one slot of arrival time (window/4 long).
type meterSlot struct {
	slot           int64 // arrival time / slot width
	bytes, records int64
}

// shardMeter counts what one holding of a shard fetched, by the records' arrival times (the
// ApproximateArrivalTimestamp Kinesis stamps on each): so the backlog a new holder catches up
// on counts when it arrived, not as a burst of traffic. add is called by its reader; rate by
// anyone. It is safe for concurrent use.
type shardMeter struct {
	taken  time.Time // when the holding began
	forLd  bool      // taken in a round balanced by load
	width  int64     // a slot's length in nanoseconds: window/4
	mu     sync.Mutex
	slots  [meterSlots]meterSlot
	oldest int64 // the arrival of the first record counted (nanoseconds), 0: none yet
}

func newShardMeter(now time.Time, window time.Duration) *shardMeter {
	return &shardMeter{taken: now, width: max(int64(window/4), 1)}
}

// add counts a page of records.
func (m *shardMeter) add(records []types.Record) {
	if m == nil || len(records) == 0 {
		return
	}
	now := time.Now().UnixNano()
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range records {
		at := now
		if t := records[i].ApproximateArrivalTimestamp; t != nil && t.Unix() > 0 {
			at = min(t.UnixNano(), now) // a clock ahead of this host's counts as now
		}
		at = max(at, now-meterSlots*m.width) // older than the slots kept: the oldest slot
		if m.oldest == 0 || at < m.oldest {
			m.oldest = at
		}
		slot := at / m.width
		sl := &m.slots[slot%meterSlots]
		if sl.slot != slot {
			if sl.slot > slot {
				continue // a later slot took its place
			}
			*sl = meterSlot{slot: slot}
		}
		sl.bytes += int64(len(records[i].Data))
		sl.records++
	}
}

// rate returns what arrived over the last window: the four slots before the current one,
// whose records have been fetched by now unless the reader lags (the current one's may not
// be), or since the first record counted when that is later (a holding younger than the
// window would otherwise count its shard at a fraction of its traffic). A holding whose first
// record arrived in the current slot counts that slot.
func (m *shardMeter) rate(now time.Time) shardLoad {
	n := now.UnixNano()
	cur := n / m.width
	first, end := cur-4, cur*m.width
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.oldest == 0 {
		return shardLoad{}
	}
	if m.oldest >= end { // young: only the current slot
		first, end = cur, n
	}
	var l shardLoad
	for _, sl := range m.slots {
		if sl.slot >= first && sl.slot < cur || sl.slot == cur && first == cur {
			l.bytes += float64(sl.bytes)
			l.records += float64(sl.records)
		}
	}
	d := time.Duration(end - max(first*m.width, m.oldest)).Seconds()
	d = max(d, float64(time.Millisecond)/float64(time.Second))
	l.bytes /= d
	l.records /= d
	return l
}

// unmeasured reports whether the holding is younger than window and has counted no record
// yet: its shard's load is not known.
func (m *shardMeter) unmeasured(now time.Time, window time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.oldest == 0 && now.Sub(m.taken) < window
}

// loadBook is a subscriber's record of its shards' loads and of the shards that moved lately.
// It is safe for concurrent use.
type loadBook struct {
	window time.Duration // what rates are measured over
	recent time.Duration // how long a moved shard stays put: movedRounds balance rounds
	util   *utilMeter    // the consumer's utilization, over window

	mu     sync.Mutex
	byLoad bool                   // the last claim round likely balanced by load: every note a load, some not zero
	meters map[string]*shardMeter // the holdings of the shards held here, by shard id
	back   map[string]time.Time   // shards handed back from here → when
}

func newLoadBook(ttl, balance time.Duration) *loadBook {
	window := max(ttl/3, balance, 100*time.Millisecond)
	return &loadBook{window: window, recent: movedRounds * balance, util: newUtilMeter(time.Now(), window),
		meters: map[string]*shardMeter{}, back: map[string]time.Time{}}
}

// took starts the meter of a new holding of shard id.
func (b *loadBook) took(id string) *shardMeter {
	if b == nil {
		return nil
	}
	m := newShardMeter(time.Now(), b.window)
	b.mu.Lock()
	defer b.mu.Unlock()
	m.forLd = b.byLoad
	b.meters[id] = m
	return m
}

// ended forgets holding m of shard id, handed back for balance when back is set.
func (b *loadBook) ended(id string, m *shardMeter, back bool) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.meters[id] == m {
		delete(b.meters, id)
	}
	if back {
		b.back[id] = time.Now()
	}
}

// total returns the load of every shard held here.
func (b *loadBook) total() shardLoad {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	var t shardLoad
	for _, m := range b.meters {
		l := m.rate(now)
		t.bytes += l.bytes
		t.records += l.records
	}
	return t
}

// note returns the heartbeat row's note: the load of every shard held here, and the
// consumer's utilization.
func (b *loadBook) note() string {
	t := b.total()
	return fmt.Sprintf(loadNote, int64(math.Round(t.bytes)), int64(math.Round(t.records)),
		perMille(b.util.utilization(time.Now())))
}

// noteLoad is what a note says: the load, and the utilization when the note carries one.
type noteLoad struct {
	shardLoad
	util    float64 // 0 to 1
	hasUtil bool    // false: a note written before utilizations were noted
}

// parseLoad reads a note written by note, or by a version that noted the load alone; ok is
// false for any other text (a store without notes, a subscriber of an earlier version, a
// heartbeat row not renewed yet).
func parseLoad(note string) (noteLoad, bool) {
	var b, r, u int64
	n, err := fmt.Sscanf(note, loadNote, &b, &r, &u)
	if n < 2 || b < 0 || r < 0 {
		return noteLoad{}, false
	}
	l := noteLoad{shardLoad: shardLoad{bytes: float64(b), records: float64(r)}}
	if n == 3 && err == nil && u >= 0 && u <= 1000 {
		l.util, l.hasUtil = float64(u)/1000, true
	}
	return l, true
}

// view returns what balancing needs of the loads: the owners' notes (seen: the heartbeat rows
// by owner) and this subscriber's shards, measured now.
func (b *loadBook) view(seen map[string]*beatSeen) *protocol.LoadIn {
	if b == nil {
		return nil
	}
	in := &protocol.LoadIn{Owners: map[string]float64{}, Mine: map[string]float64{}, Moved: map[string]bool{}}
	known, some := true, false
	for owner, s := range seen {
		if l, ok := parseLoad(s.Row.Note); ok {
			in.Owners[owner] = l.bytes
			some = some || l.bytes > 0
		} else if s.Row.Owner != "" {
			known = false
		}
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.byLoad = known && some
	for id, m := range b.meters {
		in.Mine[id] = m.rate(now).bytes
		if m.unmeasured(now, b.window) {
			in.Settling = true
		}
		if m.forLd && now.Sub(m.taken) < b.recent {
			in.Moved[id] = true
		}
	}
	for id, at := range b.back {
		switch {
		case now.Sub(at) >= b.recent:
			delete(b.back, id)
		default:
			in.Moved[id] = true
		}
	}
	return in
}

// stealHeartbeat renews the heartbeat row: a Steal at its own counter that also notes the load
// of the shards held here and this subscriber's lease TTL, by which peers judge the row
// (protocol.NoteTTL).
func (s *Subscriber) stealHeartbeat(ctx context.Context, key, name string, counter int64, ttl time.Duration) (bool, error) {
	return s.cfg.store.StealNote(ctx, key, name, counter, ttl, protocol.NoteTTL(s.env.loads.note(), s.cfg.leaseTTL))
}

// noteJoined renews the heartbeat row just joined, at once, so that it notes this subscriber's
// lease TTL before any lease is taken: claim rounds take nothing until a renewal landed (the
// next tick's, when this one does not), since a peer with a shorter TTL would judge the row by
// its own and take it over while this subscriber may still hand out.
func (s *Subscriber) noteJoined(ctx context.Context) {
	t := s.tenure
	name, key := t.self()
	row := t.holding()
	t.attempt(time.Now())
	cctx, cancel := context.WithTimeout(ctx, min(s.cfg.requestTimeout, protocol.RenewEvery(t.ttl)))
	defer cancel()
	if ok, err := s.stealHeartbeat(cctx, key, name, row.Counter, t.ttl); err == nil && ok {
		t.renewed(lease.Tenure{Owner: name, Counter: row.Counter + 1})
	}
}

// mayTake reports whether claim rounds may take leases: a renewal landed since the heartbeat
// row was joined, so the row notes this subscriber's TTL (noteJoined).
func (s *Subscriber) mayTake() bool { return s.tenure.noted.Load() }

// endedBy reports whether the shard's holding ends for cause c.
func (w *worker) endedBy(c cause) bool {
	w.lifeMu.Lock()
	defer w.lifeMu.Unlock()
	return w.end != nil && w.end.cause == c
}
