package kinesub

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/gostream/kinesub/lease"
)

// Service limits a reader keeps to on each shard.
const (
	getRecordsPerSecond = 5        // GetRecords calls per second per shard
	bytesPerSecond      = 2 << 20  // read throughput per shard
	bytesBurst          = 10 << 20 // the largest response; a larger read pauses the shard
)

// reader is the state of one shard's read loop.
type reader struct {
	w       *worker
	ctx     context.Context
	gen     uint64
	start   *kinesis.GetShardIteratorInput
	iter    *string
	attempt int
	// fromCheckpoint: start is the stored checkpoint and the shard has not been opened yet.
	fromCheckpoint bool
	recordSize     int // mean size of the records last fetched, for the byte cap
}

// loop reads until the shard ends (true) or the reader must stop (false).
func (r *reader) loop() bool {
	w, s := r.w, r.w.sub
	for {
		if r.ctx.Err() != nil {
			return false
		}
		if cmd := w.takeSeek(); cmd != nil {
			r.apply(cmd)
			continue
		}
		if r.iter == nil && !r.open() {
			continue
		}
		if !r.waitRoom() {
			continue
		}
		if err := w.limiter.Wait(r.ctx); err != nil {
			continue
		}
		// Ask for no more than the cap has room for, so that a batch does not carry the shard
		// past its cap. The room is taken after the rate wait, which acks may have widened.
		limit := min(int(s.cfg.batchSize), r.room())
		cctx, cancel := context.WithTimeout(r.ctx, s.cfg.requestTimeout)
		out, err := s.client.GetRecords(cctx, &kinesis.GetRecordsInput{
			ShardIterator: r.iter, Limit: aws.Int32(int32(limit)),
		}, noRetry)
		cancel()
		if err != nil {
			r.failed("GetRecords", err)
			continue
		}
		r.attempt = 0
		w.throttled.Store(false)
		w.millisBehind.Store(aws.ToInt64(out.MillisBehindLatest))
		size := 0
		for i := range out.Records {
			size += len(out.Records[i].Data)
		}
		if len(out.Records) > 0 {
			r.recordSize = max(size/len(out.Records), 1)
		}
		if !r.deliver(out.Records) {
			continue
		}
		// A very large read spends the shard's byte budget: pause before the next call as the
		// service would throttle it.
		if size > 0 {
			if res := w.bytes.ReserveN(time.Now(), min(size, bytesBurst)); res.OK() {
				if d := res.Delay(); d > 0 && !r.sleep(d) {
					continue
				}
			}
		}
		w.log.Debug("poll", "records", len(out.Records), "millis_behind", aws.ToInt64(out.MillisBehindLatest))
		if out.NextShardIterator == nil {
			if r.finish() {
				return true
			}
			continue
		}
		r.iter = out.NextShardIterator
		if len(out.Records) == 0 {
			r.sleep(s.cfg.pollInterval)
		}
	}
}

// open gets an iterator: after the newest record fetched in this generation (so nothing
// delivered is fetched twice and nothing is skipped), or at the generation's start.
func (r *reader) open() bool {
	w, s := r.w, r.w.sub
	in := r.start
	w.mu.Lock()
	if w.lastSeq != "" && w.gen == r.gen {
		in = afterSequence(s.stream, w.id, w.lastSeq)
	}
	w.mu.Unlock()
	cctx, cancel := context.WithTimeout(r.ctx, s.cfg.requestTimeout)
	out, err := s.client.GetShardIterator(cctx, in, noRetry)
	cancel()
	if err != nil {
		if r.fromCheckpoint && classify(r.ctx, err) == errRejected {
			w.rejected.Store(true)
			err = fmt.Errorf("%w (sequence number %s): %w", ErrCheckpointRejected, aws.ToString(in.StartingSequenceNumber), err)
		}
		r.failed("GetShardIterator", err)
		return false
	}
	r.opened()
	r.iter = out.ShardIterator
	r.mark()
	return true
}

// mark records, once, where the shard's first reader opened it, so that the shard's next
// owner does not open at a later tip should this one stop before its first checkpoint. It is
// written after the open and before the first read: a checkpoint in the store then always means
// that records published from then on are read.
func (r *reader) mark() {
	w, s := r.w, r.w.sub
	if w.markAt == nil {
		return
	}
	m := marker(*w.markAt)
	w.markAt = nil
	if m == "" {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, s.cfg.requestTimeout)
	defer cancel()
	if w.lockFlush(ctx) != nil {
		return
	}
	defer w.unlockFlush()
	if w.written != "" {
		return
	}
	if _, err := s.cfg.store.Checkpoint(ctx, w.key, s.cfg.owner, m); err != nil {
		s.report(&ShardError{Stream: s.stream, Shard: w.id, Op: "Checkpoint", Err: err})
		return
	}
	w.setWritten(m)
}

// opened notes that the shard was opened: whatever the stored checkpoint was, it is behind us.
func (r *reader) opened() {
	if r.fromCheckpoint {
		r.fromCheckpoint = false
		r.w.rejected.Store(false)
	}
}

// failed handles a failed call: fatal, reopen, or back off and retry.
func (r *reader) failed(op string, err error) {
	w, s := r.w, r.w.sub
	kind := classify(r.ctx, err)
	switch kind {
	case errStopped:
		return
	case errExpired:
		w.log.Debug("iterator expired")
		r.iter = nil
		return
	case errGone:
		s.fail(fmt.Errorf("%w: %s: %w", ErrStreamNotFound, s.stream, &ShardError{Stream: s.stream, Shard: w.id, Op: op, Err: err}))
		<-r.ctx.Done()
		return
	case errThrottled:
		w.throttled.Store(true)
		w.log.Warn("throttled", "op", op, "attempt", r.attempt)
	case errRejected:
		// The iterator or position was refused: reopen from the last known place.
		r.iter = nil
		w.log.Warn("request rejected", "op", op, "err", err)
	default:
		w.log.Warn("call failed", "op", op, "attempt", r.attempt, "err", err)
	}
	s.report(&ShardError{Stream: s.stream, Shard: w.id, Op: op, Err: err})
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
		return w.gen != r.gen || w.hasRoom()
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
// only this reader adds deliveries and it calls room after waitRoom. The byte cap is turned
// into a count with the size of the records last fetched.
func (r *reader) room() int {
	w := r.w
	w.mu.Lock()
	defer w.mu.Unlock()
	c := &w.sub.cfg
	if w.gen != r.gen {
		return c.maxInFlight
	}
	n := c.maxInFlight - w.wm.unsettled()
	if r.recordSize > 0 {
		n = min(n, (c.maxInFlightBytes-w.wm.bytes)/r.recordSize)
	}
	return max(n, 1)
}

// deliver tracks a batch in the watermark and sends it to the dispatcher. It reports false when
// interrupted by a seek or a stop: the rest of the batch is dropped, and the reader reopens.
func (r *reader) deliver(records []types.Record) bool {
	if len(records) == 0 {
		return true
	}
	w, s := r.w, r.w.sub
	msgs := make([]Message, 0, len(records))
	var bad []error
	w.mu.Lock()
	if w.gen != r.gen {
		w.mu.Unlock()
		return false
	}
	for i := range records {
		rec := &records[i]
		seq := aws.ToString(rec.SequenceNumber)
		arrival := aws.ToTime(rec.ApproximateArrivalTimestamp)
		if !isAggregated(rec.Data) {
			m := Message{sequence: seq, shard: w, gen: r.gen, partitionKey: aws.ToString(rec.PartitionKey), arrival: arrival}
			m.headers, m.data = splitEnvelope(rec.Data)
			if len(m.headers) == 0 {
				m.headers = nil
			}
			m.index = w.wm.track(seq, len(rec.Data))
			msgs = append(msgs, m)
			w.lastSeq = seq
			continue
		}
		subs, err := deaggregate(rec.Data)
		if err != nil {
			// Reported, not delivered, and handled at once so that the shard moves on.
			w.wm.settle(w.wm.track(seq, 0))
			w.dirty = true
			w.lastSeq = seq
			bad = append(bad, fmt.Errorf("%w: sequence number %s: %w", ErrAggregatedRecord, seq, err))
			continue
		}
		for j, sub := range subs {
			m := Message{sequence: seq, sub: j, shard: w, gen: r.gen, partitionKey: sub.partitionKey, arrival: arrival}
			m.headers, m.data = splitEnvelope(sub.data)
			if len(m.headers) == 0 {
				m.headers = nil
			}
			// Until the last user record of the aggregate is handled, the checkpoint may only
			// reach the record before it: resuming after seq would skip the rest.
			mark := w.lastSeq
			if j == len(subs)-1 {
				mark = seq
			}
			m.index = w.wm.track(mark, len(sub.data))
			msgs = append(msgs, m)
		}
		w.lastSeq = seq
	}
	w.mu.Unlock()
	for _, err := range bad {
		s.report(&ShardError{Stream: s.stream, Shard: w.id, Op: "Decode", Err: err})
	}
	if len(msgs) == 0 {
		return true
	}
	select {
	case s.in <- msgs:
		return true
	case <-r.ctx.Done():
	case <-w.seekNote:
		w.renote()
	}
	return false
}

// finish completes a shard that returned its last records: once every delivery is settled,
// it checkpoints SHARD_END so that children may start. It reports false when interrupted (a
// seek, a stop, a lost lease, or a failed write to retry).
func (r *reader) finish() bool {
	w, s := r.w, r.w.sub
	if !r.waitUntil(func() bool { return w.wm.unsettled() == 0 }) {
		return false
	}
	ctx, cancel := context.WithTimeout(r.ctx, s.cfg.requestTimeout)
	defer cancel()
	if w.lockFlush(ctx) != nil {
		return false
	}
	defer w.unlockFlush()
	ok, err := s.cfg.store.Checkpoint(ctx, w.key, s.cfg.owner, lease.ShardEnd)
	if err != nil {
		s.report(&ShardError{Stream: s.stream, Shard: w.id, Op: "Checkpoint", Err: err})
		r.iter = nil // the shard's end is found again after the backoff
		r.sleep(backoff(r.attempt))
		r.attempt++
		return false
	}
	if !ok {
		w.lose("checkpoint fenced")
		return false
	}
	w.setWritten(lease.ShardEnd)
	return true
}
