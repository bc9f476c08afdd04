package kinesub

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Seeker repositions a running subscription. It is safe for concurrent use from any
// goroutine, for example an admin HTTP handler (see SeekHandler).
type Seeker struct {
	s *Subscriber
}

// Seek moves the subscription to p.
//
// A stream-wide position (Horizon, Latest, AtTimestamp) moves every shard this subscriber
// reads and is installed for the whole subscription first, so shards whose readers start
// later (including children of a later split) open there too; for them, Latest is the tip as
// of the seek, so that nothing published after it is skipped. A shard-scoped position
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
// once more, then reset). With Process, no handler is started on such a record either, except
// where a worker had checked the record in the instant of the seek, just before calling the
// handler: that handler's ctx ended before Seek returned, and what it returns is ignored (the
// record is neither acked nor retried). Seek after Close returns ErrClosed.
//
// A Seek that returns an error leaves each shard either where it was or fully moved, and says
// which: an error wrapping ErrSeekPending names a shard that is moved (nothing fetched before
// the seek reaches the consumer) but whose reader had not reopened it when ctx ended; it
// reopens on its own. Any other error means the shard it names was not moved, except for a
// stream-wide seek's reader errors described above. A ctx already done when Seek is called
// changes nothing. A nil ctx is an error wrapping ErrInvalidOption, and changes nothing.
func (k *Seeker) Seek(ctx context.Context, p Position) error {
	if ctx == nil {
		return nilContext("Seek")
	}
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
	ws, ok := s.table.install(p)
	if !ok {
		return ErrClosed
	}
	// From here the seek has taken effect: the gates move and the dispatcher drops what it
	// holds whatever ctx does (it always answers at once, or has stopped).
	gens := s.env.invalidate(ws, &ending{cause: causeSeek, why: "seek to " + p.String()})
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		if gens[i] == 0 {
			continue // lost, finished or handed back meanwhile: its next reader opens at p
		}
		wg.Go(func() { // owned by this Seek, which waits for it
			errs[i] = w.reposition(ctx, gens[i], p)
		})
	}
	wg.Wait()
	s.log.Info("seek", "to", p.String(), "shards", len(ws))
	return errors.Join(errs...)
}

func (k *Seeker) seekShard(ctx context.Context, p Position) error {
	s := k.s
	w, err := s.table.seekTarget(p.shard)
	if err != nil {
		return err
	}
	// Ask the service for the target first, so that a target it refuses changes nothing.
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	_, err = s.client.GetShardIterator(cctx, p.iteratorInput(s.ref, p.shard), noRetry)
	cancel()
	if err != nil {
		return &ShardError{Stream: s.stream, Shard: p.shard, Op: OpSeek, Err: fmt.Errorf("not moved: %w", err)}
	}
	gen := s.env.invalidate([]*worker{w}, &ending{cause: causeSeek, why: "seek to " + p.String()})[0]
	if gen == 0 {
		return notReading(w)
	}
	err = w.reposition(ctx, gen, p)
	s.log.Info("seek", "to", p.String())
	return err
}

// rewind moves m's shard back to m, for records taken and not handled. Unlike a
// shard-scoped Seek it does not ask the service first, whose answer (a throttle, a timeout)
// could leave the records skipped: m was delivered, so its position is valid. It ends only
// the generation m was fetched in, at once and locally, and the reader then reopens at m,
// retrying with backoff as after a stream-wide seek. It returns nil when the shard moved on
// meanwhile (its next reader reads from the checkpoint), and otherwise the error of the wait
// for the reader, which keeps trying on its own.
func (k *Seeker) rewind(ctx context.Context, m *Message) error {
	w := m.shard()
	if w == nil {
		return nil
	}
	p := m.Position()
	gen := k.s.env.invalidate([]*worker{w}, &ending{cause: causeSeek, why: "rewind to " + p.String(), gen: m.pg.gen})[0]
	if gen == 0 {
		return nil
	}
	err := w.reposition(ctx, gen, p)
	k.s.log.Info("rewind", "to", p.String())
	return err
}

// notReading is the error of a shard-scoped seek on a shard whose life here is ending.
func notReading(w *worker) error {
	if w.state() == stateEnded {
		return fmt.Errorf("%w: %s", ErrShardFinished, w.id)
	}
	return fmt.Errorf("%w: %s (its lease was lost or is being given up)", ErrShardNotOwned, w.id)
}

// reposition writes the shard's watermark once more, resets it to generation gen, and hands
// the reader its new position; it returns when the reader has reopened there. Everything up to
// the hand-over is done whatever ctx does, so the shard is always fully moved; ctx only bounds
// the last write of the old watermark and the wait for the reader.
func (w *worker) reposition(ctx context.Context, gen uint64, p Position) error {
	if err := w.flush(ctx); err != nil {
		w.env.reportAll(err)
	}
	if w.lockFlush(ctx) == nil {
		w.endTried = false // the seek moves the shard away from its end: its writes follow it
		w.unlockFlush()
	}
	w.mu.Lock()
	if w.wmGen < gen {
		w.wm = watermark{}
		w.wmGen = gen
		w.dirty = false
		w.lastSeq = ""
	}
	w.mu.Unlock()
	if w.waitingRoom.Load() {
		w.wakeReader()
	}
	cmd := &seekCmd{pos: p, gen: gen, done: make(chan error, 1)}
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
		if w.env.runCtx.Err() != nil {
			return ErrClosed
		}
		return notReading(w)
	case <-ctx.Done():
		return &ShardError{Stream: w.env.stream, Shard: w.id, Op: OpSeek, Err: fmt.Errorf("%w: %w", ErrSeekPending, ctx.Err())}
	}
}

// seekCmd asks a reader to reopen its shard.
type seekCmd struct {
	pos  Position
	gen  uint64
	done chan error
}

// takeSeek returns the pending seek command, if any, and clears its notification: a note
// left armed would keep cutting every later batch short, and the reader would fetch (and
// deliver) the cut batch again from the same iterator.
func (w *worker) takeSeek() *seekCmd {
	w.seekMu.Lock()
	defer w.seekMu.Unlock()
	select {
	case <-w.seekNote:
	default:
	}
	cmd := w.seekReq
	w.seekReq = nil
	return cmd
}

// renote re-arms the seek notification after a wait consumed it, so the loop sees it.
func (w *worker) renote() {
	select {
	case w.seekNote <- struct{}{}:
	default:
	}
}

// apply reopens the shard where a seek asked.
func (r *reader) apply(cmd *seekCmd) {
	w := r.w
	w.shardStarted(cmd.pos, true)
	r.gen = cmd.gen
	r.start = cmd.pos
	r.attempt = 0
	r.opened()
	w.markAt = nil // the seek, not the first open, decides where the shard is read from
	w.fromStart.Store(false)
	r.isOpen = false
	if err := r.src.open(r.ctx, cmd.pos); err != nil {
		// Stopped while opening: say why, as reposition does, rather than "context canceled".
		switch {
		case r.ctx.Err() == nil:
		case w.env.runCtx.Err() != nil:
			err = ErrClosed
		default:
			err = fmt.Errorf("%w: %s (lease lost or given up during seek)", ErrShardNotOwned, w.id)
		}
		cmd.done <- &ShardError{Stream: w.env.stream, Shard: w.id, Op: OpSeek, Err: err}
		r.failed(opOf(err, OpGetShardIterator), err)
		return
	}
	r.openedAt(cmd.pos)
	r.isOpen = true
	cmd.done <- nil
}
