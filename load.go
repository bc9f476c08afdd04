package kinesub

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Load is what a subscriber's readers fetch, in bytes and records a second. Every reader
// counts what it fetches (shardMeter); the subscriber notes the sum on its heartbeat row with
// each renewal (a Steal at the row's own counter that also writes lease.Lease.Note, when the
// store is a lease.NoteStealer), so that its peers know it at no extra write. Balancing uses
// the notes to move shards from the most to the least loaded owners (balance.go, planLoad).
//
// A rate is measured over the last one to two windows of loadWindow: long enough that the
// batches of a poll interval average out, short enough that a moved shard's load shows in its
// new owner's note within a balance round.

// loadNote is the note format: "load/1 <bytes/s> <records/s>".
const loadNote = "load/1 %d %d"

// movedRounds is how many balance rounds a shard that moved stays where it is: one taken here
// is not handed back for load, and one handed back from here is not taken again here. Loads
// take that long to show the move in every note.
const movedRounds = 2

// shardLoad is one shard's measured load.
type shardLoad struct {
	bytes, records float64 // per second
}

// loadMark is a meter's totals at an instant.
type loadMark struct {
	at             time.Time
	bytes, records int64
}

// shardMeter counts what one holding of a shard fetched. add is called by its reader; rate
// by anyone. It is safe for concurrent use.
type shardMeter struct {
	bytes, records atomic.Int64
	taken          time.Time // when the holding began

	mu    sync.Mutex
	marks [2]loadMark // the windows' starts: the rate runs from marks[0]
}

func newShardMeter(now time.Time) *shardMeter {
	m := &shardMeter{taken: now}
	m.marks[0].at, m.marks[1].at = now, now
	return m
}

// add counts a page of records of size bytes.
func (m *shardMeter) add(records, size int) {
	if m == nil {
		return
	}
	m.bytes.Add(int64(size))
	m.records.Add(int64(records))
}

// rate returns the load over the last one to two windows (since the holding began, when it
// is younger).
func (m *shardMeter) rate(now time.Time, window time.Duration) shardLoad {
	b, r := m.bytes.Load(), m.records.Load()
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.Sub(m.marks[1].at) >= window {
		m.marks[0], m.marks[1] = m.marks[1], loadMark{at: now, bytes: b, records: r}
	}
	from := m.marks[0]
	d := now.Sub(from.at).Seconds()
	if d <= 0 {
		return shardLoad{}
	}
	return shardLoad{bytes: float64(b-from.bytes) / d, records: float64(r-from.records) / d}
}

// loadBook is a subscriber's record of its shards' loads and of the shards that moved lately.
// It is safe for concurrent use.
type loadBook struct {
	window time.Duration // loadWindow
	recent time.Duration // how long a moved shard stays put: movedRounds balance rounds

	mu     sync.Mutex
	meters map[string]*shardMeter // the holdings of the shards held here, by shard id
	back   map[string]time.Time   // shards handed back from here → when
}

func newLoadBook(ttl, balance time.Duration) *loadBook {
	return &loadBook{window: max(ttl/3, 100*time.Millisecond), recent: movedRounds * balance,
		meters: map[string]*shardMeter{}, back: map[string]time.Time{}}
}

// took starts the meter of a new holding of shard id.
func (b *loadBook) took(id string) *shardMeter {
	m := newShardMeter(time.Now())
	if b == nil {
		return m
	}
	b.mu.Lock()
	defer b.mu.Unlock()
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
		l := m.rate(now, b.window)
		t.bytes += l.bytes
		t.records += l.records
	}
	return t
}

// note returns the heartbeat row's note: the load of every shard held here.
func (b *loadBook) note() string {
	t := b.total()
	return fmt.Sprintf(loadNote, int64(math.Round(t.bytes)), int64(math.Round(t.records)))
}

// parseLoad reads a note written by note; ok is false for any other text (a store without
// notes, a subscriber of an earlier version, a heartbeat row not renewed yet).
func parseLoad(note string) (shardLoad, bool) {
	var b, r int64
	if n, err := fmt.Sscanf(note, loadNote, &b, &r); err != nil || n != 2 || b < 0 || r < 0 {
		return shardLoad{}, false
	}
	return shardLoad{bytes: float64(b), records: float64(r)}, true
}

// view returns what balancing needs of the loads: the owners' notes (seen: the heartbeat rows
// by owner) and this subscriber's shards, measured now.
func (b *loadBook) view(seen map[string]*beatSeen) *loadIn {
	if b == nil {
		return nil
	}
	in := &loadIn{owners: map[string]float64{}, mine: map[string]float64{}, moved: map[string]bool{}}
	for owner, s := range seen {
		if l, ok := parseLoad(s.row.Note); ok {
			in.owners[owner] = l.bytes
		}
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, m := range b.meters {
		in.mine[id] = m.rate(now, b.window).bytes
		if now.Sub(m.taken) < b.recent {
			in.moved[id] = true
		}
	}
	for id, at := range b.back {
		switch {
		case now.Sub(at) >= b.recent:
			delete(b.back, id)
		default:
			in.moved[id] = true
		}
	}
	return in
}

// stealHeartbeat renews the heartbeat row: a Steal at its own counter which, when the store
// keeps notes, also notes the load of the shards held here.
func (s *Subscriber) stealHeartbeat(ctx context.Context, key, name string, counter int64, ttl time.Duration) (bool, error) {
	if s.stealNote == nil || s.env == nil {
		return s.cfg.store.Steal(ctx, key, name, counter, ttl)
	}
	return s.stealNote(ctx, key, name, counter, ttl, s.env.loads.note())
}

// endedBy reports whether the shard's holding ends for cause c.
func (w *worker) endedBy(c cause) bool {
	w.lifeMu.Lock()
	defer w.lifeMu.Unlock()
	return w.end != nil && w.end.cause == c
}
