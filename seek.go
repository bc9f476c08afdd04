package kinesub

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

type positionKind uint8

const (
	posInvalid positionKind = iota
	posHorizon
	posLatest
	posTimestamp
	posSequence
	posAfter // just after a checkpointed sequence number; internal
)

// Position is a place in a stream to read from: stream-wide (Horizon, Latest, AtTimestamp) or
// in one shard (AtSequence). It is a comparable value; the zero Position is invalid.
type Position struct {
	kind     positionKind
	unixNano int64 // posTimestamp
	shard    string
	sequence string
}

// Horizon is the oldest record each shard retains (TRIM_HORIZON). Stream-wide.
func Horizon() Position { return Position{kind: posHorizon} }

// Latest is the tip of each shard: only records published after the reader opens there.
// Stream-wide.
func Latest() Position { return Position{kind: posLatest} }

// AtTimestamp is each shard's first record that arrived at or after t. Stream-wide. Times
// outside the years 1678 to 2262 (what a Position can hold) are clamped to that range.
func AtTimestamp(t time.Time) Position {
	switch {
	case t.Before(minPositionTime):
		t = minPositionTime
	case t.After(maxPositionTime):
		t = maxPositionTime
	}
	return Position{kind: posTimestamp, unixNano: t.UnixNano()}
}

var (
	minPositionTime = time.Unix(0, math.MinInt64)
	maxPositionTime = time.Unix(0, math.MaxInt64)
)

// AtSequence is exactly the record with this sequence number on this shard, and the records
// after it. Shard-scoped.
func AtSequence(shard, sequence string) Position {
	return Position{kind: posSequence, shard: shard, sequence: sequence}
}

// IsZero reports whether p is the zero (invalid) Position.
func (p Position) IsZero() bool { return p.kind == posInvalid }

// Shard returns the shard of a shard-scoped position, and "" for a stream-wide one.
func (p Position) Shard() string { return p.shard }

// streamWide reports whether p applies to every shard.
func (p Position) streamWide() bool {
	return p.kind == posHorizon || p.kind == posLatest || p.kind == posTimestamp
}

// String renders p as ParsePosition reads it: "horizon", "latest",
// "timestamp:2026-12-02T10:00:00Z" (RFC 3339, UTC) or "sequence:<shard>:<sequence number>".
func (p Position) String() string {
	switch p.kind {
	case posHorizon:
		return "horizon"
	case posLatest:
		return "latest"
	case posTimestamp:
		return "timestamp:" + time.Unix(0, p.unixNano).UTC().Format(time.RFC3339Nano)
	case posSequence:
		return "sequence:" + p.shard + ":" + p.sequence
	case posAfter:
		return "after:" + p.sequence
	}
	return "invalid"
}

// ParsePosition reads the String form of a Position. Anything else is an error wrapping
// ErrInvalidPosition that says what was expected.
func ParsePosition(s string) (Position, error) {
	bad := func(why string) (Position, error) {
		return Position{}, fmt.Errorf("%w %q: %s", ErrInvalidPosition, s, why)
	}
	s0 := strings.TrimSpace(s)
	switch {
	case s0 == "horizon":
		return Horizon(), nil
	case s0 == "latest":
		return Latest(), nil
	case strings.HasPrefix(s0, "timestamp:"):
		t, err := time.Parse(time.RFC3339Nano, s0[len("timestamp:"):])
		if err != nil {
			return bad("want timestamp:<RFC 3339 time>, e.g. timestamp:2026-12-02T10:00:00Z")
		}
		// AtTimestamp keeps nanoseconds since 1970 in an int64; outside its range the time
		// would wrap around to another instant.
		if t.Before(time.Unix(0, math.MinInt64)) || t.After(time.Unix(0, math.MaxInt64)) {
			return bad("timestamp must be between 1678 and 2262")
		}
		return AtTimestamp(t), nil
	case strings.HasPrefix(s0, "sequence:"):
		rest := s0[len("sequence:"):]
		i := strings.LastIndexByte(rest, ':')
		if i <= 0 || i == len(rest)-1 {
			return bad("want sequence:<shard id>:<sequence number>")
		}
		shard, seq := rest[:i], rest[i+1:]
		if !validShardID(shard) {
			return bad("shard id must be 1 to 128 characters of letters, digits, '_', '.' or '-'")
		}
		if len(seq) > 128 || strings.Trim(seq, "0123456789") != "" {
			return bad("sequence number must be 1 to 128 decimal digits")
		}
		return AtSequence(shard, seq), nil
	}
	return bad("want horizon, latest, timestamp:<RFC 3339 time> or sequence:<shard id>:<sequence number>")
}

func validShardID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return false
		}
	}
	return true
}

// iteratorInput builds the GetShardIterator request that opens shard at p.
func (p Position) iteratorInput(stream, shard string) *kinesis.GetShardIteratorInput {
	in := &kinesis.GetShardIteratorInput{StreamName: aws.String(stream), ShardId: aws.String(shard)}
	switch p.kind {
	case posHorizon:
		in.ShardIteratorType = types.ShardIteratorTypeTrimHorizon
	case posTimestamp:
		in.ShardIteratorType = types.ShardIteratorTypeAtTimestamp
		in.Timestamp = aws.Time(time.Unix(0, p.unixNano))
	case posSequence:
		in.ShardIteratorType = types.ShardIteratorTypeAtSequenceNumber
		in.StartingSequenceNumber = aws.String(p.sequence)
	case posAfter:
		in.ShardIteratorType = types.ShardIteratorTypeAfterSequenceNumber
		in.StartingSequenceNumber = aws.String(p.sequence)
	default:
		in.ShardIteratorType = types.ShardIteratorTypeLatest
	}
	return in
}

// afterSequence opens shard just after a checkpointed sequence number.
func afterSequence(stream, shard, seq string) *kinesis.GetShardIteratorInput {
	return Position{kind: posAfter, sequence: seq}.iteratorInput(stream, shard)
}

// WithStartAt opens every shard at p, ahead of any stored checkpoint: exactly a stream-wide
// Seek at the instant the subscription opens. It is a replay tool: every shard this subscriber
// opens for the first time opens at p, including shards it takes over from a peer later. To
// choose only where a new application starts, use WithInitialPosition. p must be stream-wide.
func WithStartAt(p Position) Option {
	return streamWideOption("WithStartAt", p, func(c *config) { c.startAt = &p })
}

// WithInitialPosition sets where a shard that has no checkpoint yet opens, overriding the
// default Latest (the tip): Horizon() makes a new application read everything retained. Shards
// with a checkpoint resume after it, and children of a shard read to its end here always open
// at their oldest record. The first reader of a shard records where it opened, so a later
// owner opens there too. p must be stream-wide.
func WithInitialPosition(p Position) Option {
	return streamWideOption("WithInitialPosition", p, func(c *config) { c.initialPos = &p })
}

// streamWideOption applies set when p is stream-wide, and rejects p otherwise.
func streamWideOption(name string, p Position, set func(*config)) Option {
	return func(c *config) {
		if !p.streamWide() {
			c.reject(name, p, "must be a stream-wide position: Horizon(), Latest() or AtTimestamp(t)")
			return
		}
		set(c)
	}
}

// Seeker repositions a running subscription. It is safe for concurrent use from any
// goroutine, for example an admin HTTP handler (see SeekHandler).
type Seeker struct {
	s *Subscriber
}

// Seek moves the subscription to p.
//
// A stream-wide position (Horizon, Latest, AtTimestamp) moves every shard this subscriber
// reads and is installed for the whole subscription first, so shards whose readers start
// later (including children of a later split) open there too. A shard-scoped position
// (AtSequence) moves only that shard's reader, which must be owned here and still reading:
// otherwise Seek returns ErrShardNotOwned, ErrShardFinished or ErrUnknownShard. A target the
// service rejects (a bad sequence number) returns its error and leaves the reader where it was.
//
// A stream-wide seek is installed even when a reader cannot open its shard there at once (a
// timeout, a throttle): Seek then returns that reader's error, and the reader keeps trying the
// new position with backoff, reporting on Errors, without delivering from its old one.
//
// Once Seek returns nil, no record fetched before the seek is delivered from the moved shards,
// and acks of earlier deliveries no longer move their checkpoints (the watermark is written
// once more, then reset). Seek after Close returns ErrClosed.
//
// A Seek that returns an error leaves each shard either where it was or fully moved, and says
// which: an error wrapping ErrSeekPending names a shard that is moved (nothing fetched before
// the seek reaches the consumer) but whose reader had not reopened it when ctx ended; it
// reopens on its own. Any other error means the shard it names was not moved, except for a
// stream-wide seek's reader errors described above. A ctx already done when Seek is called
// changes nothing.
func (k *Seeker) Seek(ctx context.Context, p Position) error {
	if k == nil || k.s == nil {
		return fmt.Errorf("%w: nil Seeker: use Subscriber.Seeker", ErrInvalidOption)
	}
	if p.IsZero() {
		return fmt.Errorf("%w: the zero Position", ErrInvalidPosition)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kinesub: seek to %s not applied: %w", p, err)
	}
	if p.streamWide() {
		return k.seekStream(ctx, p)
	}
	return k.seekShard(ctx, p)
}

func (k *Seeker) seekStream(ctx context.Context, p Position) error {
	s := k.s
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.epoch++
	known := make(map[string]bool, len(s.shards))
	for id := range s.shards {
		known[id] = true
	}
	s.installed = &install{pos: p, epoch: s.epoch, known: known}
	type move struct {
		w   *worker
		gen uint64
	}
	moves := make([]move, 0, len(s.workers))
	for id, w := range s.workers {
		s.applied[id] = s.epoch
		moves = append(moves, move{w, w.bump()})
	}
	s.mu.Unlock()
	// From here the seek has taken effect: the publisher must drop what it holds whatever ctx
	// does (it always answers at once, or has stopped).
	if err := s.fencePublisher(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	errs := make([]error, len(moves))
	var wg sync.WaitGroup
	for i, m := range moves {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.w.reposition(ctx, m.gen, p, nil)
		}()
	}
	wg.Wait()
	s.log.Info("seek", "to", p.String(), "shards", len(moves))
	return errors.Join(errs...)
}

func (k *Seeker) seekShard(ctx context.Context, p Position) error {
	s := k.s
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	w := s.workers[p.shard]
	_, known := s.shards[p.shard]
	known = known || !s.listed // not listed yet: the shard may well exist
	finished := s.finished[p.shard]
	s.mu.Unlock()
	switch {
	case w != nil && (w.ended.Load() || w.lost.Load()):
		if w.ended.Load() {
			return fmt.Errorf("%w: %s", ErrShardFinished, p.shard)
		}
		return fmt.Errorf("%w: %s", ErrShardNotOwned, p.shard)
	case w != nil:
	case finished:
		return fmt.Errorf("%w: %s", ErrShardFinished, p.shard)
	case !known:
		return fmt.Errorf("%w: %s", ErrUnknownShard, p.shard)
	default:
		return fmt.Errorf("%w: %s", ErrShardNotOwned, p.shard)
	}
	// Open the target first, so that a target the service refuses changes nothing.
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	out, err := s.client.GetShardIterator(cctx, p.iteratorInput(s.stream, p.shard), noRetry)
	cancel()
	if err != nil {
		return &ShardError{Stream: s.stream, Shard: p.shard, Op: "Seek", Err: fmt.Errorf("not moved: %w", err)}
	}
	gen := w.bump()
	if err := s.fencePublisher(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	err = w.reposition(ctx, gen, p, out.ShardIterator)
	s.log.Info("seek", "to", p.String())
	return err
}

// reposition writes the shard's watermark once more, resets it to generation gen, and hands
// the reader its new position; it returns when the reader has reopened there. Everything up to
// the hand-over is done whatever ctx does, so the shard is always fully moved; ctx only bounds
// the last write of the old watermark and the wait for the reader.
func (w *worker) reposition(ctx context.Context, gen uint64, p Position, iter *string) error {
	if err := w.flush(ctx); err != nil {
		w.sub.report(err)
	}
	w.mu.Lock()
	if w.gen < gen {
		w.wm = watermark{}
		w.gen = gen
		w.dirty = false
		w.lastSeq = ""
	}
	w.mu.Unlock()
	if w.waitingRoom.Load() {
		select {
		case w.room <- struct{}{}:
		default:
		}
	}
	cmd := &seekCmd{pos: p, iter: iter, gen: gen, done: make(chan error, 1)}
	w.seekMu.Lock()
	if old := w.seekReq; old != nil {
		old.done <- nil // superseded by this seek
	}
	w.seekReq = cmd
	w.renote() // under seekMu, so that the note is armed exactly while a command is pending
	w.seekMu.Unlock()
	select {
	case err := <-cmd.done:
		return err
	case <-w.readerDone:
		if w.lost.Load() {
			return fmt.Errorf("%w: %s (lease lost during seek)", ErrShardNotOwned, w.id)
		}
		return ErrClosed
	case <-ctx.Done():
		return &ShardError{Stream: w.sub.stream, Shard: w.id, Op: "Seek", Err: fmt.Errorf("%w: %w", ErrSeekPending, ctx.Err())}
	}
}
