package kinesub

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/gostream/kinesub/internal/kpl"
	"github.com/gostream/kinesub/lease"
)

// shardTable is what a subscriber knows of its stream's shards: the listing, the leases as the
// coordinator last read them, which shards are finished or wait for a parent, the shards held
// here, and the stream-wide positions installed by WithStartAt and Seek. The coordinator
// writes it; Seek, Commit, Shards, Close and the metrics read it. It is safe for concurrent
// use; its lock is its own, and is never held while a shard's is taken, except by status.
type shardTable struct {
	mu       sync.Mutex
	closed   bool
	workers  map[string]*worker // the shards held here whose life is not over
	listing  map[string]shardInfo
	listed   bool
	listedAt time.Time
	finished map[string]bool // read to their end (SHARD_END)
	// shardEnds: the SHARD_END checkpoint a life here wrote, of each shard it read to its
	// end, which says where the shard's children open (startInput) until a listing shows it.
	shardEnds map[string]lease.Checkpoint
	ended     map[string]time.Time // when the last life here of each shard ended (forget)
	counters  map[string]int64     // shard → the highest lease counter a life here read under
	owner     string               // the owner name shards are registered under; "" between incarnations
	waiting   map[string]string    // shard → the parent it waits for
	leases    map[string]lease.Lease
	leasesAt  time.Time // when leases was read

	installed *install
	epoch     uint64
	applied   map[string]uint64 // shard → install epoch its reader opened at
}

// shardInfo is one shard as ListShards shows it.
type shardInfo struct {
	id      string
	parents []string
	closed  bool
	keys    *kpl.KeyRange // its hash-key range; nil when the listing gave none in the service's form
}

func newShardTable(startAt *Position, now time.Time) *shardTable {
	t := &shardTable{
		workers:   make(map[string]*worker),
		listing:   make(map[string]shardInfo),
		finished:  make(map[string]bool),
		shardEnds: make(map[string]lease.Checkpoint),
		ended:     make(map[string]time.Time),
		counters:  make(map[string]int64),
		waiting:   make(map[string]string),
		applied:   make(map[string]uint64),
	}
	if startAt != nil {
		t.epoch++
		t.installed = newInstall(*startAt, t.epoch, now)
	}
	return t
}

// close marks the table closed, so that no shard is registered any more, and returns the
// shards held, or false when it was closed already.
func (t *shardTable) close() ([]*worker, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, false
	}
	t.closed = true
	return t.heldLocked(), true
}

// held returns the shards held here, or false once the subscription is closing.
func (t *shardTable) held() ([]*worker, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.heldLocked(), !t.closed
}

func (t *shardTable) heldLocked() []*worker {
	ws := make([]*worker, 0, len(t.workers))
	for _, w := range t.workers {
		ws = append(ws, w)
	}
	return ws
}

// reading returns the shards held here whose lease is not lost: what the per-shard gauges
// report.
func (t *shardTable) reading() []*worker {
	ws, _ := t.held()
	n := 0
	for _, w := range ws {
		if w.state() != stateLost {
			ws[n] = w
			n++
		}
	}
	return ws[:n]
}

// register adds w, opening at the position chosen for it from its lease's checkpoint cp,
// unless the table is closed or the shard is held here already (held), or w's holding is not
// newer than every holding a life of the shard here read under (stale: a write an earlier
// life sent, such as a Release or a checkpoint, may still land, and would land in w's holding
// too), or is not under this subscriber's current owner name (stale: a take begun before the
// heartbeat row was found taken over, whose owner peers count as gone). The position is chosen
// under the lock that a stream-wide Seek installs under, so a reader either opens at a new
// installed position or is moved by the seek.
func (t *shardTable) register(w *worker, cp lease.Checkpoint, initial Position) (ok, stale bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.workers[w.id] != nil {
		return false, false
	}
	if tn := w.tenureOf(); tn.Counter <= t.counters[w.id] || tn.Owner != t.owner {
		return false, true
	}
	var fromStart bool
	w.start, fromStart = t.startInput(w.id, cp, initial)
	w.fromStart.Store(fromStart)
	w.startCkpt = w.start.kind == posAfter
	if k := t.listing[w.id].keys; k != nil && !k.Whole() {
		w.keys = k
	}
	t.workers[w.id] = w
	delete(t.waiting, w.id)
	return true, false
}

// setOwner sets the owner name shards are registered under: "" (none) from the moment the
// heartbeat row was found taken over until the subscriber joined again under a new name, so
// that no take begun under the old name registers after every shard held was lost.
func (t *shardTable) setOwner(name string) {
	t.mu.Lock()
	t.owner = name
	t.mu.Unlock()
}

// forget removes a shard whose life here is over; one read to its end counts as finished.
func (t *shardTable) forget(w *worker) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.workers[w.id] == w {
		delete(t.workers, w.id)
		t.ended[w.id] = time.Now()
		t.counters[w.id] = max(t.counters[w.id], w.tenureOf().Counter)
	}
	if w.state() == stateEnded {
		t.finished[w.id] = true
		if cp := w.shown.Load(); cp != nil && cp.Sequence == lease.ShardEnd {
			t.shardEnds[w.id] = *cp
		}
	}
}

// endedSince reports whether a life here of shard id ended at or after at: a listing sent
// before then may show, as this subscriber's, a lease it has since released.
func (t *shardTable) endedSince(id string, at time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	end, ok := t.ended[id]
	return ok && !end.Before(at)
}

// holds reports whether shard id is held here.
func (t *shardTable) holds(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.workers[id] != nil
}

// markFinished records that shard id was read to its end.
func (t *shardTable) markFinished(id string) {
	t.mu.Lock()
	t.finished[id] = true
	t.mu.Unlock()
}

// setListing records a listing of the stream's shards, and reports whether it differs from
// the last: a shard appeared, closed or went.
func (t *shardTable) setListing(shards map[string]shardInfo, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	changed := !t.listed || len(shards) != len(t.listing)
	for id, info := range shards {
		if old, ok := t.listing[id]; !ok || old.closed != info.closed {
			changed = true
		}
	}
	t.listing, t.listed, t.listedAt = shards, true, now
	return changed
}

// lastListing returns the last listing of the stream's shards (not to be changed) and when it
// was made.
func (t *shardTable) lastListing() (map[string]shardInfo, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.listing, t.listedAt
}

// isListed reports whether the shards were listed at least once.
func (t *shardTable) isListed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.listed
}

// install installs p for the whole subscription and returns the shards held here, whose
// readers the seek moves, or false once the subscription is closing.
func (t *shardTable) install(p Position) ([]*worker, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, false
	}
	t.epoch++
	t.installed = newInstall(p, t.epoch, time.Now())
	ws := t.heldLocked()
	for _, w := range ws {
		t.applied[w.id] = t.epoch
	}
	return ws, true
}

// seekTarget returns the shard held here that a shard-scoped Seek moves, or why there is none.
func (t *shardTable) seekTarget(id string) (*worker, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	w := t.workers[id]
	_, known := t.listing[id]
	switch {
	case w != nil:
		return w, nil
	case t.finished[id]:
		return nil, fmt.Errorf("%w: %s", ErrShardFinished, id)
	case !known && t.listed: // not listed yet: the shard may well exist
		return nil, fmt.Errorf("%w: %s", ErrUnknownShard, id)
	}
	return nil, fmt.Errorf("%w: %s", ErrShardNotOwned, id)
}

// states returns the state of each shard of ids held here.
func (t *shardTable) states(ids []string) map[string]shardState {
	t.mu.Lock()
	defer t.mu.Unlock()
	local := make(map[string]shardState)
	for _, id := range ids {
		if w := t.workers[id]; w != nil {
			local[id] = w.state()
		}
	}
	return local
}

// status reports every listed shard as Shards does.
func (t *shardTable) status(owner string) []ShardStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]ShardStatus, 0, len(t.listing))
	for id, info := range t.listing {
		st := ShardStatus{ShardID: id, Parents: info.parents}
		l := t.leases[id]
		if l.Held(t.leasesAt) { // the table is read when it changed, not on every round
			st.Owner = l.Owner
		}
		switch w := t.workers[id]; {
		case w != nil && w.state() != stateLost:
			w.describe(&st)
			st.Owner = owner
		case t.finished[id]:
			st.State = ShardFinished
		case t.waiting[id] != "":
			st.State, st.WaitingFor = ShardWaitingForParent, t.waiting[id]
		case st.Owner != "":
			st.State = ShardLeasedElsewhere
		default:
			st.State = ShardUnclaimed
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ShardID < out[j].ShardID })
	return out
}
