package kinesub

import "sort"

// ShardState is what a subscriber knows about one shard of its stream.
type ShardState string

// Shard states, as Shards reports them.
const (
	// ShardReading: this subscriber holds the lease and reads the shard.
	ShardReading ShardState = "reading"
	// ShardStarting: this subscriber took the lease over from a live owner and waits until
	// that owner has surely stopped reading before it reads (see WithLeaseTTL).
	ShardStarting ShardState = "starting"
	// ShardHandingBack: this subscriber holds more than its share and is handing the lease
	// back: it no longer reads, lets what it delivered settle, checkpoints and releases.
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
	// Failing is the record of this shard that Process has been retrying longest, if any.
	Failing *FailingRecord `json:"failing,omitempty"`
}

// Shards reports the state of every shard of the stream as of this subscriber's last rounds
// (shard listing and lease table), sorted by shard id. It does no I/O and is safe to call from
// any goroutine, for example a status endpoint.
func (s *Subscriber) Shards() []ShardStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ShardStatus, 0, len(s.shards))
	for id, info := range s.shards {
		st := ShardStatus{ShardID: id, Parents: info.parents}
		l := s.leases[id]
		if l.Held(s.leasesAt) { // the table is read when it changed, not on every round
			st.Owner = l.Owner
		}
		switch w := s.workers[id]; {
		case w != nil && !w.lost.Load():
			w.describe(&st)
			st.Owner = s.cfg.owner
		case s.finished[id]:
			st.State = ShardFinished
		case s.waiting[id] != "":
			st.State, st.WaitingFor = ShardWaitingForParent, s.waiting[id]
		case st.Owner != "":
			st.State = ShardLeasedElsewhere
		default:
			st.State = ShardUnclaimed
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ShardID < out[j].ShardID })
	return out
}
