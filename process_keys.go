package kinesub

import (
	"context"
	"time"
)

// Process keeps, per shard, a queue per order key (a lane of keys): a delivery starts only once
// the one before it of the same key has finished, and a delivery that failed stays at the head
// of its key until it succeeds or is dead-lettered, so order holds through retries. A key's
// queue is a chain of jobs, which the lane's map finds by key: a delivery joins its key with
// one map look-up, and a finished one hands its key over without any while more wait. Heads
// that may start wait in one ready queue for all shards, in the order they became ready.
//
// Everything here is guarded by the processor's mutex.

// job is one delivery as Process holds it. It is kept to 32 bytes: a page's jobs are made at
// once, and their size is most of what Process costs per record beyond the handler (memory to
// clear, to collect, and to move between the cores of the goroutine that adds them and the
// workers). What only some jobs need is kept apart, found through the job: its generation
// (genOfJob), its failures (p.fails), when its wait began (p.queuedAt).
type job struct {
	m     *Message
	q     *keyQueue // its key's
	next  *job      // the next delivery of the same key
	state jobState
	// dropped: given back unhandled (its shard moved on, or Process ended); it is skipped when
	// its key reaches it.
	dropped bool
	timed   bool // its wait behind its key is sampled: p.queuedAt holds when it began
	failed  bool // it failed at least once: p.fails holds how
	lingers bool // it ran on when its shard moved on: p.lingers holds it under its key
}

// failure is how the attempts of a delivery that failed went.
type failure struct {
	attempts   int  // attempts that failed
	deadLetter bool // the next attempt calls the dead-letter function
	since      time.Time
	lastErr    error       // the handler's last error, for the dead-letter function
	failErr    error       // the last attempt's error, the dead letter's included, for Shards
	timer      *time.Timer // the backoff of a waiting job
}

type jobState uint8

const (
	jobQueued  jobState = iota // behind an earlier delivery of its key
	jobReady                   // its key's head, in the ready queue
	jobRunning                 // a handler or dead-letter call runs
	jobWaiting                 // failed, waiting out its backoff (or Process is ending)
	jobDone                    // settled or given back
)

// keyQueue is the deliveries of one order key of one shard not finished: from the head (ready,
// running or waiting out a backoff) to the tail, queued in delivery order.
type keyQueue struct {
	key        string
	head, tail *job
	lane       *lane
}

// lane is one shard's keys. It is kept while its shard is read here, and a key's queue is kept
// when it runs empty (up to maxIdleKeys of them), so that a key seen again costs one map
// look-up rather than an insertion, a deletion and an allocation.
type lane struct {
	id      string
	keys    map[string]*keyQueue // order key → its queue (head nil: empty)
	live    int                  // queues holding a delivery
	gens    []*genState          // the generations its jobs belong to, usually one
	failing []*job               // jobs that failed and are not finished, by first failure
}

// maxIdleKeys: a lane drops its empty queues once it holds more than this many and more empty
// ones than holding a delivery.
const maxIdleKeys = 4096

// maxIdleLanes: past this many lanes, lanes holding nothing are dropped when one is made (the
// shards of a reshard, or handed back, leave theirs behind).
const maxIdleLanes = 64

// genState is one generation of one shard as Process runs it: the context its handlers get,
// ended with the generation's run context or when Process ends, and sweeps of its jobs once
// the generation moved on and once its run is over (process_drain.go). It lives while jobs of
// it do.
type genState struct {
	lane      *lane
	w         *worker
	gen       uint64
	ctx       *handlerContext
	cancel    context.CancelFunc
	stopSweep func() bool // stops the callback of the sweep when the generation moves on
	stopEnd   func() bool // stops the callback of the sweep when its run is over
	refs      int         // jobs of this generation not finished
	// ackTop is one past the highest watermark index of a job of this generation acked: what a
	// drain fills gaps below (process_drain.go).
	ackTop uint64
}

// waitSample: one in waitSample deliveries that queue behind their key have their wait timed,
// drawn at random (keys often come round in a fixed order, which a count would alias with).
const waitSample = 32

// sample draws whether to time a wait (xorshift). Called with p.mu held.
func (p *processor) sample() bool {
	x := p.rnd
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	p.rnd = x
	return x%waitSample == 0
}

// addChunk is how many deliveries add takes in at a time, holding the lock: workers finishing
// and taking jobs get it between two chunks of a large page. Each chunk's jobs are one small
// allocation: memory the allocator reuses warm, where a page's worth (hundreds of KiB) would be
// fresh pages to fault in.
const addChunk = 256

// add takes the deliveries of page f from index from on (one shard, one generation) into the
// lanes. The order keys are computed before the lock is taken: they are the caller's code.
func (p *processor) add(f *fetched, from int) {
	var keys [addChunk]string
	first, total := f.at(from), f.n-from
	p.mu.Lock()
	l := p.lanes[first.ShardID()]
	if l == nil {
		if len(p.lanes) >= maxIdleLanes {
			for id, idle := range p.lanes {
				if idle.live == 0 && len(idle.gens) == 0 {
					delete(p.lanes, id)
				}
			}
		}
		l = &lane{id: first.ShardID(), keys: map[string]*keyQueue{}}
		p.lanes[l.id] = l
	}
	gs := p.genOf(l, first)
	gs.refs += total // held from now: l and gs stay while the chunks go in
	p.mu.Unlock()
	for at := 0; at < total; at += addChunk {
		jobs := make([]job, min(addChunk, total-at))
		for i := range jobs {
			jobs[i].m = f.at(from + at + i)
			if p.cfg.orderKey == nil {
				keys[i] = jobs[i].m.PartitionKey()
			} else {
				keys[i] = p.cfg.orderKey(jobs[i].m)
			}
		}
		p.mu.Lock()
		for i := range jobs {
			j, key := &jobs[i], keys[i]
			q := l.keys[key]
			if q == nil {
				q = &keyQueue{key: key, lane: l}
				l.keys[key] = q
			}
			j.q = q
			if q.head == nil {
				q.head, q.tail = j, j
				l.live++
				p.headReady(j)
				continue
			}
			q.tail.next, q.tail = j, j
			if p.sample() && p.met.waitTimed() {
				j.timed = true
				p.queuedAt[j] = time.Now()
			}
		}
		p.mu.Unlock()
	}
}

// genOf returns the lane's state of m's generation, made on first use: its handlers'
// context, and a callback that sweeps its jobs when it moves on.
func (p *processor) genOf(l *lane, m *Message) *genState {
	w, gen := m.shard(), m.pg.gen
	for _, gs := range l.gens {
		if gs.w == w && gs.gen == gen {
			return gs
		}
	}
	gs := &genState{lane: l, w: w, gen: gen}
	done, cancel := context.WithCancel(m.runContext())
	gs.ctx, gs.cancel = &handlerContext{Context: p.ctx, done: done}, cancel
	// Owned by the processor (aux): stopped when the generation's last job finishes, and
	// waited for before Process returns.
	p.aux.Add(1)
	gs.stopSweep = context.AfterFunc(m.staleContext(), func() {
		defer p.aux.Done()
		p.sweep(gs)
	})
	gs.stopEnd = p.sweepAtEnd(gs, m)
	l.gens = append(l.gens, gs)
	return gs
}

// genOfJob returns the state of j's generation. Called with p.mu held.
func (p *processor) genOfJob(j *job) *genState {
	for _, gs := range j.q.lane.gens {
		if gs.holds(j) {
			return gs
		}
	}
	panic("kinesub: Process lost a generation") // jobs hold theirs (refs)
}

// holds reports whether j is of this generation.
func (gs *genState) holds(j *job) bool { return j.m.pg.gen == gs.gen && j.m.pg.shard == gs.w }

// release ends a generation none of whose jobs is left.
func (p *processor) release(gs *genState) {
	if gs.stopSweep() {
		p.aux.Done()
	}
	if gs.stopEnd() {
		p.aux.Done()
	}
	gs.cancel()
	l := gs.lane
	for i, g := range l.gens {
		if g == gs {
			l.gens = append(l.gens[:i], l.gens[i+1:]...)
			break
		}
	}
}

// makeReady puts a key's head in the ready queue, and wakes a worker if none is on its way.
func (p *processor) makeReady(j *job) {
	j.state = jobReady
	p.ready.push(j)
	if p.wakes == 0 {
		p.wake()
	}
}

// pop returns the next ready job that may start, or nil. Jobs whose shard moved on are given
// back on the way.
func (p *processor) pop() *job {
	for {
		j := p.ready.pop()
		if j == nil {
			return nil
		}
		if j.dropped {
			continue // given back by a sweep; its key went on then
		}
		if !p.mayStart(j) {
			p.drop(j)
			p.advance(j)
			continue
		}
		return j
	}
}

// advance hands a key over from its head h, which finished or was given back, to the next
// delivery of the key not given back, which becomes ready.
func (p *processor) advance(h *job) {
	n := h.next
	for n != nil && n.dropped {
		n = n.next
	}
	q := h.q
	if n == nil {
		l := q.lane
		q.head, q.tail = nil, nil
		l.live--
		switch {
		case l.live == 0 && len(l.gens) == 0 && h.m.stale():
			delete(p.lanes, l.id) // its shard moved on
		case len(l.keys) > maxIdleKeys && len(l.keys) > 2*l.live:
			for k, e := range l.keys {
				if e.head == nil {
					delete(l.keys, k)
				}
			}
		}
		return
	}
	q.head = n
	if n.timed {
		p.met.keyWait(n, time.Since(p.queuedAt[n]))
		delete(p.queuedAt, n)
		n.timed = false
	}
	p.headReady(n)
}

// retire ends j's bookkeeping once it is settled or given back: its backoff, its place among
// the failing, its hold on its generation.
func (p *processor) retire(j *job) {
	j.state = jobDone
	if j.lingers {
		p.unlinger(j)
	}
	if j.timed {
		delete(p.queuedAt, j)
		j.timed = false
	}
	if j.failed {
		if f := p.fails[j]; f.timer != nil && f.timer.Stop() {
			p.aux.Done()
		}
		p.unfail(j)
		delete(p.fails, j)
		j.failed = false
	}
	gs := p.genOfJob(j)
	if gs.refs--; gs.refs == 0 {
		p.release(gs)
	}
}

// drop gives j back unhandled and retires it. Its key goes on only when the caller advances it
// (j is the head) or reaches it (j is further back).
func (p *processor) drop(j *job) {
	j.dropped = true
	j.m.abandon()
	p.retire(j)
}

// sweep gives back every job of gs that is not running, once its generation moved on: none
// may start now, and a drain waiting for the consumer (a hand-back, Close) must not wait for
// them. Running ones finish, or are cancelled, on their own.
func (p *processor) sweep(gs *genState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || gs.refs == 0 {
		return
	}
	l := gs.lane
	heads := make([]*job, 0, len(l.keys))
	for _, q := range l.keys {
		if q.head != nil {
			heads = append(heads, q.head)
		}
	}
	// In a drain, the jobs below keep run still (process_drain.go); none once the run is over.
	var keep uint64
	if h := gs.anyJob(heads); h != nil && !h.m.runOver() {
		keep = p.gapTop(l, h.m.pg, nil)
	}
	for _, h := range heads {
		// Given back behind a head that still runs (a handler that ignores its ctx), a job
		// would hold its record until the head returns, and each seek would add a cap's worth:
		// it is unlinked at once.
		prev := h
		for x := h.next; x != nil; x = x.next {
			if gs.holds(x) && !x.dropped && x.m.index() >= keep {
				p.drop(x)
			}
			if x.dropped {
				prev.next = x.next
				if h.q.tail == x {
					h.q.tail = prev
				}
				continue
			}
			prev = x
		}
		if gs.holds(h) && !h.dropped && h.state != jobRunning && h.m.index() >= keep {
			p.drop(h)
			p.advance(h)
		}
		if gs.holds(h) && h.state == jobRunning && !h.lingers {
			p.linger(h)
		}
	}
}

// retryDue makes a job whose backoff ended ready again.
func (p *processor) retryDue(j *job) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if j.state != jobWaiting || p.closing {
		return // given back meanwhile, or Process is ending and collects it
	}
	p.fails[j].timer = nil
	p.makeReady(j)
}

// jobRing is the ready queue: first in, first out, in a circular buffer that doubles when
// full (a queue compacted by copying its live part down costs a write barrier per job moved
// while the collector marks).
type jobRing struct {
	buf  []*job // len(buf) is 0 or a power of two
	head int    // buf[head] is the oldest job…
	n    int    // …of n
}

func (r *jobRing) push(j *job) {
	if r.n == len(r.buf) {
		buf := make([]*job, max(2*len(r.buf), 64))
		for i := range r.n {
			buf[i] = r.buf[(r.head+i)&(len(r.buf)-1)]
		}
		r.buf, r.head = buf, 0
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = j
	r.n++
}

func (r *jobRing) len() int { return r.n }

func (r *jobRing) pop() *job {
	if r.n == 0 {
		return nil
	}
	j := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return j
}
