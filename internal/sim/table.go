// Package sim is the deterministic fleet simulation's machinery: a model of the lease table
// with DynamoDB's semantics (table.go), the adversarial client each simulated instance reaches
// it through (client.go), the seeded fault schedule (faults.go) and the invariants checked as a
// run goes (check.go). The fleet itself (subscribers on a kinesistest stream in one
// testing/synctest bubble) is driven by the root package's simulation test, which reaches
// kinesub's internal probes.
package sim

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gostream/kinesub/lease"
)

// Table is the lease table the simulated instances share: one item per lease, each write
// applied atomically under its conditions, as DynamoDB applies a conditional UpdateItem. As
// with the DynamoDB store, the instant a write's conditions compare with and its expiry counts
// from is the writer's: its own wall clock when it sent the write (Client.now), not the
// table's. Only the index's membership lags (ListPrefix, client.go); every read of an item is
// current. It is safe for concurrent use.
type Table struct {
	mu   sync.Mutex
	rows map[string]*row
	// Applied, when set, is called under the table's lock after every write that changed an
	// item, with the item before and after (a zero Lease for an absent item): the invariants
	// watch checkpoints and releases there.
	Applied func(w Write)

	pending sync.WaitGroup // writes in flight, applied later (later)
}

// Write is one write the table applied.
type Write struct {
	Op      string // Acquire, Steal, Renew, Checkpoint, Release, Delete
	Writer  string // the instance that sent it
	Key     string
	Before  lease.Lease
	After   lease.Lease
	Late    bool      // applied after its sender stopped waiting for it
	Applied time.Time // on the simulation's clock
}

type row struct {
	l       lease.Lease
	indexed time.Time // when the item entered the index: created, on the simulation's clock
	order   int64     // the order of the last ordered checkpoint (CheckpointOrdered); 0: none
}

// NewTable returns an empty table.
func NewTable() *Table { return &Table{rows: map[string]*row{}} }

// op is one write as the table applies it: a condition on the item (nil when absent) and the
// change it makes. It reports whether the condition held.
type op struct {
	name  string
	key   string
	apply func(r *row, exists bool) bool
}

// write applies o, reports whether its condition held, and tells Applied.
func (t *Table) write(writer string, o op, late bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, exists := t.rows[o.key]
	var before lease.Lease
	if exists {
		before = r.l
	} else {
		r = &row{l: lease.Lease{Key: o.key}}
	}
	if !o.apply(r, exists) {
		return false
	}
	after := r.l
	switch {
	case r.l.Key == "": // deleted
		delete(t.rows, o.key)
		after = lease.Lease{}
	case !exists:
		r.indexed = time.Now()
		t.rows[o.key] = r
	}
	if t.Applied != nil {
		t.Applied(Write{Op: o.name, Writer: writer, Key: o.key, Before: before, After: after, Late: late, Applied: time.Now()})
	}
	return true
}

// Read returns the item at key, or a zero Lease with only Key set.
func (t *Table) Read(key string) lease.Lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r, ok := t.rows[key]; ok {
		return r.l
	}
	return lease.Lease{Key: key}
}

// list returns the items whose keys start with prefix, sorted by key, leaving out those that
// entered the index after indexedBy (zero: none left out).
func (t *Table) list(prefix string, indexedBy time.Time) []lease.Lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []lease.Lease
	for k, r := range t.rows {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		if !indexedBy.IsZero() && r.indexed.After(indexedBy) {
			continue
		}
		out = append(out, r.l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Rows returns every item, sorted by key.
func (t *Table) Rows() []lease.Lease { return t.list("", time.Time{}) }

// held reports whether l is held at now: by an owner, without an expiry or before it.
func held(l lease.Lease, now time.Time) bool {
	return l.Owner != "" && (l.Expiry.IsZero() || now.Before(l.Expiry))
}

// expiry is when a holding taken at now for ttl lapses: never for a zero ttl. Expiries are
// kept to the millisecond, as the DynamoDB store writes them.
func expiry(now time.Time, ttl time.Duration) time.Time {
	if ttl == 0 {
		return time.Time{}
	}
	return time.UnixMilli(now.Add(ttl).UnixMilli())
}

func acquireOp(key, owner string, ttl time.Duration, now time.Time) op {
	return op{"Acquire", key, func(r *row, exists bool) bool {
		// DynamoDB: attribute_not_exists(owner) OR owner = :owner OR expiry < :now; a missing
		// expiry compares false.
		if r.l.Owner != "" && r.l.Owner != owner && (r.l.Expiry.IsZero() || !r.l.Expiry.Before(now)) {
			return false
		}
		r.l.Owner, r.l.Expiry = owner, expiry(now, ttl)
		r.l.Counter++
		return true
	}}
}

func stealOp(key, owner string, counter int64, ttl time.Duration, now time.Time) op {
	return op{"Steal", key, func(r *row, exists bool) bool {
		if !exists || r.l.Counter != counter {
			return false
		}
		r.l.Owner, r.l.Expiry = owner, expiry(now, ttl)
		r.l.Counter++
		return true
	}}
}

func holds(r *row, exists bool, t lease.Tenure) bool {
	return exists && r.l.Owner == t.Owner && r.l.Counter == t.Counter
}

func renewOp(key string, t lease.Tenure, ttl time.Duration, now time.Time) op {
	return op{"Renew", key, func(r *row, exists bool) bool {
		if !holds(r, exists, t) {
			return false
		}
		// The DynamoDB store conditions the write on the expiry not moving back, and reports a
		// current holding when only that failed.
		if e := expiry(now, ttl); r.l.Expiry.IsZero() || !e.Before(r.l.Expiry) {
			r.l.Expiry = e
		}
		return true
	}}
}

func checkpointOp(key string, t lease.Tenure, cp lease.Checkpoint) op {
	return op{"Checkpoint", key, func(r *row, exists bool) bool {
		if !holds(r, exists, t) {
			return false
		}
		r.l.Checkpoint, r.order = cp, 0
		return true
	}}
}

func checkpointOrderedOp(key string, t lease.Tenure, cp lease.Checkpoint, n int64) op {
	return op{"CheckpointOrdered", key, func(r *row, exists bool) bool {
		if !holds(r, exists, t) {
			return false
		}
		if o := t.Counter<<32 | n; o >= r.order {
			r.l.Checkpoint, r.order = cp, o
		}
		return true
	}}
}

func releaseOp(key string, t lease.Tenure) op {
	return op{"Release", key, func(r *row, exists bool) bool {
		if !holds(r, exists, t) {
			return false
		}
		r.l.Owner, r.l.Expiry = "", time.Time{}
		r.l.Counter++
		return true
	}}
}

func deleteOp(key string, counter int64, now time.Time) op {
	return op{"Delete", key, func(r *row, exists bool) bool {
		if !exists || r.l.Counter != counter || held(r.l, now) {
			return false
		}
		r.l = lease.Lease{} // marks the item deleted (write)
		return true
	}}
}

// String describes the table, for a failure's report.
func (t *Table) String() string {
	var b strings.Builder
	for _, l := range t.Rows() {
		fmt.Fprintf(&b, "  %s owner=%q counter=%d expiry=%s checkpoint=%s/%d\n", l.Key, l.Owner, l.Counter,
			fmtTime(l.Expiry), l.Checkpoint.Sequence, l.Checkpoint.SubSequence)
	}
	return b.String()
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("15:04:05.000")
}
