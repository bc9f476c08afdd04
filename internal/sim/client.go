package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gostream/kinesub/lease"
)

// Client is one simulated instance's view of the lease table: a lease.Store whose calls go through the instance's gate (paused, cut off, crashed)
// and its fault schedule: latency, answers lost after the write was applied, writes that time
// out for the caller and are applied later, failures, and index listings that miss rows
// created in the last moments. Conditions compare with, and expiries count from, the
// instance's own wall clock (the simulation's clock plus Skew), as the DynamoDB store's do.
type Client struct {
	T      *Table
	Name   string        // the instance, as the table's writes report it
	Skew   time.Duration // the instance's wall clock minus the simulation's
	Gate   *Gate
	Faults *StoreFaults // nil: none
}

var _ lease.Store = (*Client)(nil)

// ErrTimeout is what a call whose answer never came returns: the write may have been applied,
// now or later.
var ErrTimeout = errors.New("sim: lease table request timed out")

// ErrUnavailable is what a call refused at once returns: nothing was applied.
var ErrUnavailable = errors.New("sim: lease table unavailable")

// ErrThrottled is what a checkpoint write refused by Gate.ThrottleCheckpoints returns: nothing
// was applied.
var ErrThrottled = errors.New("sim: lease table throttled the checkpoint write")

func (c *Client) now() time.Time { return time.Now().Add(c.Skew) }

// write sends o through the gate and the faults.
func (c *Client) write(ctx context.Context, o func(now time.Time) op) (bool, error) {
	if err := c.Gate.enterStore(ctx); err != nil {
		return false, err
	}
	f := c.Faults.draw(true)
	w := o(c.now()) // the request carries the sender's clock, taken when it is sent
	if !sleep(ctx, f.latency) {
		// The caller gave up; the request was sent and may still be applied.
		if f.outcome != fail && c.Faults.coin() {
			c.T.later(f.latency, c.Name, w)
		}
		return false, ctx.Err()
	}
	switch f.outcome {
	case fail:
		return false, c.Gate.leave(ctx, ErrUnavailable)
	case lost:
		c.T.write(c.Name, w, false)
		return false, c.Gate.leave(ctx, ErrTimeout)
	case late:
		c.T.later(f.delay, c.Name, w)
		return false, c.Gate.leave(ctx, ErrTimeout)
	}
	ok := c.T.write(c.Name, w, false)
	return ok, c.Gate.leave(ctx, nil)
}

// writeCheckpoint is write for a checkpoint: refused at once, unapplied, while the gate
// throttles checkpoints.
func (c *Client) writeCheckpoint(ctx context.Context, o func(now time.Time) op) (bool, error) {
	if !c.Gate.throttled() {
		return c.write(ctx, o)
	}
	if err := c.Gate.enterStore(ctx); err != nil {
		return false, err
	}
	return false, c.Gate.leave(ctx, ErrThrottled)
}

// read sends a read through the gate and the faults.
func (c *Client) read(ctx context.Context) (fault, error) {
	if err := c.Gate.enterStore(ctx); err != nil {
		return fault{}, err
	}
	f := c.Faults.draw(false)
	if !sleep(ctx, f.latency) {
		return f, ctx.Err()
	}
	if f.outcome == fail || f.outcome == lost {
		return f, c.Gate.leave(ctx, ErrUnavailable)
	}
	return f, nil
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{lease.ErrInvalidArgument}, args...)...)
}

func checkCall(ctx context.Context, method, key, owner string, needOwner bool) error {
	switch {
	case ctx == nil:
		return invalid("%s: nil context", method)
	case key == "":
		return invalid("%s: empty lease key", method)
	case needOwner && owner == "":
		return invalid("%s: empty owner for lease %q", method, key)
	}
	return nil
}

// Acquire implements lease.Store.
func (c *Client) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := checkCall(ctx, "Acquire", key, owner, true); err != nil {
		return false, err
	}
	if ttl < 0 {
		return false, invalid("Acquire: negative ttl %v", ttl)
	}
	return c.write(ctx, func(now time.Time) op { return acquireOp(key, owner, ttl, now) })
}

// Steal implements lease.Store.
func (c *Client) Steal(ctx context.Context, key, owner string, counter int64, ttl time.Duration) (bool, error) {
	if err := checkCall(ctx, "Steal", key, owner, true); err != nil {
		return false, err
	}
	if ttl < 0 {
		return false, invalid("Steal: negative ttl %v", ttl)
	}
	return c.write(ctx, func(now time.Time) op { return stealOp(key, owner, counter, ttl, now) })
}

// StealNote implements lease.Store.
func (c *Client) StealNote(ctx context.Context, key, owner string, counter int64, ttl time.Duration, note string) (bool, error) {
	if err := checkCall(ctx, "StealNote", key, owner, true); err != nil {
		return false, err
	}
	if ttl < 0 {
		return false, invalid("StealNote: negative ttl %v", ttl)
	}
	if len(note) > lease.MaxNote {
		return false, invalid("StealNote: note of %d bytes, more than %d", len(note), lease.MaxNote)
	}
	return c.write(ctx, func(now time.Time) op {
		o := stealOp(key, owner, counter, ttl, now)
		apply := o.apply
		o.apply = func(r *row, exists bool) bool {
			if !apply(r, exists) {
				return false
			}
			r.l.Note = note
			return true
		}
		return o
	})
}

// Renew implements lease.Store.
func (c *Client) Renew(ctx context.Context, key string, t lease.Tenure, ttl time.Duration) (bool, error) {
	if err := checkCall(ctx, "Renew", key, t.Owner, true); err != nil {
		return false, err
	}
	if ttl <= 0 {
		return false, invalid("Renew: ttl %v must be positive", ttl)
	}
	return c.write(ctx, func(now time.Time) op { return renewOp(key, t, ttl, now) })
}

// Checkpoint implements lease.Store.
func (c *Client) Checkpoint(ctx context.Context, key string, t lease.Tenure, cp lease.Checkpoint) (bool, error) {
	if err := checkCall(ctx, "Checkpoint", key, t.Owner, true); err != nil {
		return false, err
	}
	if err := checkCheckpoint(key, cp); err != nil {
		return false, err
	}
	return c.writeCheckpoint(ctx, func(time.Time) op { return checkpointOp(key, t, cp) })
}

// CheckpointOrdered implements lease.Store.
func (c *Client) CheckpointOrdered(ctx context.Context, key string, t lease.Tenure, cp lease.Checkpoint, n int64) (bool, error) {
	if err := checkCall(ctx, "CheckpointOrdered", key, t.Owner, true); err != nil {
		return false, err
	}
	if n < 1 || n > lease.MaxCheckpointWrite {
		return false, invalid("lease %q: checkpoint write number %d", key, n)
	}
	if err := checkCheckpoint(key, cp); err != nil {
		return false, err
	}
	return c.writeCheckpoint(ctx, func(time.Time) op { return checkpointOrderedOp(key, t, cp, n) })
}

func checkCheckpoint(key string, cp lease.Checkpoint) error {
	switch {
	case cp.Sequence == "":
		return invalid("lease %q: empty checkpoint", key)
	case cp.SubSequence < 0:
		return invalid("lease %q: sub-sequence %d is negative", key, cp.SubSequence)
	}
	return nil
}

// Release implements lease.Store.
func (c *Client) Release(ctx context.Context, key string, t lease.Tenure) (bool, error) {
	if err := checkCall(ctx, "Release", key, t.Owner, true); err != nil {
		return false, err
	}
	return c.write(ctx, func(time.Time) op { return releaseOp(key, t) })
}

// Delete implements lease.Store.
func (c *Client) Delete(ctx context.Context, key string, counter int64) (bool, error) {
	if err := checkCall(ctx, "Delete", key, "", false); err != nil {
		return false, err
	}
	return c.write(ctx, func(now time.Time) op { return deleteOp(key, counter, now) })
}

// Read implements lease.Store: a strongly consistent read.
func (c *Client) Read(ctx context.Context, key string) (lease.Lease, error) {
	if err := checkCall(ctx, "Read", key, "", false); err != nil {
		return lease.Lease{}, err
	}
	if _, err := c.read(ctx); err != nil {
		return lease.Lease{}, err
	}
	l := c.T.Read(key)
	return l, c.Gate.leave(ctx, nil)
}

// List implements lease.Store: a scan, which reads every item.
func (c *Client) List(ctx context.Context) ([]lease.Lease, error) {
	if ctx == nil {
		return nil, invalid("List: nil context")
	}
	if _, err := c.read(ctx); err != nil {
		return nil, err
	}
	rows := c.T.list("", time.Time{})
	return rows, c.Gate.leave(ctx, nil)
}

// ListPrefix implements lease.Store, as a query of the index does: an item that
// entered the index within the fault's lag is missing.
func (c *Client) ListPrefix(ctx context.Context, prefix string) ([]lease.Lease, error) {
	if ctx == nil {
		return nil, invalid("ListPrefix: nil context")
	}
	if prefix == "" {
		return nil, invalid("empty lease key prefix")
	}
	f, err := c.read(ctx)
	if err != nil {
		return nil, err
	}
	var by time.Time
	if f.lag > 0 {
		by = time.Now().Add(-f.lag)
	}
	rows := c.T.list(prefix, by)
	return rows, c.Gate.leave(ctx, nil)
}
