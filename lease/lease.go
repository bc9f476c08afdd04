// Package lease holds the shard leases that let several kinesub subscribers share one stream.
//
// A lease gives one owner the right to read one shard until its expiry; the owner renews it
// well before then. Every write bumps the lease's counter, and every write an owner makes is
// conditional on still owning the lease, so an owner whose lease was taken over (fenced) can
// neither renew nor checkpoint: its writes report false and it stops reading that shard.
//
// Two stores implement Store: Memory, for a single process (tests, a tool run once), and
// DynamoDB, for several processes sharing one table; kinesub.Subscribe needs one of them. Both
// pass the same conformance suite (package leasetest).
package lease

import (
	"context"
	"errors"
	"time"
)

// ShardEnd is the checkpoint value of a shard that has been read to its end: a closed shard
// (after a split or a merge) whose every record was handled. Its children may then start.
const ShardEnd = "SHARD_END"

// Position markers: checkpoint values that record where a shard's first reader opened it
// before any record was handled, so that a later owner opens there too rather than at the tip
// (which would skip what was published in between).
const (
	// TrimHorizon: the shard was opened at its oldest record.
	TrimHorizon = "TRIM_HORIZON"
	// AtTimestampPrefix, followed by milliseconds since the epoch: the shard was opened at the
	// first record that arrived at or after that instant.
	AtTimestampPrefix = "AT_TIMESTAMP:"
)

// Lease is one shard's lease as stored.
type Lease struct {
	// Key names the leased thing; kinesub uses "<stream name>/<shard id>" for shards,
	// "<stream name>/~owner/<owner>" for each subscriber's heartbeat and
	// "<stream name>/~table/changes" for the row whose counter tells subscribers that the
	// stream's leases changed.
	Key string
	// Owner is the current holder, empty when nobody holds the lease (never taken, or released).
	Owner string
	// Expiry is when the owner's claim lapses unless renewed. Zero when released.
	Expiry time.Time
	// Counter is bumped by every write to the lease: a fencing token that only grows.
	Counter int64
	// Checkpoint is the sequence number of the last handled record, ShardEnd, a position
	// marker (TrimHorizon, AtTimestampPrefix…) or empty.
	Checkpoint string
	// SubSequence places the checkpoint inside a record aggregated by the Kinesis Producer
	// Library: when positive, the user records of the aggregate Checkpoint with sub-sequence
	// numbers below SubSequence are handled and the others are not. Zero when the whole record
	// Checkpoint is handled (or the checkpoint is not a sequence number); leases written before
	// sub-sequences were stored read as zero.
	SubSequence int64
}

// Held reports whether a live owner holds the lease at instant now.
func (l Lease) Held(now time.Time) bool {
	return l.Owner != "" && now.Before(l.Expiry)
}

// Store keeps leases. Implementations are safe for concurrent use. Every method takes a
// non-nil ctx: both stores here answer a nil one with an error wrapping ErrInvalidArgument,
// before any I/O.
//
// The boolean results report ownership, not failure: false means another owner holds the
// lease (Acquire, Steal) or the caller no longer owns it (Renew, Checkpoint). An error means
// the store could not be asked.
type Store interface {
	// Acquire takes the lease for owner for ttl when it is free, released, expired or already
	// owner's. It returns false while another live owner holds it.
	Acquire(ctx context.Context, key, owner string, ttl time.Duration) (bool, error)
	// Steal takes the lease for owner for ttl whatever its state, provided its counter still
	// equals counter (as observed by Read or List): the fenced-takeover used by balancing.
	Steal(ctx context.Context, key, owner string, counter int64, ttl time.Duration) (bool, error)
	// Renew extends owner's lease to now+ttl. It returns false when owner no longer holds it.
	Renew(ctx context.Context, key, owner string, ttl time.Duration) (bool, error)
	// Checkpoint records sequence and subSequence (see Lease.SubSequence; 0 outside an
	// aggregate) as the lease's checkpoint, conditional on owner holding it. It returns false
	// when owner no longer holds it (fenced). A negative subSequence is an error wrapping
	// ErrInvalidArgument.
	Checkpoint(ctx context.Context, key, owner, sequence string, subSequence int64) (bool, error)
	// Read returns the lease, or a zero Lease with only Key set when there is none.
	Read(ctx context.Context, key string) (Lease, error)
	// Release hands the lease back at once, keeping its checkpoint, when owner holds it; it
	// changes nothing otherwise.
	Release(ctx context.Context, key, owner string) error
	// List returns every lease in the store.
	List(ctx context.Context) ([]Lease, error)
	// Delete removes the lease, whoever holds it, provided its counter still equals counter
	// (as observed by Read or List). It returns false when the counter changed or the lease is
	// absent. A deleted lease is absent: Read returns a zero Lease, an owner's writes report
	// false, and a later Acquire starts it afresh (counter 1, no checkpoint). Counters only grow
	// while a lease exists, so delete a key only once nobody acts on a counter observed
	// before: kinesub deletes the leases of shards gone from the stream and of owners gone
	// from the table.
	Delete(ctx context.Context, key string, counter int64) (bool, error)
}

// PrefixLister is implemented by stores that can list the leases whose keys start with a
// prefix: kinesub lists "<stream name>/" to read one stream's rows of a table that several
// streams share (DynamoDB reads only those rows through its index when that is cheaper than a
// Scan of the table). Both stores here implement it. A subscriber whose store does not lists
// the whole store every second instead (see kinesub's README).
type PrefixLister interface {
	// ListPrefix returns the leases whose keys start with prefix, sorted by key. An empty
	// prefix is an error wrapping ErrInvalidArgument.
	ListPrefix(ctx context.Context, prefix string) ([]Lease, error)
}

// WeakReader is implemented by stores that can read a lease more cheaply when the answer may
// be a little stale (an eventually consistent read on DynamoDB: half the read units, usually
// current within a second). kinesub reads the change row so each second: a missed bump is
// seen at the next read, and every decision the row triggers ends in a conditional write.
type WeakReader interface {
	// ReadWeak returns the lease as Read does, possibly without the latest writes.
	ReadWeak(ctx context.Context, key string) (Lease, error)
}

// ErrInvalidArgument is returned, wrapped, for a nil context, an empty key, owner or table name,
// or a non-positive TTL. Such calls do no I/O.
var ErrInvalidArgument = errors.New("lease: invalid argument")

// ErrTableNotFound is returned, wrapped, when the DynamoDB lease table does not exist.
var ErrTableNotFound = errors.New("lease: table not found")
