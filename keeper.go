package kinesub

import (
	"context"
	"time"
)

// keep renews the lease every TTL/3 on its own schedule, whatever the consumer does, until
// the shard's life stops it or the lease is lost. Checkpoints are written by the flusher, a
// goroutine of their own, so that a checkpoint write stuck for up to the request timeout never
// delays a renewal past the TTL.
func (w *worker) keep() {
	defer close(w.keeperDone)
	ttl := w.env.cfg.leaseTTL
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
	renew := time.NewTicker(ttl / 3)
	defer renew.Stop()
	for {
		select {
		case <-w.stopKeep:
			return
		case <-w.lost:
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
	return time.Unix(0, w.lastRenew.Load()).Add(w.env.cfg.leaseTTL * 2 / 3)
}

// renew extends the lease; it reports false when the lease is lost: fenced by another owner,
// or not renewed before renewDeadline. The call itself may run until that deadline and no
// longer, so a hung store is noticed as soon as it matters.
func (w *worker) renew() bool {
	env := w.env
	deadline := w.renewDeadline()
	if !time.Now().Before(deadline) {
		w.lose("not renewed in time")
		return false
	}
	ctx, cancel := context.WithDeadline(env.bgCtx, deadline)
	defer cancel()
	ctx, cancelReq := context.WithTimeout(ctx, env.cfg.requestTimeout)
	defer cancelReq()
	before := time.Now()
	ok, err := env.store.Renew(ctx, w.key, w.tenure, env.cfg.leaseTTL)
	switch {
	case err == nil && ok:
		w.lastRenew.Store(before.UnixNano())
		return true
	case err == nil:
		w.lose("fenced by another owner")
		return false
	}
	env.report(&ShardError{Stream: env.stream, Shard: w.id, Op: OpRenew, Err: err})
	if !time.Now().Before(deadline) {
		w.lose("not renewed in time")
		return false
	}
	return true
}

// lose ends the shard after its lease was lost: no further checkpoint, and nothing more
// delivered from it, not even what the dispatcher holds. The new owner replays from the last
// checkpoint.
func (w *worker) lose(why string) {
	w.env.invalidate([]*worker{w}, &ending{cause: causeLoss, why: why})
}
