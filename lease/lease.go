// Package lease holds the shard leases that let several kinesub subscribers share one stream.
//
// A lease gives one owner the right to read one shard until it expires, is released or is
// taken over. Every write that changes the holder adds one to the lease's counter, and every
// write an owner makes is conditional on its holding (the owner and that counter: Tenure), so
// an owner whose lease was taken over, or taken over and taken back, cannot renew, checkpoint
// or release with what it held before: its writes report false and it stops reading that
// shard.
//
// Two stores implement Store: Memory, for a single process (tests, a tool run once), and
// DynamoDB, for several processes sharing one table; kinesub.Subscribe needs a Store. Both
// pass the same conformance suite (package leasetest), which a store of your own, or a wrapper
// of one, can run too. Ordered checkpoints (CheckpointOrdered), notes (StealNote) and listing
// by prefix (ListPrefix) are part of Store, so that a wrapper cannot lose them unseen.
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

// Lease is one lease as stored.
type Lease struct {
	// Key names the leased thing; kinesub uses "<stream name>/<shard id>" for shards,
	// "<stream name>/~v2/owner/<owner>" for each subscriber's heartbeat,
	// "<stream name>/~table/changes" for the row whose counter tells subscribers that the
	// stream's leases changed, and "<stream name>/kinesub-lease-protocol-2" for the row that
	// marks the stream's lease protocol. KindOf tells them apart.
	Key string
	// Owner is the current holder, empty when nobody holds the lease (never taken, or released).
	Owner string
	// Expiry is when the owner's claim lapses unless renewed. Zero when released, and for a
	// lease taken without a TTL, which never lapses: it is held until released, stolen or
	// deleted.
	Expiry time.Time
	// Counter is the fencing token: every write that changes who holds the lease (Acquire,
	// Steal, Release) adds one to it, and no other write changes it, so a holder knows the
	// counter of its holding (see Tenure) and a thief can tell that the lease is as it saw it.
	Counter int64
	// Checkpoint is where the lease's shard was read to.
	Checkpoint Checkpoint
	// Note is the text the last StealNote wrote, empty if none did; no other
	// write changes it. kinesub notes each subscriber's measured load on its heartbeat row,
	// and, on a lease it steals pending, the holder the steal's wait protects.
	Note string
}

// Checkpoint is where a shard was read to, as its lease records it.
type Checkpoint struct {
	// Sequence is the sequence number of the last handled record, ShardEnd, a position
	// marker (TrimHorizon, AtTimestampPrefix…) or empty (none yet).
	Sequence string
	// SubSequence places the checkpoint inside a record aggregated by the Kinesis Producer
	// Library: when positive, the user records of the aggregate Sequence with sub-sequence
	// numbers below SubSequence are handled and the others are not. Zero when the whole record
	// Sequence is handled, or Sequence is a position marker or empty; leases written before
	// sub-sequences were stored read as zero. With ShardEnd: zero, or the instant (milliseconds
	// since the epoch) the shard's children open at, which kinesub records when it read the
	// shard from that stream-wide start. Never negative.
	SubSequence int64
}

// Tenure is one holding of a lease: its owner and the lease's counter from the write that
// gave it to them (Acquire, Steal: the counter Read then returns). Renew, Checkpoint and
// Release are conditional on both, so that a write sent during one holding can never land in
// a later one, not even in a later holding by the same owner.
type Tenure struct {
	Owner   string
	Counter int64
}

// Tenure returns the holding the lease records: its owner and counter.
func (l Lease) Tenure() Tenure { return Tenure{Owner: l.Owner, Counter: l.Counter} }

// Held reports whether an owner holds the lease at instant now: one whose lease has not
// expired, or one that took it without a TTL.
func (l Lease) Held(now time.Time) bool {
	return l.Owner != "" && (l.Expiry.IsZero() || now.Before(l.Expiry))
}

// Store keeps leases. Implementations are safe for concurrent use. Every method takes a
// non-nil ctx: both stores here answer a nil one with an error wrapping ErrInvalidArgument,
// before any I/O.
//
// The boolean results report ownership, not failure: false means another owner holds the
// lease (Acquire), it changed since the caller saw it (Steal, StealNote, Delete), or the
// caller's holding is over (Renew, Checkpoint, CheckpointOrdered, Release). An error means the
// store could not be asked; the write may or may not have been applied.
//
// A TTL is either positive, for a lease that lapses unless renewed, or zero, for one that
// never lapses: held until released, stolen or deleted (a subscriber ties such leases to a
// heartbeat row of its own, renewed with a TTL, and peers steal them once that row lapsed).
//
// kinesub calls every method but Checkpoint and List, which tools use (importers, listings of
// the whole table). A wrapper of a Store (metrics, tracing, fault injection) that embeds
// Store forwards every method; one that overrides a method to observe or change what a
// subscriber does overrides the method kinesub calls: CheckpointOrdered for checkpoints,
// StealNote beside Steal (heartbeat renewals, pending steals), ListPrefix for listings.
type Store interface {
	// Acquire takes the lease for owner, for ttl, when nobody holds it (absent, released,
	// expired) or owner already does; it adds one to the counter. It returns false while
	// another owner holds it.
	Acquire(ctx context.Context, key, owner string, ttl time.Duration) (bool, error)
	// Steal takes the lease for owner, for ttl, whoever holds it, provided its counter still
	// equals counter (as observed by Read or List): the fenced takeover used by balancing. It
	// adds one to the counter, and returns false when the counter differs or the lease is
	// absent.
	Steal(ctx context.Context, key, owner string, counter int64, ttl time.Duration) (bool, error)
	// StealNote is Steal that also sets the lease's Note to note (at most MaxNote bytes;
	// longer is an error wrapping ErrInvalidArgument), in the same write. kinesub renews its
	// heartbeat row with a StealNote at the row's own counter, noting there the load its
	// readers measure, so that peers balance by load at no extra write; a steal of a shard's
	// lease for balance notes whose reading its wait protects, so that a later taker need not
	// wait for a holder that stopped.
	StealNote(ctx context.Context, key, owner string, counter int64, ttl time.Duration, note string) (bool, error)
	// Renew extends the holding t to now+ttl (ttl > 0); the counter is unchanged. It never
	// moves the expiry back: when the lease already lapses later (a renewal sent after this one
	// arrived first, or this one arrives late), it changes nothing and reports true. It returns
	// false when t is over: the lease has another owner or counter, or none.
	Renew(ctx context.Context, key string, t Tenure, ttl time.Duration) (bool, error)
	// Checkpoint records cp as the lease's checkpoint, conditional on the holding t; the
	// counter is unchanged. It returns false when t is over (fenced). An empty sequence or a
	// negative sub-sequence is an error wrapping ErrInvalidArgument. kinesub writes its
	// checkpoints with CheckpointOrdered.
	Checkpoint(ctx context.Context, key string, t Tenure, cp Checkpoint) (bool, error)
	// CheckpointOrdered records cp as Checkpoint does, conditional on the holding t, unless the
	// lease records a checkpoint written in holding t with a higher write number than n: then
	// it changes nothing and reports true, since the holding is current and its newer checkpoint
	// stands. The same n may be written again (a retry). n runs from 1 to MaxCheckpointWrite;
	// another n, an empty sequence or a negative sub-sequence is an error wrapping
	// ErrInvalidArgument. A Checkpoint write forgets the order: any n is applied after it.
	//
	// A write that times out for its sender may still be applied later, even after the
	// sender's next write (DynamoDB's documentation says as much of any write): with
	// Checkpoint, such a late write would move the checkpoint back, and the shard's next owner
	// would deliver again what was acknowledged between the two. kinesub numbers the
	// checkpoint writes of each holding 1, 2, 3… and writes them all with CheckpointOrdered.
	CheckpointOrdered(ctx context.Context, key string, t Tenure, cp Checkpoint, n int64) (bool, error)
	// Read returns the lease, or a zero Lease with only Key set when there is none.
	Read(ctx context.Context, key string) (Lease, error)
	// Release ends the holding t at once, keeping the checkpoint, and adds one to the
	// counter; the lease is free for anyone to Acquire. It returns false, changing nothing,
	// when t is over.
	Release(ctx context.Context, key string, t Tenure) (bool, error)
	// List returns every lease in the store.
	List(ctx context.Context) ([]Lease, error)
	// ListPrefix returns the leases whose keys start with prefix, sorted by key. An empty
	// prefix is an error wrapping ErrInvalidArgument. kinesub lists "<stream name>/" to read
	// one stream's rows of a table that several streams share (DynamoDB reads only those rows
	// through its index when that is cheaper than a Scan of the table). A store that cannot
	// list less than every row lists them all and keeps those with the prefix.
	ListPrefix(ctx context.Context, prefix string) ([]Lease, error)
	// Delete removes the lease, provided its counter still equals counter (as observed by
	// Read or List) and nobody holds it: released, never held, or expired at now. It returns
	// false otherwise, and when the lease is absent. A deleted lease is absent: Read returns a
	// zero Lease, a former owner's writes report false, and a later Acquire starts it afresh
	// (counter 1, no checkpoint). Counters only grow while a lease exists, so delete a key
	// only once nobody acts on a counter observed before: kinesub deletes the leases of shards
	// gone from the stream and the heartbeat rows of owners gone from the table.
	Delete(ctx context.Context, key string, counter int64) (bool, error)
}

// PrefixLister is the part of Store that lists by prefix. Every Store implements it.
//
// Deprecated: ListPrefix is part of Store; use Store.
type PrefixLister interface {
	// ListPrefix is Store.ListPrefix.
	ListPrefix(ctx context.Context, prefix string) ([]Lease, error)
}

// MaxNote is the longest Note StealNote takes, in bytes.
const MaxNote = 256

// MaxCheckpointWrite is the highest write number CheckpointOrdered takes: a holding that
// checkpoints ten times a second reaches it after more than thirteen years.
const MaxCheckpointWrite = 1<<32 - 1

// ErrInvalidArgument is returned, wrapped, for a nil context, an empty key, owner or table name,
// or a non-positive TTL. Such calls do no I/O.
var ErrInvalidArgument = errors.New("lease: invalid argument")

// ErrTableNotFound is returned, wrapped, when the DynamoDB lease table does not exist.
var ErrTableNotFound = errors.New("lease: table not found")
