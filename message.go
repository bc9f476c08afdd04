package kinesub

import (
	"context"
	"sync/atomic"
	"time"
)

// Message is one Kinesis record delivered by a Subscriber. Its accessors return what the
// record carried; Ack or Nack settles it. A Message is safe for use from any goroutine; its
// Data and Headers must not be modified.
type Message struct {
	data         []byte
	headers      map[string]string // nil when the record carried none
	partitionKey string
	sequence     string
	arrival      *time.Time // the record's own, as the client decoded it; nil when it had none
	shard        *worker
	gen          uint64 // the shard's generation when the record was fetched
	index        uint64 // position in the shard's watermark
	handed       int64  // when it was handed to the consumer, in Unix ns; atomic, 0 until then (metrics)
	sub          int32  // position within a KPL aggregate
	settled      uint32 // set once, atomically, by Ack or Nack (a plain word so pages of Messages can be built by value)
}

// Data returns the record's payload, without the header envelope.
func (m *Message) Data() []byte { return m.data }

// Headers returns the user headers the record carried in its envelope, names lowercased (as the
// Rust crate reads them); never nil.
func (m *Message) Headers() map[string]string {
	if m.headers == nil {
		return map[string]string{}
	}
	return m.headers
}

// PartitionKey returns the record's partition key.
func (m *Message) PartitionKey() string { return m.partitionKey }

// SequenceNumber returns the record's sequence number, unique within its shard.
func (m *Message) SequenceNumber() string { return m.sequence }

// SubSequenceNumber returns the position of the record within the KPL-aggregated record it
// arrived in (whose SequenceNumber it shares), and 0 for a record that was not aggregated.
func (m *Message) SubSequenceNumber() int { return int(m.sub) }

// ShardID returns the id of the shard the record was read from.
func (m *Message) ShardID() string {
	if m.shard == nil {
		return ""
	}
	return m.shard.id
}

// ArrivalTime returns when the service accepted the record.
func (m *Message) ArrivalTime() time.Time {
	if m.arrival == nil {
		return time.Time{}
	}
	return *m.arrival
}

// Position returns the shard-scoped position of this record: seeking there delivers it again,
// and the records after it. For a user record of a KPL aggregate that is AtSubSequence: the
// aggregate's earlier user records are not delivered again.
func (m *Message) Position() Position { return AtSubSequence(m.ShardID(), m.sequence, int(m.sub)) }

// Ack marks the message handled. The shard's checkpoint may then advance over it: the
// watermark moves over the contiguous handled prefix, and the shard's flusher writes it to the
// lease store within the checkpoint interval (at once with WithCheckpointInterval(0), in which
// case Ack returns after the write, and returns the write's error; the ack itself counts
// either way, and a later flush writes it). Ack after the shard was sought or its lease lost
// is a no-op. A second Ack or Nack returns ErrAlreadySettled; Ack or Nack once Close has
// returned returns ErrClosed (what was not settled by then is delivered again, by this
// subscriber or the shard's next owner).
func (m *Message) Ack(ctx context.Context) error { return m.settle(ctx, false, false) }

// Nack gives the message back. With requeue false the message is skipped: treated as handled.
// With requeue true it stays unhandled: the shard's checkpoint cannot pass it, so it and every
// later record of its shard are delivered again when the shard's lease is next taken (after a
// restart or a handoff). Reading goes on meanwhile, up to the in-flight cap.
func (m *Message) Nack(ctx context.Context, requeue bool) error { return m.settle(ctx, true, requeue) }

func (m *Message) settle(ctx context.Context, nack, requeue bool) error {
	if m.shard != nil && m.shard.closed() {
		return ErrClosed
	}
	if !atomic.CompareAndSwapUint32(&m.settled, 0, 1) {
		return ErrAlreadySettled
	}
	if m.shard == nil {
		return nil
	}
	m.shard.stats.settled(ctx, m, nack, requeue)
	return m.shard.settle(ctx, m, !requeue)
}
