package kinesub

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gostream/kinesub/internal/efoevents"
	"github.com/gostream/kinesub/internal/kinesisiface"
	"github.com/gostream/kinesub/internal/telemetry"
)

// fanOut reads one shard over enhanced fan-out: a SubscribeToShard subscription whose events
// are its pages. A subscription lives five minutes at most; the next one starts after the last
// event's ContinuationSequenceNumber, so that nothing is skipped or read twice, and the records
// of an event not yet handed to the reader stay held across the renewal.
//
// Like every shard source it is driven by its reader's goroutine only.
type fanOut struct {
	client kinesisiface.Kinesis
	// fresh, when set, makes the client of each subscription: the SDK's event-stream decoding
	// state belongs to a client, and a subscription's initial response is decoded while the
	// previous subscription's reader goroutine may still be decoding (a seek, a renewal), so
	// no two subscriptions share one (aws/smithy-go#714).
	fresh       func() kinesisiface.Kinesis
	consumerARN string
	stream      streamRef
	shard       string
	timeout     time.Duration // for a subscription's initial response (WithRequestTimeout)
	stallAfter  time.Duration // no event for this long, while the reader waits: dead
	inUseRetry  time.Duration // the wait after ResourceInUseException, and between calls
	takeover    time.Duration // after an accepted call, how long the service refuses another
	report      func(error)   // a retried failure that next does not return, to Errors
	// note is the shard's seek notification: a wait for the next event ends when it is armed,
	// and re-arms it, so that the reader sees the seek at once.
	note chan struct{}

	at       Position // where the next subscription starts
	lastCall time.Time
	// started is when this reader's last subscription was accepted. The service refuses a
	// second call within takeover of an accepted one with ResourceInUseException: within that
	// window the subscription it holds is this reader's own (ended by a seek or a renewal and
	// still winding down there), which is no failure to report.
	started time.Time
	events  *kinesis.SubscribeToShardEventStream // nil: no live subscription
	cancel  context.CancelFunc                   // ends events' request
	// fast carries the subscription's SubscribeToShardEvents that kinesub decodes itself
	// (efo_events.go); the rest, and the stream's end, come through events. cancel ends the
	// hand-over too.
	fast chan *types.SubscribeToShardEvent

	stall    *time.Timer    // the stall deadline of the current wait for an event
	held     []types.Record // records of the last event not yet returned
	heldEnd  bool           // the last event was the shard's last: end once held is empty
	children []string
	behind   int64 // MillisBehindLatest of the last event
}

// newFanOut returns the fan-out source of the shard id, whose seek notification is note.
func (s *Subscriber) newFanOut(id string, note chan struct{}) *fanOut {
	f := s.cfg.fanOut
	var fresh func() kinesisiface.Kinesis
	if f.newClient != nil {
		fresh = func() kinesisiface.Kinesis { return telemetry.Kinesis{Client: f.newClient(), Requests: s.metrics.req} }
	}
	return &fanOut{
		client: s.client, fresh: fresh, consumerARN: f.arn, stream: s.ref, shard: id, timeout: s.cfg.requestTimeout,
		stallAfter: f.stallAfter, inUseRetry: f.inUseRetry, takeover: f.takeover, note: note,
		report: func(err error) {
			s.report(&ShardError{Stream: s.stream, Shard: id, Op: OpSubscribeToShard, Err: err})
		},
	}
}

// open subscribes at p. A subscription still held elsewhere (ResourceInUseException: the
// shard's previous owner, or this reader's own previous subscription not yet ended) is not a
// failure of the position: it is retried by next at the one-per-second floor, and reported
// unless it is this reader's own (inUse).
func (f *fanOut) open(ctx context.Context, p Position) error {
	f.end()
	f.at, f.held, f.heldEnd, f.children = p, nil, false, nil
	if wait := f.inUseRetry - time.Since(f.lastCall); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return &sourceError{op: OpSubscribeToShard, err: ctx.Err()}
		}
	}
	err := f.subscribe(ctx)
	if isInUse(err) {
		f.inUse(err)
		return nil
	}
	return err
}

// inUse reports a ResourceInUseException, unless it comes within the service's takeover
// window of this reader's own last subscription: then the subscription the service still
// holds is that one, which this reader ended (a seek, a renewal), not another holder's.
func (f *fanOut) inUse(err error) {
	if !f.started.IsZero() && time.Since(f.started) < f.takeover {
		return
	}
	f.report(err)
}

// next returns the held records of the last event, or waits for the next event.
func (f *fanOut) next(ctx context.Context, limit int) (page, error) {
	if len(f.held) > 0 || f.heldEnd {
		return f.take(limit), nil
	}
	if f.events == nil {
		if wait := f.inUseRetry - time.Since(f.lastCall); wait > 0 {
			return page{millisBehind: f.behind, pause: wait}, nil
		}
		if err := f.subscribe(ctx); err != nil {
			if isInUse(err) {
				f.inUse(err)
				return page{millisBehind: f.behind, pause: f.inUseRetry}, nil
			}
			return page{}, err
		}
	}
	// The deadline counts only time spent waiting here: a reader held back by its consumer
	// (WithMaxInFlight) is not waiting, and the events wait for it in the stream. One timer
	// serves every wait: a wait per event would otherwise allocate one.
	if f.stall == nil {
		f.stall = time.NewTimer(f.stallAfter)
	} else {
		f.stall.Reset(f.stallAfter)
	}
	defer f.stall.Stop()
	select {
	case ev := <-f.fast:
		f.accept(ev)
		return f.take(limit), nil
	case ev, ok := <-f.events.Events():
		if !ok {
			err := f.events.Err()
			f.end()
			if isInUse(err) {
				f.inUse(err)
				return page{millisBehind: f.behind, pause: f.inUseRetry}, nil
			}
			if err != nil {
				return page{}, &sourceError{op: OpSubscribeToShard, err: err}
			}
			// The subscription's lifetime ended: the next call renews it.
			return page{millisBehind: f.behind}, nil
		}
		if e, ok := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent); ok {
			f.accept(&e.Value)
		}
		return f.take(limit), nil
	case <-f.stall.C:
		f.end()
		return page{}, &sourceError{op: OpSubscribeToShard, err: fmt.Errorf("%w: no event for %v", errSubscriptionStalled, f.stallAfter)}
	case <-f.note:
		select {
		case f.note <- struct{}{}:
		default:
		}
		return page{millisBehind: f.behind}, nil
	case <-ctx.Done():
		return page{}, &sourceError{op: OpSubscribeToShard, err: ctx.Err()}
	}
}

// errSubscriptionStalled: a subscription sent nothing for longer than the service's idle
// events allow; it is abandoned and renewed from its last continuation.
var errSubscriptionStalled = errors.New("kinesub: enhanced fan-out subscription stalled")

// accept holds an event's records and notes where the next subscription starts.
func (f *fanOut) accept(ev *types.SubscribeToShardEvent) {
	if len(f.held) == 0 {
		f.held = ev.Records // the event's own slice: no copy
	} else {
		f.held = append(f.held, ev.Records...)
	}
	f.behind = aws.ToInt64(ev.MillisBehindLatest)
	switch {
	case ev.ContinuationSequenceNumber != nil:
		f.at = Position{kind: posAfter, sequence: *ev.ContinuationSequenceNumber}
	case len(ev.Records) > 0:
		f.at = Position{kind: posAfter, sequence: aws.ToString(ev.Records[len(ev.Records)-1].SequenceNumber)}
	}
	if len(ev.ChildShards) > 0 {
		// The shard is closed and read to its end, as GetRecords' last page says with
		// ChildShards and no next iterator.
		f.heldEnd = true
		for _, c := range ev.ChildShards {
			f.children = append(f.children, aws.ToString(c.ShardId))
		}
		f.end()
	}
}

// take returns up to limit held records as a page.
func (f *fanOut) take(limit int) page {
	n := min(limit, len(f.held))
	pg := page{records: f.held[:n:n], millisBehind: f.behind}
	f.held = f.held[n:]
	if len(f.held) == 0 {
		f.held = nil
		if f.heldEnd {
			pg.end, pg.children = true, f.children
			f.heldEnd, f.children = false, nil
		}
	}
	return pg
}

// subscribe starts a subscription at f.at and waits for its initial response.
func (f *fanOut) subscribe(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	timedOut := time.AfterFunc(f.timeout, cancel)
	in := f.at.iteratorInput(f.stream, f.shard)
	client := f.client
	if f.fresh != nil {
		client = f.fresh()
	}
	fast := make(chan *types.SubscribeToShardEvent)
	out, err := client.SubscribeToShard(sctx, &kinesis.SubscribeToShardInput{
		ConsumerARN: aws.String(f.consumerARN), ShardId: aws.String(f.shard),
		StartingPosition: &types.StartingPosition{Type: in.ShardIteratorType, SequenceNumber: in.StartingSequenceNumber, Timestamp: in.Timestamp},
	}, noRetry, efoevents.Options(fast, sctx.Done()))
	// The service counted the call somewhere between its sending and its answer: the next one,
	// a second after the answer, is a second after it there too, however long the trip.
	f.lastCall = time.Now()
	if !timedOut.Stop() {
		if err == nil {
			_ = out.GetStream().Close()
		}
		cancel()
		return &sourceError{op: OpSubscribeToShard, err: fmt.Errorf("no initial response within %v: %w", f.timeout, context.DeadlineExceeded)}
	}
	if err != nil {
		cancel()
		var nf *types.ResourceNotFoundException
		if errors.As(err, &nf) {
			// Fatal, like a deleted stream: the consumer was deregistered, or the stream deleted.
			err = fmt.Errorf("consumer %s: %w", f.consumerARN, err)
		}
		return &sourceError{op: OpSubscribeToShard, err: err}
	}
	f.events, f.cancel, f.fast = out.GetStream(), cancel, fast
	f.started = f.lastCall
	return nil
}

// end ends the live subscription, if any, and releases its HTTP/2 stream. The stream is closed
// before its request's context is cancelled: closing the response body returns once the reset
// of the stream (RST_STREAM) has been written, so the service learns that the subscription
// ended before this reader's next SubscribeToShard call reaches it on the same connection, and
// need not refuse that call as in use. A close that does not return within releaseWait (a
// connection that cannot be written) is cut short by the cancellation.
func (f *fanOut) end() {
	if f.events == nil {
		return
	}
	events, cancel := f.events, f.cancel
	f.events, f.cancel, f.fast = nil, nil, nil
	closed := make(chan struct{})
	go func() { // owned by end, which waits for it
		defer close(closed)
		_ = events.Close()
	}()
	t := time.NewTimer(releaseWait)
	select {
	case <-closed:
	case <-t.C:
	}
	t.Stop()
	cancel()
	<-closed
}

// releaseWait bounds how long end waits for a subscription's stream to be reset.
const releaseWait = 250 * time.Millisecond

func (f *fanOut) close() { f.end() }

func isInUse(err error) bool {
	var inUse *types.ResourceInUseException
	return err != nil && errors.As(err, &inUse)
}
