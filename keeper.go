package kinesub

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// keep renews the lease every TTL/3 and flushes the checkpoint every checkpoint interval, on
// its own schedule: a consumer that stops reading does not stop either. Flushes run on a
// goroutine of their own, so that a checkpoint write stuck for up to the request timeout never
// delays a renewal past the TTL.
func (w *worker) keep() {
	s := w.sub
	defer s.keepers.Done()
	defer close(w.keeperDone)
	var flusher sync.WaitGroup
	defer flusher.Wait()
	if s.cfg.checkpointInterval > 0 {
		flusher.Add(1)
		go func() { // owned by the keeper, which waits for it before it returns
			defer flusher.Done()
			w.flushEvery(s.cfg.checkpointInterval)
		}()
	}
	// Reading must stop before the lease can lapse under it, whether renewals fail fast, hang,
	// or a store call overstays its context: the deadline is kept by a timer of its own, which
	// keep stops, or waits for, before it returns.
	fired := make(chan struct{})
	expire := time.AfterFunc(time.Until(w.renewDeadline()), func() {
		defer close(fired)
		w.lose("not renewed in time")
	})
	defer func() {
		if !expire.Stop() {
			<-fired
		}
	}()
	renew := time.NewTicker(s.cfg.leaseTTL / 3)
	defer renew.Stop()
	for {
		select {
		case <-w.keeperStop:
			return
		case <-renew.C:
			if !w.renew() || !expire.Stop() {
				return // lost; or the deadline passed while the renewal ran, and lose ran
			}
			expire.Reset(time.Until(w.renewDeadline()))
		}
	}
}

// renewDeadline is when this owner must have stopped reading unless a renewal succeeds first:
// 2/3 of the TTL after the last successful renewal was sent. The lease itself lasts the whole
// TTL from when the store applied that renewal, so the reader stops at least TTL/3 before the
// lease can be taken as expired, and a thief that stole it waits out this deadline (stealWait).
func (w *worker) renewDeadline() time.Time {
	return time.Unix(0, w.lastRenew.Load()).Add(w.sub.cfg.leaseTTL * 2 / 3)
}

// renew extends the lease; it reports false when the lease is lost: fenced by another owner,
// or not renewed before renewDeadline. The call itself may run until that deadline and no
// longer, so a hung store is noticed as soon as it matters.
func (w *worker) renew() bool {
	s := w.sub
	deadline := w.renewDeadline()
	if !time.Now().Before(deadline) {
		w.lose("not renewed in time")
		return false
	}
	ctx, cancel := context.WithDeadline(s.bgCtx, deadline)
	defer cancel()
	ctx, cancelReq := context.WithTimeout(ctx, s.cfg.requestTimeout)
	defer cancelReq()
	before := time.Now()
	ok, err := s.cfg.store.Renew(ctx, w.key, s.cfg.owner, s.cfg.leaseTTL)
	switch {
	case err == nil && ok:
		w.lastRenew.Store(before.UnixNano())
		return true
	case err == nil:
		w.lose("fenced by another owner")
		return false
	}
	s.report(&ShardError{Stream: s.stream, Shard: w.id, Op: OpRenew, Err: err})
	if !time.Now().Before(deadline) {
		w.lose("not renewed in time")
		return false
	}
	return true
}

// lose stops the shard after its lease was lost: no further checkpoint, and nothing more
// delivered from it, not even the record the dispatcher holds. The new owner replays from the
// last checkpoint.
func (w *worker) lose(why string) {
	if !w.lost.CompareAndSwap(false, true) {
		return
	}
	w.bump()
	w.cancelRead()
	w.stopKeeper()
	// The dispatcher re-checks the gate of the record it holds; it always answers at once, or
	// has returned.
	_ = w.sub.fenceDispatch(context.Background())
	w.stats.transition(transLost)
	w.log.Info("lease lost", "why", why)
	w.sub.report(&ShardError{Stream: w.sub.stream, Shard: w.id, Op: OpLease, Err: fmt.Errorf("%w: %s", ErrLeaseLost, why)})
}
