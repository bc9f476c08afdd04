package kinesub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// handBackDrain is how long a shard handed back for balance lets the consumer settle what it
// holds before the final checkpoint.
const handBackDrain = 2 * time.Second

// flushEvery writes the checkpoint every d until the keeper stops or the lease is lost.
func (w *worker) flushEvery(d time.Duration) {
	s := w.sub
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-w.keeperStop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(s.bgCtx, s.cfg.requestTimeout)
			if err := w.flush(ctx); err != nil {
				s.reportAll(err)
			}
			cancel()
			if w.lost.Load() {
				return
			}
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

// flush writes the watermark to the lease store if it moved since the last write. A fenced
// write stops the shard and is not an error: the new owner replays. The write runs under
// ctx and the request timeout, whichever ends first.
func (w *worker) flush(ctx context.Context) error {
	s := w.sub
	ctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	defer cancel()
	if err := w.lockFlush(ctx); err != nil {
		w.mu.Lock()
		pending := w.dirty && w.wm.mark != ""
		w.mu.Unlock()
		if !pending || w.lost.Load() {
			return nil
		}
		return &ShardError{Stream: s.stream, Shard: w.id, Op: OpCheckpoint, Err: fmt.Errorf("another checkpoint write still runs: %w", err)}
	}
	defer w.unlockFlush()
	if w.lost.Load() {
		return nil
	}
	w.mu.Lock()
	mark, sub, dirty := w.wm.mark, w.wm.markSub, w.dirty
	w.dirty = false
	w.mu.Unlock()
	if !dirty || mark == "" || mark == w.written && sub == w.writtenSub {
		return nil
	}
	ok, err := s.cfg.store.Checkpoint(ctx, w.key, s.cfg.owner, mark, int64(sub))
	if err != nil {
		w.mu.Lock()
		w.dirty = true
		w.mu.Unlock()
		return &ShardError{Stream: s.stream, Shard: w.id, Op: OpCheckpoint, Err: err}
	}
	if !ok {
		w.lose("checkpoint fenced")
		return nil
	}
	w.setWritten(mark, sub)
	w.checkpoints.Add(1)
	// LogAttrs: the variadic Debug boxes mark into an interface, an allocation on every write
	// even with debug logging off.
	w.log.LogAttrs(ctx, slog.LevelDebug, "checkpoint", slog.String("sequence", mark), slog.Int("sub_sequence", sub))
	return nil
}

// retire ends an owned shard at Close: final checkpoint, then release.
func (w *worker) retire(ctx context.Context) error {
	w.stopKeeper()
	select {
	case <-w.keeperDone:
	case <-ctx.Done():
		// A renewal or a flush still hangs; the writes below wait on the same deadline.
	}
	if w.lost.Load() || w.ended.Load() {
		return nil
	}
	if w.starting.Load() {
		// Stolen and not yet read: its previous owner may still be reading it. Released now,
		// it could be taken by a peer that reads at once, so it is left to expire.
		w.log.Info("stolen lease left to expire", "ttl", w.sub.cfg.leaseTTL)
		return nil
	}
	err := w.flush(ctx)
	if w.lost.Load() {
		return err
	}
	if rerr := w.sub.cfg.store.Release(ctx, w.key, w.sub.cfg.owner); rerr != nil {
		err = errors.Join(err, &ShardError{Stream: w.sub.stream, Shard: w.id, Op: OpRelease, Err: rerr})
	} else {
		w.stats.transition(transReleasedOr(w.leaving.Load()))
		w.log.Info("lease released")
		w.sub.changed(ctx)
	}
	return err
}

// handBack stops reading the shard and releases its lease after a final checkpoint, for
// balancing. Deliveries not yet handed out are dropped; the next owner reads them again.
// Those handed out get up to handBackDrain to be settled first.
func (w *worker) handBack() {
	s := w.sub
	w.bumpDraining() // Process's running handlers keep their context until endDrain
	w.cancelRead()
	<-w.readerDone
	// Let the consumer settle what it holds from this shard, so that the next owner resumes
	// after it rather than delivering it again. The lease is still renewed meanwhile.
	if s.fenceDispatch(s.bgCtx) == nil {
		t := time.NewTimer(handBackDrain)
		defer t.Stop()
	drain:
		for w.handedOut.Load() > 0 {
			select {
			case <-t.C:
				break drain
			case <-s.bgCtx.Done():
				break drain
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	w.endDrain() // Process: handlers still running are cancelled (process_seam.go)
	ctx, cancel := context.WithTimeout(s.bgCtx, 2*s.cfg.requestTimeout)
	defer cancel()
	if err := w.retire(ctx); err != nil {
		s.reportAll(err)
	}
	w.log.Info("lease handed back for balance")
	s.forget(w, false)
}

// releaseFinished hands back the lease of a shard read to its end.
func (w *worker) releaseFinished() {
	s := w.sub
	ctx, cancel := context.WithTimeout(s.bgCtx, s.cfg.requestTimeout)
	defer cancel()
	if err := s.cfg.store.Release(ctx, w.key, s.cfg.owner); err != nil {
		s.report(&ShardError{Stream: s.stream, Shard: w.id, Op: OpRelease, Err: err})
	} else {
		w.stats.transition(transReleased)
		s.changed(ctx)
	}
	w.log.Info("shard finished")
}
