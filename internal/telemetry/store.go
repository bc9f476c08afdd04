package telemetry

import (
	"context"
	"time"

	"github.com/gostream/kinesub/lease"
)

// Store counts the calls made to the lease store Store in Requests, each as "lease." and the
// method's name (StealNote as lease.Steal, CheckpointOrdered as lease.Checkpoint, ListPrefix
// as lease.List), and tells its callbacks what the calls report. It is safe for concurrent use
// when Store and the callbacks are.
type Store struct {
	Store    lease.Store
	Requests *Requests
	// Capacity, if not nil, is passed the capacity units each call of operation op consumed,
	// as a DynamoDB store reports them (lease.WithConsumedCapacity), from the calling
	// goroutine; ctx is the call's.
	Capacity func(ctx context.Context, op string, units float64)
	// Checkpointed, if not nil, is passed the result of every checkpoint write (Checkpoint,
	// CheckpointOrdered) to key: ok false without an error is a write fenced off.
	Checkpointed func(ctx context.Context, key string, ok bool, err error)
}

var _ lease.Store = Store{}

// call returns ctx under which the store reports the capacity op consumes to Capacity, and
// the time the call starts.
func (c Store) call(ctx context.Context, op string) (context.Context, time.Time) {
	if c.Capacity != nil {
		outer := ctx
		ctx = lease.WithConsumedCapacity(ctx, func(units float64) { c.Capacity(outer, op, units) })
	}
	return ctx, time.Now()
}

func (c Store) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	ctx, start := c.call(ctx, "lease.Acquire")
	ok, err := c.Store.Acquire(ctx, key, owner, ttl)
	c.Requests.Record(ctx, "lease.Acquire", start, err)
	return ok, err
}

func (c Store) Steal(ctx context.Context, key, owner string, counter int64, ttl time.Duration) (bool, error) {
	ctx, start := c.call(ctx, "lease.Steal")
	ok, err := c.Store.Steal(ctx, key, owner, counter, ttl)
	c.Requests.Record(ctx, "lease.Steal", start, err)
	return ok, err
}

// StealNote is counted as lease.Steal.
func (c Store) StealNote(ctx context.Context, key, owner string, counter int64, ttl time.Duration, note string) (bool, error) {
	ctx, start := c.call(ctx, "lease.Steal")
	ok, err := c.Store.StealNote(ctx, key, owner, counter, ttl, note)
	c.Requests.Record(ctx, "lease.Steal", start, err)
	return ok, err
}

func (c Store) Renew(ctx context.Context, key string, t lease.Tenure, ttl time.Duration) (bool, error) {
	ctx, start := c.call(ctx, "lease.Renew")
	ok, err := c.Store.Renew(ctx, key, t, ttl)
	c.Requests.Record(ctx, "lease.Renew", start, err)
	return ok, err
}

func (c Store) Checkpoint(ctx context.Context, key string, t lease.Tenure, cp lease.Checkpoint) (bool, error) {
	ctx, start := c.call(ctx, "lease.Checkpoint")
	ok, err := c.Store.Checkpoint(ctx, key, t, cp)
	c.Requests.Record(ctx, "lease.Checkpoint", start, err)
	c.checkpointed(ctx, key, ok, err)
	return ok, err
}

// CheckpointOrdered is counted as lease.Checkpoint.
func (c Store) CheckpointOrdered(ctx context.Context, key string, t lease.Tenure, cp lease.Checkpoint, n int64) (bool, error) {
	ctx, start := c.call(ctx, "lease.Checkpoint")
	ok, err := c.Store.CheckpointOrdered(ctx, key, t, cp, n)
	c.Requests.Record(ctx, "lease.Checkpoint", start, err)
	c.checkpointed(ctx, key, ok, err)
	return ok, err
}

func (c Store) checkpointed(ctx context.Context, key string, ok bool, err error) {
	if c.Checkpointed != nil {
		c.Checkpointed(ctx, key, ok, err)
	}
}

func (c Store) Read(ctx context.Context, key string) (lease.Lease, error) {
	ctx, start := c.call(ctx, "lease.Read")
	l, err := c.Store.Read(ctx, key)
	c.Requests.Record(ctx, "lease.Read", start, err)
	return l, err
}

func (c Store) Release(ctx context.Context, key string, t lease.Tenure) (bool, error) {
	ctx, start := c.call(ctx, "lease.Release")
	ok, err := c.Store.Release(ctx, key, t)
	c.Requests.Record(ctx, "lease.Release", start, err)
	return ok, err
}

func (c Store) List(ctx context.Context) ([]lease.Lease, error) {
	ctx, start := c.call(ctx, "lease.List")
	ls, err := c.Store.List(ctx)
	c.Requests.Record(ctx, "lease.List", start, err)
	return ls, err
}

// ListPrefix is counted as lease.List: one stream's rows are what a subscriber lists.
func (c Store) ListPrefix(ctx context.Context, prefix string) ([]lease.Lease, error) {
	ctx, start := c.call(ctx, "lease.List")
	ls, err := c.Store.ListPrefix(ctx, prefix)
	c.Requests.Record(ctx, "lease.List", start, err)
	return ls, err
}

func (c Store) Delete(ctx context.Context, key string, counter int64) (bool, error) {
	ctx, start := c.call(ctx, "lease.Delete")
	ok, err := c.Store.Delete(ctx, key, counter)
	c.Requests.Record(ctx, "lease.Delete", start, err)
	return ok, err
}
