package kinesub

import (
	"fmt"

	"github.com/gostream/kinesub/lease"
)

// ShardListener is told when this subscriber starts and stops reading a shard, for consumers
// that keep state per shard: load it in Started, flush it in Stopped. Either function may be
// nil. See WithShardListener.
type ShardListener struct {
	// Started is called when this subscriber starts reading a shard: after it took the
	// shard's lease (and, for a lease stolen for balance, once the previous owner has
	// stopped), and after a Seek moved the shard. The shard's records are read once it
	// returns.
	Started func(ShardStart)
	// Stopped is called when this subscriber stops reading a shard it was told Started for,
	// once the shard's deliveries were settled or abandoned: nothing more of that reading is
	// handed out, and acks of what was move no checkpoint and return ErrAckedLate (see
	// StopReason for which).
	Stopped func(ShardStop)
}

// ShardStart tells ShardListener.Started where reading starts.
type ShardStart struct {
	ShardID string
	// Position is where the shard is read from: after its checkpoint, at the initial or
	// WithStartAt position for a shard never read, or where a Seek moved it.
	Position Position
	// Tenure is the lease holding the shard is read under (Message.Tenure).
	Tenure lease.Tenure
}

// ShardStop tells ShardListener.Stopped why reading a shard stopped.
type ShardStop struct {
	ShardID string
	Reason  StopReason
	// Tenure is the lease holding the shard was read under.
	Tenure lease.Tenure
}

// StopReason is why this subscriber stopped reading a shard.
type StopReason uint8

const (
	// StopHandedBack: balancing handed the lease back to share the shards with another
	// subscriber. The deliveries handed out were settled (or the hand-back's wait for them
	// ran out) and the last checkpoint written; the lease is released right after Stopped
	// returns, so the next owner starts after this Stopped.
	StopHandedBack StopReason = iota + 1
	// StopLeaseLost: the lease was taken over or not renewed in time. Deliveries still
	// unsettled are abandoned: their acks no longer count, and the next owner delivers them
	// again. Process handlers still running on them were told to stop (their context ended).
	StopLeaseLost
	// StopShardEnded: the shard was read to its end (after a split or a merge) and every
	// delivery was settled. Stopped is called before SHARD_END is written, so a child
	// shard's Started, here or on another subscriber, comes after it.
	StopShardEnded
	// StopSought: a Seek moved the shard. Deliveries from before the seek are abandoned as
	// for StopLeaseLost (Process handlers on them were told to stop); Started follows with
	// the new position.
	StopSought
	// StopClosing: Close (or the end of Subscribe's context) stops the subscription. The
	// deliveries handed out were settled (or Close's context ended first) and the last
	// checkpoint written; the lease is released after Stopped returns.
	StopClosing
)

func (r StopReason) String() string {
	switch r {
	case StopHandedBack:
		return "handed back"
	case StopLeaseLost:
		return "lease lost"
	case StopShardEnded:
		return "shard ended"
	case StopSought:
		return "sought"
	case StopClosing:
		return "closing"
	}
	return fmt.Sprintf("StopReason(%d)", uint8(r))
}

// WithShardListener sets functions called as this subscriber starts and stops reading each
// shard, as the KCL's initialize, leaseLost, shardEnded and shutdownRequested are. The default
// calls nothing.
//
// For each shard the calls alternate, Started then Stopped, and every Started is followed by
// one Stopped before Close returns (unless Close's context ends first while the listener
// runs). Calls for one shard come from one goroutine, one after the other; calls for
// different shards may run at once. The shard waits while a call runs: its records are not
// read before Started returns, and its lease is not released before Stopped returns, so keep
// them short (Close waits for them). A lease stolen for balance that Close or a loss ends
// before it was read gets no call.
func WithShardListener(l ShardListener) Option {
	return func(c *config) { c.listener = l }
}

// listening is a shard's side of its ShardListener: whether Started was called and not yet
// followed by Stopped. It is used from the shard's life goroutine only (its reader, its drain).
type listening struct {
	started bool
}

// shardStarted calls Started for reading from pos, first calling Stopped(sought) if the shard
// was being read.
func (w *worker) shardStarted(pos Position, seek bool) {
	l := w.env.cfg.listener
	if l.Started == nil && l.Stopped == nil {
		return
	}
	if seek {
		w.shardStopped(StopSought)
	}
	w.listen.started = true
	if l.Started != nil {
		l.Started(ShardStart{ShardID: w.id, Position: pos, Tenure: w.tenureOf()})
	}
}

// shardStopped calls Stopped for reason, if Started was called and not yet followed by it.
func (w *worker) shardStopped(reason StopReason) {
	if !w.listen.started {
		return
	}
	w.listen.started = false
	if l := w.env.cfg.listener; l.Stopped != nil {
		l.Stopped(ShardStop{ShardID: w.id, Reason: reason, Tenure: w.tenureOf()})
	}
}
