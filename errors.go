package kinesub

import (
	"errors"
	"fmt"
	"github.com/gostream/kinesub/internal/envelope"
)

var (
	// ErrClosed is returned by calls on a Subscriber (or its Seeker) after Close.
	ErrClosed = errors.New("kinesub: subscriber closed")
	// ErrInvalidOption is wrapped by every error about an option's value; the message names
	// the option and its allowed range.
	ErrInvalidOption = errors.New("kinesub: invalid option")
	// ErrStreamNotFound means the stream does not exist (or was deleted while being read).
	ErrStreamNotFound = errors.New("kinesub: stream not found")
	// ErrShardNotOwned is returned by a shard-scoped Seek when this subscriber does not hold
	// the shard's lease.
	ErrShardNotOwned = errors.New("kinesub: shard not owned by this subscriber")
	// ErrShardFinished is returned by a shard-scoped Seek on a shard read to its end.
	ErrShardFinished = errors.New("kinesub: shard finished")
	// ErrUnknownShard is returned by a shard-scoped Seek naming a shard the stream lacks.
	ErrUnknownShard = errors.New("kinesub: unknown shard")
	// ErrAggregatedRecord is reported (on Errors) for a record that starts like a KPL aggregate
	// but is not a valid one (bad digest or protobuf); it is not delivered and counts as
	// handled. Valid aggregates are split into their user records.
	ErrAggregatedRecord = errors.New("kinesub: malformed KPL-aggregated record")
	// ErrInvalidPosition is wrapped by ParsePosition's errors.
	ErrInvalidPosition = errors.New("kinesub: invalid position")
	// ErrLeaseLost is reported (on Errors, in a ShardError) when a shard's lease was taken
	// over or could not be renewed in time; that shard's reader stops, the others go on.
	ErrLeaseLost = errors.New("kinesub: lease lost")
	// ErrConsumerBusy is yielded at once by All or Batches while another All or Batches loop
	// runs, or after Messages was called: one consumer pulls at a time, so that the stream is
	// never split silently between two.
	ErrConsumerBusy = errors.New("kinesub: subscription consumed another way: Messages was called, or another All, Batches or Process loop runs")
	// ErrAlreadySettled is returned by a second Ack or Nack of the same Message.
	ErrAlreadySettled = errors.New("kinesub: message already settled")
	// ErrCheckpointRejected is reported (on Errors, in a ShardError) when Kinesis refuses to
	// open a shard at its stored checkpoint: the checkpoint names a sequence number that is not
	// of this stream, typically because the stream was deleted and re-created under the same
	// name while the lease table kept the old checkpoints. The shard shows
	// ShardCheckpointRejected in Shards and its reader retries. To resolve it, Seek the
	// subscription (or the shard) to where the new stream should be read from, subscribe with
	// WithStartAt, or use a new lease table.
	ErrCheckpointRejected = errors.New("kinesub: Kinesis rejected the stored checkpoint (stream re-created? Seek, subscribe WithStartAt, or use a new lease table)")
	// ErrIncompatibleLeaseTable is returned by Subscribe when live subscribers of an earlier
	// kinesub use the lease table for the stream: their lease protocol differs (they renew each
	// shard lease; these bind them to a heartbeat row), so the two cannot share a table. Stop
	// the earlier instances first (a rolling upgrade from them is not possible), or use a new
	// table.
	ErrIncompatibleLeaseTable = errors.New("kinesub: the lease table is in use by subscribers of an earlier lease protocol")
	// ErrSubscriptionEnded is wrapped by Err when the context given to Subscribe ended the
	// subscription; context.Cause of that context is wrapped too.
	ErrSubscriptionEnded = errors.New("kinesub: subscription ended by the context given to Subscribe")
	// ErrFanOutConsumer wraps Subscribe's error when WithEnhancedFanOut's stream consumer could
	// not be found, registered or seen ACTIVE in time; the cause is wrapped too.
	ErrFanOutConsumer = errors.New("kinesub: enhanced fan-out consumer not ready")
	// ErrSeekPending wraps the error of a Seek whose caller's context ended after the seek
	// took effect: the shards named in the error are moved (nothing fetched before the seek
	// is delivered, the watermark is reset) and their readers open the new position on their
	// own. Any other Seek error leaves the shards it names where they were.
	ErrSeekPending = errors.New("kinesub: seek applied, shard still reopening")
	// ErrInvalidRecord is wrapped by the error for a record that Kinesis would refuse: a partition
	// key that is not 1 to 256 UTF-16 code units of valid UTF-8 (as the service counts: an emoji
	// counts twice), an explicit hash key outside 0 to 2^128-1, a header the envelope cannot
	// carry (the error also wraps ErrInvalidHeader), or more than 1 MiB of data, envelope and
	// partition key. Publish and PublishBatch check every record before sending anything.
	ErrInvalidRecord = errors.New("kinesub: invalid record")
	// ErrInvalidHeader is wrapped by the error for a header that the envelope cannot carry: an empty
	// name, a name containing ':' or '\n', a value containing '\n', a name or value beginning or
	// ending with white space (readers trim it), or two names that differ only in case.
	ErrInvalidHeader = envelope.ErrInvalidHeader
)

// ShardError is a failure of one operation, on one shard or (with Shard empty) on the whole
// stream. Everything sent on Errors() is a *ShardError; the shard's reader retries with backoff
// unless the error is fatal.
type ShardError struct {
	Stream string
	Shard  string // empty for the stream's own operations (OpListShards, OpListLeases, OpHeartbeat…)
	Op     Op
	Err    error
}

// Op is an operation a ShardError names: one of the Op constants.
type Op string

// The operations a ShardError names.
const (
	OpListShards       Op = "ListShards"       // listing the stream's shards
	OpGetShardIterator Op = "GetShardIterator" // opening a shard at a position
	OpGetRecords       Op = "GetRecords"       // reading a shard
	OpDecode           Op = "Decode"           // a record that could not be decoded (ErrAggregatedRecord)
	OpListLeases       Op = "ListLeases"       // reading the lease table
	OpAcquire          Op = "Acquire"          // taking a free or expired lease
	OpSteal            Op = "Steal"            // taking a lease over from a live owner, for balance
	OpReadLease        Op = "ReadLease"        // reading a lease just taken
	// Deprecated: no error carries OpRenew: shard leases are bound to the subscriber's
	// heartbeat row, whose renewal is OpHeartbeat. It stays so that code naming it compiles.
	OpRenew            Op = "Renew"
	OpLease            Op = "Lease"            // a lease lost (ErrLeaseLost)
	OpCheckpoint       Op = "Checkpoint"       // writing a checkpoint
	OpRelease          Op = "Release"          // releasing a lease
	OpDeleteLease      Op = "DeleteLease"      // deleting the lease of a finished, trimmed shard
	OpHeartbeat        Op = "Heartbeat"        // renewing this subscriber's heartbeat row
	OpDeleteHeartbeat  Op = "DeleteHeartbeat"  // deleting a heartbeat row (this owner's, or a departed one's)
	OpSeek             Op = "Seek"             // repositioning a shard
	OpSubscribeToShard Op = "SubscribeToShard" // reading a shard over enhanced fan-out
	OpProcess          Op = "Process"          // a record's handler or dead-letter function failed (ProcessError)
)

func (e *ShardError) Error() string {
	if e.Shard == "" {
		return fmt.Sprintf("kinesub: %s %s: %v", e.Op, e.Stream, e.Err)
	}
	return fmt.Sprintf("kinesub: %s %s/%s: %v", e.Op, e.Stream, e.Shard, e.Err)
}

func (e *ShardError) Unwrap() error { return e.Err }

// nilContext is the error of a method that starts or waits for work when given a nil ctx (see
// the package documentation, "Contexts").
func nilContext(method string) error {
	return fmt.Errorf("%w: %s: nil context: pass context.Background()", ErrInvalidOption, method)
}

// optionError builds the error for an option value outside its range.
func optionError(option string, value any, allowed string) error {
	return fmt.Errorf("%w: %s(%v): %s", ErrInvalidOption, option, value, allowed)
}

// ProcessError is the Err of the *ShardError that Process reports on Errors for each failed
// attempt of a record: which record, which attempt, and why.
type ProcessError struct {
	SequenceNumber    string
	SubSequenceNumber int  // within a KPL aggregate; 0 otherwise
	Attempt           int  // 1 for the first attempt
	DeadLetter        bool // the dead-letter function failed, not the handler
	Err               error
}

func (e *ProcessError) Error() string {
	what := "attempt"
	if e.DeadLetter {
		what = "dead letter, attempt"
	}
	if e.SubSequenceNumber != 0 {
		return fmt.Sprintf("record %s (user record %d), %s %d: %v", e.SequenceNumber, e.SubSequenceNumber, what, e.Attempt, e.Err)
	}
	return fmt.Sprintf("record %s, %s %d: %v", e.SequenceNumber, what, e.Attempt, e.Err)
}

func (e *ProcessError) Unwrap() error { return e.Err }

// PanicError is the error of an attempt whose handler (or dead-letter function) panicked: the
// value it panicked with and the goroutine's stack. Process recovers the panic and treats the
// attempt as failed.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("kinesub: handler panicked: %v\n%s", e.Value, e.Stack)
}

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
