package publish

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/gostream/kinesub/internal/kinesisiface"
)

// maxCallsPerBatch bounds the PutRecords calls one PublishBatch call has in flight.
const maxCallsPerBatch = 8

// Writer sends the batches of one publisher: what every PublishBatch call of it shares.
type Writer struct {
	Client kinesisiface.Kinesis
	Stream Stream
	Config Config
	Shards *Tracker
	// Resent counts records sent again after the answer to a call that carried them was lost.
	Resent func(ctx context.Context, n int)
	// CallError wraps the failure of a whole call (op is PutRecords or ListShards), so that
	// the caller classifies a missing stream as it does elsewhere.
	CallError func(op string, err error) error
}

// Outcome is how a batch ended. The records not written are those whose Written is false.
type Outcome struct {
	Written int
	// Code and Message are the last per-record refusal seen, empty when none was refused.
	Code, Message string
	Reason        string // why records failed on their own, when Err is nil
	Err           error  // what stopped the batch: a call refused outright, or ctx's error
}

// batch is the state of one PublishBatch call. Only the calling goroutine changes it; the
// goroutines that make its PutRecords calls read only what never changes of the records they
// carry, hand their answers back over results, and the call waits for every one of them before
// it returns.
type batch struct {
	w     *Writer
	cfg   *Config
	recs  []Record
	keys  []*pubKeyQueue // in the order of their first record
	left  int            // records neither written nor failed
	start time.Time
	plan  *aggPlan // with WithPublishAggregation
	runs  []keyRun // backs the runs of units of one record (oneRun)

	m      *ShardMap // the map the ready keys are queued by
	routed bool
	queues map[string]*shardQueue
	qlist  []*shardQueue // the queues in the order they were made

	outbox  []unit // due, waiting for a call
	calls   int    // calls in flight
	results chan callResult
	wg      sync.WaitGroup

	code, msg string // the last per-record refusal
	reason    string // why records failed on their own
	err       error  // what stopped the batch
}

type callResult struct {
	units []unit
	out   *kinesis.PutRecordsOutput
	err   error
}

// Batch writes recs, one PublishBatch call's records, and returns when each is written or failed,
// marking each; every goroutine it starts has ended by then.
func (w *Writer) Batch(ctx context.Context, recs []Record) Outcome {
	b := &batch{w: w, cfg: &w.Config, recs: recs, left: len(recs), start: time.Now(),
		queues: map[string]*shardQueue{}, results: make(chan callResult, maxCallsPerBatch)}
	if w.Config.Aggregate {
		b.plan = newAggPlan()
	}
	// One queue per partition key, in the order of their first record, their records' indexes
	// in one backing array: three allocations and a map, however many keys.
	index := map[string]int{}
	ofKey := make([]int, len(recs))
	var counts []int
	for i := range recs {
		q, ok := index[recs[i].key]
		if !ok {
			q = len(counts)
			index[recs[i].key] = q
			counts = append(counts, 0)
		}
		counts[q]++
		ofKey[i] = q
	}
	queues := make([]pubKeyQueue, len(counts))
	all := make([]int, len(recs))
	off := 0
	for q, n := range counts {
		queues[q].recs = all[off : off : off+n]
		off += n
	}
	b.keys = make([]*pubKeyQueue, len(queues))
	for q := range queues {
		b.keys[q] = &queues[q]
	}
	for i, q := range ofKey {
		queues[q].recs = append(queues[q].recs, i)
	}
	b.run(ctx)
	written := 0
	for i := range recs {
		if recs[i].state == recWritten {
			written++
		}
	}
	return Outcome{Written: written, Code: b.code, Message: b.msg, Reason: b.reason, Err: b.err}
}

func (b *batch) run(ctx context.Context) {
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for b.left > 0 || b.calls > 0 {
		if b.err == nil && ctx.Err() != nil {
			b.err = ctx.Err()
		}
		if b.err != nil {
			// Stopped: wait for the calls in flight (their records may be written), then
			// leave what is left unwritten.
			cancel()
			if b.calls == 0 {
				break
			}
			b.handle(ctx, <-b.results, time.Now())
			continue
		}
		if err := b.route(ctx); err != nil {
			b.err = err
			continue
		}
		now := time.Now()
		b.stalled(now)
		b.dispatch(callCtx, now)
		if b.left == 0 && b.calls == 0 {
			break
		}
		wake, ok := b.nextWake(now)
		if !ok && b.calls == 0 {
			b.err = errors.New("kinesub: PublishBatch: records left with nothing to send them (a bug)")
			continue
		}
		var tc <-chan time.Time
		if ok {
			timer.Reset(wake.Sub(now)) // since Go 1.23 no stale tick survives a Reset
			tc = timer.C
		}
		select {
		case r := <-b.results:
			b.handle(ctx, r, time.Now())
		case <-tc:
		case <-ctx.Done():
		}
	}
	b.wg.Wait()
	for _, sq := range b.qlist {
		if sq.next != nil {
			sq.pacer.cancel(sq.next.res)
		}
	}
}

// route queues the ready keys by the current shard map, listing the shards when none is known
// or the stream was resharded.
func (b *batch) route(ctx context.Context) error {
	m, err := b.w.Shards.Current(ctx)
	if err != nil {
		return b.w.CallError("ListShards", err)
	}
	if b.routed && m == b.m {
		return nil
	}
	b.m, b.routed = m, true
	for _, sq := range b.qlist {
		sq.ready = keyDeque{}
	}
	for _, k := range b.keys {
		if !k.busy && len(k.recs) > 0 {
			b.enqueue(k, false)
		}
	}
	return nil
}

// enqueue lists k as ready in the queue of the shard its next record is predicted for.
func (b *batch) enqueue(k *pubKeyQueue, front bool) {
	id := ""
	if b.m != nil {
		id = b.m.Find(b.recs[k.recs[0]].hash)
	}
	sq := b.queues[id]
	if sq == nil {
		sq = &shardQueue{id: id, pacer: b.w.Shards.pacer(id)}
		b.queues[id] = sq
		b.qlist = append(b.qlist, sq)
	}
	k.in = sq
	if front {
		sq.ready.pushFront(k)
	} else {
		sq.ready.pushBack(k)
	}
}

// dispatch books the next group of every shard that has none and moves the groups that are due
// to the outbox, then sends the outbox in as many calls as may be in flight.
func (b *batch) dispatch(ctx context.Context, now time.Time) {
	for moved := true; moved; {
		moved = false
		for _, sq := range b.qlist {
			if sq.next == nil {
				sq.next = b.build(sq, now)
			}
			if g := sq.next; g != nil && g.due(sq, now) {
				b.outbox = append(b.outbox, g.units...)
				sq.next, moved = nil, true
			}
		}
	}
	for len(b.outbox) > 0 && b.calls < maxCallsPerBatch {
		n, size := 0, 0
		for n < len(b.outbox) && n < MaxBatchRecords && size+b.outbox[n].size <= MaxBatchBytes {
			size += b.outbox[n].size
			n++
		}
		units := b.outbox[:n:n]
		b.outbox = b.outbox[n:]
		b.send(ctx, units, now)
	}
}

// send makes one PutRecords call of units in a goroutine of its own, which encodes the
// aggregates first; the call is bounded by the time budget.
func (b *batch) send(ctx context.Context, units []unit, now time.Time) {
	entries := make([]types.PutRecordsRequestEntry, len(units))
	aggregates := map[int][]*Record{}
	resent := 0
	for i := range units {
		u := &units[i]
		u.sent = now
		entries[i] = u.entry
		for _, run := range u.runs {
			for _, ri := range run.k.recs[:run.n] {
				r := &b.recs[ri]
				if u.aggregated {
					aggregates[i] = append(aggregates[i], r)
				}
				if r.firstSent.IsZero() {
					r.firstSent = now
				}
				if r.uncertain {
					r.uncertain = false
					resent++
				}
			}
		}
	}
	if resent > 0 {
		b.w.Resent(ctx, resent)
	}
	in := &kinesis.PutRecordsInput{StreamName: b.w.Stream.nameParam(), StreamARN: b.w.Stream.arnParam(), Records: entries}
	b.calls++
	b.wg.Go(func() {
		// What encodeAggregate reads of a record (its data, keys and hash) never changes.
		for i, recs := range aggregates {
			entries[i].Data = encodeAggregate(recs)
		}
		cctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
		defer cancel()
		out, err := b.w.Client.PutRecords(cctx, in, noRetry)
		b.results <- callResult{units: units, out: out, err: err}
	})
}

// putKind classifies the failure of a whole PutRecords call.
type putKind int

const (
	putThrottled putKind = iota // the service asks to slow down: retried within the budget
	putLost                     // the answer was lost (network, 5xx, a garbled answer): the records may be stored
	putRejected                 // refused for a reason that does not pass: the batch stops
)

func classifyPut(err error) putKind {
	var (
		throttle *types.ProvisionedThroughputExceededException
		limit    *types.LimitExceededException
		kms      *types.KMSThrottlingException
		api      smithy.APIError
		send     *smithyhttp.RequestSendError
		deser    *smithy.DeserializationError
		netErr   net.Error
	)
	switch {
	case errors.As(err, &throttle), errors.As(err, &limit), errors.As(err, &kms):
		return putThrottled
	case errors.As(err, &api):
		if api.ErrorFault() == smithy.FaultServer {
			return putLost
		}
		return putRejected
	case errors.As(err, &send), errors.As(err, &deser), errors.As(err, &netErr),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, context.DeadlineExceeded), errors.Is(err, errShortAnswer):
		return putLost
	}
	return putRejected
}

var errShortAnswer = errors.New("PutRecords answered a different number of results than records sent")

// handle takes the answer to one call.
func (b *batch) handle(ctx context.Context, r callResult, now time.Time) {
	b.calls--
	if r.err == nil && len(r.out.Records) != len(r.units) {
		r.err = fmt.Errorf("%w: %d for %d", errShortAnswer, len(r.out.Records), len(r.units))
	}
	if r.err != nil {
		if ctx.Err() != nil || errors.Is(r.err, context.Canceled) {
			// Cancelled in flight (by the caller, or as the batch stopped): the outcome is
			// unknown, and the shard is not to blame.
			for _, u := range r.units {
				for _, run := range u.runs {
					for _, ri := range run.k.recs[:run.n] {
						b.recs[ri].uncertain = true
					}
				}
				b.requeue(u.runs, false)
			}
			return
		}
		kind := classifyPut(r.err)
		for i := len(r.units) - 1; i >= 0; i-- {
			switch u := r.units[i]; kind {
			case putThrottled:
				b.refuse(u, now, true, false)
			case putLost:
				b.refuse(u, now, false, true)
			case putRejected:
				b.requeue(u.runs, false)
			}
		}
		if kind == putRejected && b.err == nil {
			b.err = b.w.CallError("PutRecords", r.err)
		}
		return
	}
	for i, u := range r.units {
		if res := &r.out.Records[i]; aws.ToString(res.ErrorCode) == "" {
			b.wrote(u, aws.ToString(res.ShardId), now)
		}
	}
	// Backwards, as refused keys go back to the front of their queues: they keep their turn.
	for i := len(r.units) - 1; i >= 0; i-- {
		if res := &r.out.Records[i]; aws.ToString(res.ErrorCode) != "" {
			code := aws.ToString(res.ErrorCode)
			b.code, b.msg = code, aws.ToString(res.ErrorMessage)
			b.refuse(r.units[i], now, code == "ProvisionedThroughputExceededException", false)
		}
	}
}

// wrote takes a unit the service stored.
func (b *batch) wrote(u unit, shard string, now time.Time) {
	b.w.Shards.Wrote(u.sq.id, shard)
	u.sq.pacer.wrote(now)
	for _, run := range u.runs {
		k := run.k
		for _, i := range k.recs[:run.n] {
			b.recs[i].state = recWritten
		}
		b.left -= run.n
		k.recs, k.busy = k.recs[run.n:], false
		if len(k.recs) > 0 {
			b.enqueue(k, false)
		}
	}
}

// refuse takes a unit that was refused, or whose call lost its answer: its shard pauses, and
// each key's records go back to the front of their queue, unless they ran out of retries or
// time: then the key fails.
func (b *batch) refuse(u unit, now time.Time, throttled, lost bool) {
	u.sq.pacer.refused(u.sent, throttled, b.cfg.Backoff)
	for i := len(u.runs) - 1; i >= 0; i-- { // backwards, so the keys keep their turn at the front
		k := u.runs[i].k
		spent := false
		for _, ri := range k.recs[:u.runs[i].n] {
			r := &b.recs[ri]
			r.uncertain = r.uncertain || lost
			if !throttled {
				r.refusals++
				spent = spent || r.refusals > b.cfg.Retries
			}
		}
		k.busy = false
		switch head := &b.recs[k.recs[0]]; {
		case spent:
			b.failKey(k, fmt.Sprintf("refused or unanswered %d times besides throttling (WithPublishRetries %d)", b.cfg.Retries+1, b.cfg.Retries))
		case !now.Before(head.firstSent.Add(b.cfg.Timeout)):
			b.failKey(k, b.timeoutReason())
		default:
			b.requeue(u.runs[i:i+1], true)
		}
	}
}

// requeue puts the keys of runs back to the front of their queues, their records waiting.
func (b *batch) requeue(runs []keyRun, front bool) {
	for i := len(runs) - 1; i >= 0; i-- {
		k := runs[i].k
		for _, ri := range k.recs[:runs[i].n] {
			b.recs[ri].state = recWaiting
		}
		k.busy = false
		b.enqueue(k, front)
	}
}

// failKey fails every record left of a key: the first ran out of time or retries, and the
// others must not be written before it.
func (b *batch) failKey(k *pubKeyQueue, reason string) {
	for _, i := range k.recs {
		b.recs[i].state = recFailed
	}
	b.left -= len(k.recs)
	k.recs, k.busy, k.in = nil, false, nil
	b.reason = reason
}

func (b *batch) timeoutReason() string {
	return fmt.Sprintf("not written within the time budget (WithPublishTimeout %v)", b.cfg.Timeout)
}

// since is when sq last made progress: its shard's last write, or the batch's start.
func (b *batch) since(sq *shardQueue) time.Time {
	if t := sq.pacer.lastWritten(); t.After(b.start) {
		return t
	}
	return b.start
}

// waiting reports whether sq has records waiting to be sent.
func (sq *shardQueue) waiting() bool { return sq.next != nil || sq.ready.first(sq) != nil }

// stalled fails the records waiting for a shard that has written nothing for the time budget:
// it is not taking records, and they would only pile up.
func (b *batch) stalled(now time.Time) {
	for _, sq := range b.qlist {
		if !sq.waiting() || now.Before(b.since(sq).Add(b.cfg.Timeout)) {
			continue
		}
		reason := fmt.Sprintf("their shard wrote nothing for the time budget (WithPublishTimeout %v)", b.cfg.Timeout)
		if g := sq.next; g != nil {
			sq.pacer.cancel(g.res)
			sq.next = nil
			for _, u := range g.units {
				for _, run := range u.runs {
					b.failKey(run.k, reason)
				}
			}
		}
		for k := sq.ready.first(sq); k != nil; k = sq.ready.first(sq) {
			sq.ready.drop()
			b.failKey(k, reason)
		}
	}
}

// nextWake is when the loop must look again without an answer arriving: the next group due,
// or the next shard to stall. ok is false when only an answer can change anything.
func (b *batch) nextWake(now time.Time) (wake time.Time, ok bool) {
	consider := func(t time.Time) {
		if !ok || t.Before(wake) {
			wake, ok = t, true
		}
	}
	if len(b.outbox) > 0 {
		return time.Time{}, false // waiting for a call to end
	}
	for _, sq := range b.qlist {
		if sq.next != nil {
			consider(sq.next.dueAt(sq))
		}
		if sq.waiting() {
			consider(b.since(sq).Add(b.cfg.Timeout))
		}
	}
	if ok && wake.Before(now) {
		wake = now
	}
	return wake, ok
}
