package protocol

import "time"

// Instant is one moment as an instance's host sees it: Mono on its monotonic clock (any
// origin; only differences count) and Wall on its wall clock (which may be offset from other
// hosts' by any amount: no decision compares one host's wall time with another's).
type Instant struct {
	Mono time.Duration
	Wall time.Time
}

// Row is one row of the lease table as the store holds it (lease.Lease, without the store's
// types, so that this package imports nothing that does I/O).
type Row struct {
	Key     string
	Owner   string    // empty: free
	Expiry  time.Time // zero: bound to its owner's heartbeat row (or free); far off: pending
	Counter int64     // the fencing token: moved by every write that changes the holder
	// Checkpoint is where the shard was read to, opaque to the protocol but for Finished.
	Checkpoint string
	Finished   bool   // the checkpoint is SHARD_END
	Note       string // the note lease.Store.StealNote writes
}

// Tenure is one holding of a row: its owner and counter (lease.Tenure).
type Tenure struct {
	Owner   string
	Counter int64
}

// OpID names one operation a Machine sent, echoed in its answer.
type OpID uint64

// OpKind is what a store operation does (the lease.Store method it maps to).
type OpKind int

// The store operations.
const (
	OpList       OpKind = iota + 1 // ListPrefix(Key): Key is the prefix
	OpRead                         // Read(Key), strongly consistent
	OpAcquire                      // Acquire(Key, Owner, TTL)
	OpCreate                       // Acquire(Key, Owner, TTL) only where the row is absent (a join)
	OpSteal                        // StealNote(Key, Owner, Counter, TTL, Note)
	OpRelease                      // Release(Key, Tenure{Owner, Counter})
	OpCheckpoint                   // CheckpointOrdered(Key, Tenure{Owner, Counter}, Checkpoint, Order)
	OpDelete                       // Delete(Key, Counter)
)

// Op is one store operation to send.
type Op struct {
	ID         OpID
	Kind       OpKind
	Key        string
	Owner      string
	Counter    int64
	TTL        time.Duration
	Note       string
	Checkpoint string
	Finished   bool
	Order      int64
}

// Outcome is how a store operation ended, as its sender learnt it.
type Outcome int

// The outcomes.
const (
	// Applied: a write's condition held and it was applied; a read or list answered.
	Applied Outcome = iota + 1
	// Refused: a write's condition did not hold (the store answered false); nothing changed.
	Refused
	// Unknown: no answer (an error, a timeout): a write may have been applied, now or later.
	Unknown
)

// Shard is one shard as the stream's listing shows it.
type Shard struct {
	ID      string
	Parents []string // ParentShardId and AdjacentParentShardId, when set
	Closed  bool     // it has an ending sequence number: it will end
}

// Input is one thing that happened to a Machine.
type Input interface{ input() }

// Tick: time passed; the Machine looks at its deadlines and timers.
type Tick struct{}

// Answered: the answer to an Op sent earlier. Rows holds a List's rows, or a Read's one row
// (a zero Row but for Key when the row is absent).
type Answered struct {
	ID      OpID
	Outcome Outcome
	Rows    []Row
}

// ShardsListed: the stream's shards, from Kinesis.
type ShardsListed struct{ Shards []Shard }

// Join: start (Subscribe). Incarnation is drawn by the interpreter (the one source of
// randomness), so that the owner name is new at every join.
type Join struct{ Incarnation uint64 }

// Close: stop cleanly, releasing every lease with its checkpoint.
type Close struct{}

// HandBack: give one shard back cleanly (balance decided it, or the user).
type HandBack struct{ Shard string }

// Checkpointed: the shard's reader wants its checkpoint written (the watermark moved).
type Checkpointed struct {
	Shard      string
	Checkpoint string
	Finished   bool
}

// ReaderStopped: the shard's reader stopped: after StopReading, or by itself (Finished: it
// read to SHARD_END and its last checkpoint was written). It hands nothing more out, and no
// record for which MayHandOut answered is still on its way to the consumer: the lease may be
// released next, and its taker reads at once.
type ReaderStopped struct {
	Shard    string
	Finished bool
}

func (Tick) input()          {}
func (Answered) input()      {}
func (ShardsListed) input()  {}
func (Join) input()          {}
func (Close) input()         {}
func (HandBack) input()      {}
func (Checkpointed) input()  {}
func (ReaderStopped) input() {}

// Output is one thing a Machine asks its interpreter to do.
type Output interface{ output() }

// Send: perform the operation and answer with Answered{ID: Op.ID}.
type Send struct{ Op Op }

// StartReading: read the shard under the holding, from its checkpoint.
type StartReading struct {
	Shard      string
	Tenure     Tenure
	Checkpoint string
}

// StopReading: stop the shard's reader; hand nothing more out under Tenure. Clean: finish
// what was handed out and write the checkpoint first (a hand-back, Close), else drop it (lost).
type StopReading struct {
	Shard  string
	Tenure Tenure
	Clean  bool
	Why    string
}

// Arm: step the Machine with a Tick at (or after) this monotonic instant.
type Arm struct{ At time.Duration }

// Closed: Close is done; the Machine takes no more inputs.
type Closed struct{}

// Rejoin: the heartbeat row was found taken over (this instance was taken for dead): every
// shard was lost; step a Join with a new Incarnation, so that the owner name is new.
type Rejoin struct{}

// Failed: the Machine stopped for good (a join that could not be made): the subscription
// ends with this error. The Machine takes no more inputs.
type Failed struct{ Why string }

func (Send) output()         {}
func (Rejoin) output()       {}
func (Failed) output()       {}
func (StartReading) output() {}
func (StopReading) output()  {}
func (Arm) output()          {}
func (Closed) output()       {}
