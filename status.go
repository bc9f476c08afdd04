package kinesub

import (
	"time"

	"github.com/gostream/kinesub/lease"
)

// ShardState is what a subscriber knows about one shard of its stream.
type ShardState string

// Shard states, as Shards reports them.
const (
	// ShardReading: this subscriber holds the lease and reads the shard.
	ShardReading ShardState = "reading"
	// ShardStarting: this subscriber took the lease over from a live owner and waits until
	// that owner has surely stopped reading before it reads (see WithLeaseTTL).
	ShardStarting ShardState = "starting"
	// ShardHandingBack: this subscriber is giving the lease up (it holds more than its share,
	// or it is closing): it no longer reads, lets what it delivered settle, checkpoints and
	// releases.
	ShardHandingBack ShardState = "handing-back"
	// ShardCheckpointRejected: this subscriber holds the lease but Kinesis refuses to open the
	// shard at its stored checkpoint, typically because the stream was deleted and re-created
	// under the same name while the lease table kept the old stream's checkpoints. The reader
	// retries; a Seek, WithStartAt, or a new lease table resolves it (ErrCheckpointRejected).
	ShardCheckpointRejected ShardState = "checkpoint-rejected"
	// ShardLeasedElsewhere: another live owner holds the lease.
	ShardLeasedElsewhere ShardState = "leased-elsewhere"
	// ShardWaitingForParent: a parent shard has not been read to its end yet.
	ShardWaitingForParent ShardState = "waiting-for-parent"
	// ShardFinished: the shard was read to its end (SHARD_END) and its children may start.
	ShardFinished ShardState = "finished"
	// ShardUnclaimed: nobody holds the lease; a subscriber takes it on its next round.
	ShardUnclaimed ShardState = "unclaimed"
)

// ShardStatus is one shard as this subscriber sees it: what an operator needs when a shard
// "is not being processed".
type ShardStatus struct {
	ShardID    string     `json:"shard_id"`
	State      ShardState `json:"state"`
	Parents    []string   `json:"parents,omitempty"`
	WaitingFor string     `json:"waiting_for,omitempty"` // the parent it waits for
	Owner      string     `json:"owner,omitempty"`       // the lease holder, when held
	// The fields below are set while this subscriber reads the shard.
	LastDelivered  string `json:"last_delivered,omitempty"`  // newest sequence number fetched
	LastCheckpoint string `json:"last_checkpoint,omitempty"` // newest checkpoint written
	// LastCheckpointSubSequence is the checkpoint's position within a KPL aggregate: the user
	// records of that aggregate up to this one are handled (0 for plain records).
	LastCheckpointSubSequence int   `json:"last_checkpoint_subsequence,omitempty"`
	InFlight                  int   `json:"in_flight"`                   // delivered, not yet acked
	InFlightBytes             int   `json:"in_flight_bytes"`             // data held toward WithMaxInFlightBytes
	WaitingForAcks            bool  `json:"waiting_for_acks"`            // at a cap: reading waits for acks
	MillisBehindLatest        int64 `json:"millis_behind_latest"`        // from the last GetRecords
	Throttled                 bool  `json:"throttled"`                   // the last read was throttled
	Checkpoints               int64 `json:"checkpoint_writes,omitempty"` // writes made by this reader
	// Quiet: the shard has had no records at its tip for a while, and is polled every
	// WithIdlePollInterval until one comes.
	Quiet bool `json:"quiet,omitempty"`
	// OldestUnsettled is the sequence number of the oldest delivery not yet acked, the one
	// that holds the checkpoint back, and OldestUnsettledMillis how long ago it was fetched;
	// empty and 0 when everything fetched is settled. WithMaxInFlight counts from it, so a
	// record whose Ack was lost stops the shard once WithMaxInFlight deliveries were fetched
	// after it: with WaitingForAcks, this is the record to look for.
	OldestUnsettled       string `json:"oldest_unsettled,omitempty"`
	OldestUnsettledMillis int64  `json:"oldest_unsettled_millis,omitempty"`
	// Failing is the record of this shard that Process has been retrying longest, if any.
	Failing *FailingRecord `json:"failing,omitempty"`
}

// Shards reports the state of every shard of the stream as of this subscriber's last rounds
// (shard listing and lease table), sorted by shard id. It does no I/O and is safe to call from
// any goroutine, for example a status endpoint.
func (s *Subscriber) Shards() []ShardStatus { return s.table.status(s.tenure.owner()) }

// describe fills in what this shard's reader knows for Shards: its state and progress. It
// takes only the shard's own lock, so a status read never waits on the subscriber.
func (w *worker) describe(st *ShardStatus) {
	switch w.state() {
	case stateStarting:
		st.State = ShardStarting
	case stateDraining:
		st.State = ShardHandingBack
	default:
		st.State = ShardReading
		if w.rejected.Load() {
			st.State = ShardCheckpointRejected
		}
	}
	w.mu.Lock()
	st.LastDelivered = w.lastSeq
	st.InFlight = w.wm.inFlight()
	st.InFlightBytes = w.wm.bytes
	if seq, at, ok := w.wm.oldest(); ok {
		st.OldestUnsettled = seq
		st.OldestUnsettledMillis = time.Since(time.Unix(0, at)).Milliseconds()
	}
	w.mu.Unlock()
	if p := w.shown.Load(); p != nil {
		st.LastCheckpoint = p.Sequence
		if p.Sequence != lease.ShardEnd { // SHARD_END's says where the children open (start.go)
			st.LastCheckpointSubSequence = int(p.SubSequence)
		}
	}
	st.MillisBehindLatest = w.millisBehind.Load()
	st.Throttled = w.throttled.Load()
	st.Quiet = w.quiet.Load()
	st.WaitingForAcks = w.waitingRoom.Load()
	st.Checkpoints = w.checkpoints.Load()
	st.Failing = w.processStatus()
}
