package kinesub

import (
	"context"
	"errors"
	"fmt"
	"github.com/gostream/kinesub/internal/envelope"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/gostream/kinesub/internal/kpl"
	"github.com/gostream/kinesub/lease"
)

// pacer is a source whose calls are rate limited: the reader waits for a call's turn before it
// sizes the call (room), so that the size counts the acks made during the wait.
type pacer interface {
	pace(ctx context.Context) error
}

// reader is the state of one shard's read loop.
type reader struct {
	w      *worker
	src    shardSource
	ctx    context.Context
	gen    uint64
	start  Position // where the generation starts
	isOpen bool     // src is open and positioned
	// fromCheckpoint: start is the stored checkpoint and the shard has not been opened yet.
	fromCheckpoint bool
	recordSize     int // mean size of the records last fetched, for the byte cap
	ask            int // the most records to ask for: WithBatchSize, less after calls timed out
	attempt        int
	// skipSeq, skipSub: the source was opened at a user record inside a KPL aggregate; the
	// first user records (skipSub of them) of the aggregate skipSeq are not delivered. When
	// skipSeq is not an aggregate, a positive skipSub means the record itself is handled (as
	// a checkpoint imported from the KCL records it) and it is not delivered.
	skipSeq string
	skipSub int
	slots   []slot // scratch: the watermark slots of the page being delivered
	// keys: the shard's hash-key range, when the listing gave it and it is not the whole
	// space; user records of KPL aggregates outside it are dropped (see deliver).
	keys *kpl.KeyRange
	// dropped: user records dropped for lying outside keys in this reader's life, for the log.
	dropped int
}

// openedAt notes where the source was just opened, for the user records to skip.
func (r *reader) openedAt(at Position) {
	r.skipSeq, r.skipSub = "", 0
	if at.sub > 0 && (at.kind == posSequence || at.kind == posAfter) {
		r.skipSeq, r.skipSub = at.sequence, at.sub
	}
}

// loop reads until the shard ends (true) or the reader must stop (false).
func (r *reader) loop() bool {
	w, env := r.w, r.w.env
	for {
		if r.ctx.Err() != nil {
			return false
		}
		if cmd := w.takeSeek(); cmd != nil {
			r.apply(cmd)
			continue
		}
		if !r.isOpen && !r.open() {
			continue
		}
		if !r.waitRoom() {
			continue
		}
		if pc, ok := r.src.(pacer); ok {
			if err := pc.pace(r.ctx); err != nil {
				r.failed(OpGetRecords, err)
				continue
			}
		}
		// Ask for no more than the caps have room for, so that a page does not carry the shard
		// past them.
		limit := min(r.ask, r.room())
		pg, err := r.src.next(r.ctx, limit)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && r.ctx.Err() == nil {
				// A response too large to arrive within the request timeout (a slow network,
				// a busy server) would time out again at the same size: ask for half.
				r.ask = max(limit/2, 1)
			}
			r.failed(opOf(err, OpGetRecords), err)
			continue
		}
		r.ask = min(r.ask*2, env.cfg.batchSize)
		r.attempt = 0
		w.throttled.Store(false)
		w.millisBehind.Store(pg.millisBehind)
		w.quiet.Store(pg.quiet)
		if n := len(pg.records); n > 0 {
			size := 0
			for i := range pg.records {
				size += len(pg.records[i].Data)
			}
			r.recordSize = max(size/n, 1)
		}
		w.load.add(pg.records)
		if !r.deliver(pg.records) {
			continue
		}
		w.log.Debug("page", "records", len(pg.records), "millis_behind", pg.millisBehind)
		if pg.end {
			if r.finish() {
				return true
			}
			continue
		}
		if pg.pause > 0 {
			r.sleep(pg.pause)
		}
	}
}

// open positions the source: after the newest record fetched in this generation (so nothing
// delivered is fetched twice and nothing is skipped), or at the generation's start.
func (r *reader) open() bool {
	w := r.w
	at := r.start
	w.mu.Lock()
	if w.lastSeq != "" && w.wmGen == r.gen {
		at = Position{kind: posAfter, sequence: w.lastSeq}
	}
	w.mu.Unlock()
	if err := r.src.open(r.ctx, at); err != nil {
		if r.fromCheckpoint && classify(r.ctx, err) == errRejected {
			w.rejected.Store(true)
			err = fmt.Errorf("%w (sequence number %s): %w", ErrCheckpointRejected, at.sequence, err)
		}
		r.failed(opOf(err, OpGetShardIterator), err)
		return false
	}
	r.opened()
	r.openedAt(at)
	r.isOpen = true
	r.mark()
	return true
}

// mark records, once, where the shard's first reader opened it, so that the shard's next
// owner does not open at a later tip should this one stop before its first checkpoint. It is
// written after the open and before the first read: a checkpoint in the store then always means
// that records published from then on are read.
func (r *reader) mark() {
	w, env := r.w, r.w.env
	if w.markAt == nil {
		return
	}
	m := marker(*w.markAt)
	w.markAt = nil
	if m == "" {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, env.cfg.requestTimeout)
	defer cancel()
	if w.lockFlush(ctx) != nil {
		return
	}
	defer w.unlockFlush()
	if w.written.Sequence != "" || !w.state().mayCheckpoint() {
		return
	}
	cp := lease.Checkpoint{Sequence: m}
	ok, err := w.writeCheckpoint(ctx, cp)
	switch {
	case err != nil:
		env.report(&ShardError{Stream: env.stream, Shard: w.id, Op: OpCheckpoint, Err: err})
	case !ok:
		w.lose("checkpoint fenced")
	default:
		w.setWritten(cp)
	}
}

// opened notes that the shard was opened: whatever the stored checkpoint was, it is behind us.
func (r *reader) opened() {
	if r.fromCheckpoint {
		r.fromCheckpoint = false
		r.w.rejected.Store(false)
	}
}

// failed handles a failed call: fatal, reopen, or back off and retry.
func (r *reader) failed(op Op, err error) {
	w, env := r.w, r.w.env
	kind := classify(r.ctx, err)
	switch kind {
	case errStopped:
		return
	case errExpired:
		w.log.Debug("iterator expired")
		r.isOpen = false
		return
	case errGone:
		env.fail(fmt.Errorf("%w: %s: %w", ErrStreamNotFound, env.stream, &ShardError{Stream: env.stream, Shard: w.id, Op: op, Err: err}))
		<-r.ctx.Done()
		return
	case errThrottled:
		w.throttled.Store(true)
	case errRejected:
		// The iterator or position was refused: reopen from the last known place.
		r.isOpen = false
	}
	// The error itself goes to Errors; the log only says that the shard retries.
	w.log.Debug("retrying", "op", op, "attempt", r.attempt)
	env.report(&ShardError{Stream: env.stream, Shard: w.id, Op: op, Err: err})
	r.sleep(backoff(r.attempt))
	r.attempt++
}

// sleep waits d, or less when the reader stops or a seek arrives. It reports whether the
// full time passed.
func (r *reader) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.ctx.Done():
	case <-r.w.seekNote:
		r.w.renote()
	}
	return false
}

// waitRoom blocks while the shard has less room below its cap of unsettled deliveries than
// refill.
func (r *reader) waitRoom() bool {
	w := r.w
	return r.waitUntil(func() bool {
		return w.wmGen != r.gen || w.hasRoom()
	})
}

// waitUntil blocks until ok, checked with w.mu held, holds; acks wake it to check again. It
// reports false when the reader must stop or a seek arrives first.
func (r *reader) waitUntil(ok func() bool) bool {
	w := r.w
	for {
		w.mu.Lock()
		done := ok()
		w.waitingRoom.Store(!done)
		w.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-w.room:
		case <-r.ctx.Done():
			return false
		case <-w.seekNote:
			w.renote()
			return false
		}
	}
}

// room returns how many more deliveries the shard may take before its caps: at least one, as
// only this reader adds deliveries and it calls room after waitRoom. Where the byte cap is
// within a response's size of being reached, it is turned into a count with the size of the
// records last fetched.
func (r *reader) room() int {
	w := r.w
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.env.cfg
	if w.wmGen != r.gen {
		return c.maxInFlight
	}
	n := c.maxInFlight - w.wm.unsettled()
	// No page carries more than the largest response: with that much free, any page fits, and
	// the first call (sized with the largest record, as none has been seen yet) is not cut to
	// a few dozen records.
	if free := c.maxInFlightBytes - w.wm.bytes; free < maxResponseBytes && r.recordSize > 0 {
		n = min(n, free/r.recordSize)
	}
	return max(n, 1)
}

// deliver tracks a batch in the watermark and sends it to the dispatcher. It reports false when
// interrupted by a seek or a stop: the rest of the batch is dropped, and the reader reopens.
//
// The page's Messages and watermark slots are built outside w.mu, so that acks of the shard's
// earlier records do not wait for it; the lock is taken once, to track them all. Each Message
// takes its record's fields, not a reference to the page (see Message).
func (r *reader) deliver(records []types.Record) bool {
	if len(records) == 0 {
		return true
	}
	w, env := r.w, r.w.env
	pg := &shardPage{shard: w, gen: r.gen}
	out := newFetched(pg, len(records))
	slots := r.slots[:0]
	var bad []error
	var handled []int // slots of records not delivered (undecodable, outside the shard): handled at once
	dropped := 0
	for i := range records {
		rec := &records[i]
		seq := aws.ToString(rec.SequenceNumber)
		var arrival int64
		if t := rec.ApproximateArrivalTimestamp; t != nil {
			arrival = t.UnixNano()
		}
		// Only the first record read after opening inside an aggregate can be that aggregate.
		skip := 0
		if r.skipSeq != "" {
			if seq == r.skipSeq {
				skip = r.skipSub
			}
			r.skipSeq, r.skipSub = "", 0
		}
		if !kpl.IsAggregated(rec.Data) {
			if skip > 0 {
				continue // a positive sub-sequence on a record that is no aggregate: it is handled
			}
			m := out.add()
			m.off, m.arrival = uint32(len(slots)), arrival
			m.setSeq(seq)
			m.setKey(aws.ToString(rec.PartitionKey))
			if !envelope.Has(rec.Data) {
				m.setData(rec.Data)
			} else {
				headers, data := envelope.Split(rec.Data)
				m.setData(data)
				if len(headers) > 0 {
					m.extra().headers = headers
				}
			}
			slots = append(slots, slot{seq: seq, size: int32(len(rec.Data))})
			continue
		}
		subs, err := kpl.Deaggregate(rec.Data)
		if err != nil {
			// Reported, not delivered, and handled at once so that the shard moves on.
			handled = append(handled, len(slots))
			slots = append(slots, slot{seq: seq})
			bad = append(bad, fmt.Errorf("%w: sequence number %s: %w", ErrAggregatedRecord, seq, err))
			continue
		}
		extras := make([]msgExtra, len(subs)) // one allocation for the aggregate's user records
		for j := range subs {
			if j < skip {
				continue // handled before the checkpoint or seek that opened the shard here
			}
			sub := &subs[j]
			// Until the last user record of the aggregate is handled, the checkpoint stays
			// inside it: (seq, user records handled), which resumes at the next one.
			next := j + 1
			if next == len(subs) {
				next = 0
			}
			if r.keys != nil && !r.keys.Holds(sub.HashKey()) {
				// Outside the shard's range: an aggregate made for the parent of a split
				// landed in this child. The KPL puts such user records again, on the shard
				// they belong to, and the KCL drops the strays; so does kinesub.
				if r.dropped+dropped == 0 {
					w.log.Warn("user record of a KPL aggregate outside the shard's hash-key range dropped (counted in kinesub.records.dropped)",
						"sequence_number", seq, "sub_sequence_number", j, "hash_key", sub.HashKey().String(),
						"starting_hash_key", r.keys.Start.String(), "ending_hash_key", r.keys.End.String())
				}
				dropped++
				handled = append(handled, len(slots))
				slots = append(slots, slot{seq: seq, sub: int32(next)})
				continue
			}
			m := out.add()
			m.off, m.arrival, m.x = uint32(len(slots)), arrival, &extras[j]
			m.x.sub = int32(j)
			m.setSeq(seq)
			m.setKey(sub.PartitionKey)
			headers, data := envelope.Split(sub.Data)
			m.setData(data)
			if len(headers) > 0 {
				m.x.headers = headers
			}
			slots = append(slots, slot{seq: seq, sub: int32(next), size: int32(len(sub.Data))})
		}
	}
	now := time.Now().UnixNano()
	w.mu.Lock()
	if w.wmGen != r.gen {
		w.mu.Unlock()
		return false
	}
	pg.first = w.wm.trackAll(slots, now)
	for _, at := range handled {
		w.wm.settle(pg.first + uint64(at))
		w.dirty = true
	}
	w.lastSeq = aws.ToString(records[len(records)-1].SequenceNumber)
	w.mu.Unlock()
	r.slots = slots[:0] // kept for the next page; it holds on to one page's sequence numbers at most
	for _, err := range bad {
		env.report(&ShardError{Stream: env.stream, Shard: w.id, Op: OpDecode, Err: err})
	}
	if dropped > 0 {
		r.dropped += dropped
		w.stats.droppedOutOfRange(dropped)
		w.log.Debug("user records outside the shard's hash-key range dropped", "records", dropped, "total", r.dropped)
	}
	if out.n == 0 {
		return true
	}
	pg.lead = out.at(0).off
	out.seal(len(slots), w.stats != nil)
	select {
	case env.hand.in <- out:
		return true
	case <-r.ctx.Done():
	case <-w.seekNote:
		w.renote()
	}
	return false
}

// finish completes a shard that returned its last records: once every delivery is settled,
// it checkpoints SHARD_END, so that children may start, and the shard ends. It reports false
// when interrupted (a seek, a stop, a lost lease, or a failed write to retry).
//
// Only deliveries of the reader's own generation count: a seek that ends it drops what was
// not delivered and then empties the watermark, which must not read as "all settled" (the
// dropped records would be skipped under SHARD_END). Such a wait ends with the seek's note.
func (r *reader) finish() bool {
	w, env := r.w, r.w.env
	current := func() bool { return w.gate.Load() == r.gen }
	if !r.waitUntil(func() bool { return current() && w.wm.unsettled() == 0 }) {
		return false
	}
	// Before SHARD_END is written: the children start only after it.
	w.shardStopped(StopShardEnded)
	ctx, cancel := context.WithTimeout(r.ctx, env.cfg.requestTimeout)
	defer cancel()
	if w.lockFlush(ctx) != nil {
		return false
	}
	defer w.unlockFlush()
	// With the generation still current here, no seek has dropped anything: every delivery
	// was settled (the wait above), so SHARD_END skips nothing, and a seek from now on finds
	// the shard finished.
	if !w.state().mayCheckpoint() || !current() {
		return false
	}
	// SHARD_END, and where the children open (startInput).
	end := w.endCheckpoint()
	w.endTried = true // from now on every flush writes SHARD_END, whether or not this lands
	ok, err := w.writeCheckpoint(ctx, end)
	if err != nil {
		env.report(&ShardError{Stream: env.stream, Shard: w.id, Op: OpCheckpoint, Err: err})
		r.isOpen = false // the shard's end is found again after the backoff
		r.sleep(backoff(r.attempt))
		r.attempt++
		return false
	}
	if !ok {
		w.lose("checkpoint fenced")
		return false
	}
	// Under the flush lock: no flush of the watermark, which stops short of SHARD_END, can
	// follow this write.
	w.setWritten(end)
	w.moveTo(stateEnded, "read to its end")
	return true
}
