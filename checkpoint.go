package kinesub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gostream/kinesub/lease"
)

// handBackDrain is how long a shard handed back for balance lets the consumer settle what it
// holds before the last checkpoint.
const handBackDrain = 2 * time.Second

// flushEvery writes the checkpoint every d until the shard's life stops it or the lease is
// lost.
func (w *worker) flushEvery(d time.Duration) {
	defer close(w.flusherDone)
	env := w.env
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-w.stopKeep:
			return
		case <-w.lost:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(env.bgCtx, env.cfg.requestTimeout)
			if err := w.flush(ctx); err != nil {
				env.reportAll(err)
			}
			cancel()
		}
	}
}

// lockFlush takes the right to write the shard's checkpoint, waiting no longer than ctx: a
// write stuck on a hung store must not hold up Close or Commit past their deadlines.
func (w *worker) lockFlush(ctx context.Context) error {
	select {
	case w.flushSem <- struct{}{}:
		return nil
	default:
	}
	select {
	case w.flushSem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *worker) unlockFlush() { <-w.flushSem }

// setWritten records the newest checkpoint written; called with the flush lock held (or
// before the worker starts).
func (w *worker) setWritten(cp lease.Checkpoint) {
	w.written = cp
	w.shown.Store(&cp)
}

// writeCheckpoint writes cp as the shard's checkpoint, conditional on its holding, and numbered
// so that a write of this holding applied late changes nothing (lease.Store.CheckpointOrdered).
// Called with the flush lock held.
func (w *worker) writeCheckpoint(ctx context.Context, cp lease.Checkpoint) (bool, error) {
	w.writes++
	return w.env.store.CheckpointOrdered(ctx, w.key, w.tenureOf(), cp, w.writes)
}

// flush writes the watermark to the lease store if it moved since the last write. A fenced
// write loses the shard and is not an error: the new owner replays. The write runs under ctx
// and the request timeout, whichever ends first.
func (w *worker) flush(ctx context.Context) error {
	env := w.env
	ctx, cancel := context.WithTimeout(ctx, env.cfg.requestTimeout)
	defer cancel()
	if err := w.lockFlush(ctx); err != nil {
		w.mu.Lock()
		pending := w.dirty && w.wm.mark != ""
		w.mu.Unlock()
		if !pending || !w.state().mayCheckpoint() {
			return nil
		}
		return &ShardError{Stream: env.stream, Shard: w.id, Op: OpCheckpoint, Err: fmt.Errorf("another checkpoint write still runs: %w", err)}
	}
	defer w.unlockFlush()
	if !w.state().mayCheckpoint() {
		return nil
	}
	w.mu.Lock()
	cp, dirty := lease.Checkpoint{Sequence: w.wm.mark, SubSequence: int64(w.wm.markSub)}, w.dirty
	w.dirty = false
	w.mu.Unlock()
	if w.endTried {
		// A SHARD_END write of this holding may have landed with its answer lost: nothing
		// short of it is written after it. Every delivery was settled before it was sent
		// (finish), so SHARD_END is what every later write of the holding says, with the
		// instant the children open at as the write that may have landed recorded it.
		cp, dirty = w.endCheckpoint(), true
	}
	if !dirty || cp.Sequence == "" || cp == w.written {
		return nil
	}
	ok, err := w.writeCheckpoint(ctx, cp)
	if err != nil {
		w.mu.Lock()
		w.dirty = true
		w.mu.Unlock()
		return &ShardError{Stream: env.stream, Shard: w.id, Op: OpCheckpoint, Err: err}
	}
	if !ok {
		w.lose("checkpoint fenced")
		return nil
	}
	w.setWritten(cp)
	w.checkpoints.Add(1)
	// LogAttrs: the variadic Debug boxes the sequence into an interface, an allocation on
	// every write even with debug logging off.
	w.log.LogAttrs(ctx, slog.LevelDebug, "checkpoint", slog.String("sequence", cp.Sequence), slog.Int64("sub_sequence", cp.SubSequence))
	return nil
}

// retire writes a draining shard's last checkpoint and releases its lease. The checkpoint
// write is tried again, within ctx, until it lands: the next owner resumes from it. A release
// whose outcome is not known is resolved by a strong read.
func (w *worker) retire(ctx context.Context, handedBack bool) error {
	env := w.env
	err := w.flush(ctx)
	for attempt := 0; err != nil && w.state() == stateDraining && attempt < 3; attempt++ {
		t := time.NewTimer(backoff(attempt))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		if ctx.Err() != nil {
			break
		}
		err = w.flush(ctx)
	}
	if w.state() != stateDraining {
		return err // lost: the new owner replays from the last checkpoint
	}
	if err != nil {
		// The next owner delivers again what was acked since the last checkpoint that landed.
		env.cfg.probes.at("final-checkpoint-failed", w.id, w.tenureOf())
	}
	t := w.tenureOf()
	ok, rerr := env.store.Release(ctx, w.key, t)
	if rerr != nil || !ok {
		if l, err := env.store.Read(ctx, w.key); err == nil && releasedFrom(l, t) {
			ok, rerr = true, nil // landed; its answer was lost
		}
	}
	switch {
	case rerr != nil:
		err = errors.Join(err, &ShardError{Stream: env.stream, Shard: w.id, Op: OpRelease, Err: rerr})
		w.moveTo(stateReleased, "release not written: the lease stays bound here, and a later round takes it up again")
	case !ok:
		w.lose("release fenced")
	default:
		env.changed(ctx)
		// Not moved when a round saw the lease taken after the release landed: it was
		// reported lost then.
		if !w.moveTo(stateReleased, "released") {
			break
		}
		w.stats.transition(transReleasedOr(handedBack))
		w.log.Info("lease released")
		if handedBack {
			w.log.Info("lease handed back for balance")
		}
	}
	return err
}

// releaseFinished hands back the lease of a shard read to its end.
func (w *worker) releaseFinished() {
	env := w.env
	ctx, cancel := context.WithTimeout(env.bgCtx, env.cfg.requestTimeout)
	defer cancel()
	ok, err := env.store.Release(ctx, w.key, w.tenureOf())
	switch {
	case err != nil:
		env.report(&ShardError{Stream: env.stream, Shard: w.id, Op: OpRelease, Err: err})
	case ok:
		w.stats.transition(transReleased)
		env.changed(ctx)
	}
}
