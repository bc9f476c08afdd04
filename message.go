package kinesub

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// Message is one Kinesis record delivered by a Subscriber. Its accessors return what the
// record carried; Ack or Nack settles it. A Message is safe for use from any goroutine; its
// Data and Headers must not be modified.
//
// A Message refers to the page it was fetched in rather than copying the record: building a
// page writes a page pointer and two offsets per plain record, and a reader of a busy shard
// builds tens of thousands a second.
type Message struct {
	pg      *shardPage // the page: shard, generation, the records as the client decoded them
	ext     *unpacked  // what differs from the raw record (an envelope, a KPL user record); nil for a plain record
	handed  int64      // when it was handed to the consumer, in Unix ns; atomic, 0 until then (metrics)
	rec     uint32     // its record: pg.records[rec]
	off     uint32     // its delivery's offset in the page: its watermark index is pg.first+off
	settled uint32     // set once, atomically, by Ack or Nack (a plain word so pages of Messages can be built by value)
}

// shardPage is one page of a shard as its reader hands it to the consumer: consecutive
// deliveries of one shard, fetched in one generation.
type shardPage struct {
	shard   *worker
	gen     uint64         // the shard's generation when the page was fetched
	first   uint64         // the watermark index of msgs[0]
	records []types.Record // as the client decoded them
	msgs    []Message
}

// unpacked is what a delivery carries that its raw record does not hold as it is: the payload
// and headers inside an envelope, or a user record of a KPL aggregate.
type unpacked struct {
	data         []byte
	headers      map[string]string // nil when the record carried none
	partitionKey string
	sub          int32 // position within a KPL aggregate
}

// record returns the Kinesis record m was read from, or nil for a zero Message.
func (m *Message) record() *types.Record {
	if m.pg == nil {
		return nil
	}
	return &m.pg.records[m.rec]
}

// shard returns the shard m was read from, or nil for a zero Message.
func (m *Message) shard() *worker {
	if m.pg == nil {
		return nil
	}
	return m.pg.shard
}

// index returns m's position in its shard's watermark.
func (m *Message) index() uint64 { return m.pg.first + uint64(m.off) }

// Data returns the record's payload, without the header envelope.
func (m *Message) Data() []byte {
	if m.ext != nil {
		return m.ext.data
	}
	if rec := m.record(); rec != nil {
		return rec.Data
	}
	return nil
}

// Headers returns the user headers the record carried in its envelope, names lowercased (as the
// Rust crate reads them); never nil.
func (m *Message) Headers() map[string]string {
	if m.ext == nil || m.ext.headers == nil {
		return map[string]string{}
	}
	return m.ext.headers
}

// PartitionKey returns the record's partition key.
func (m *Message) PartitionKey() string {
	if m.ext != nil {
		return m.ext.partitionKey
	}
	if rec := m.record(); rec != nil {
		return aws.ToString(rec.PartitionKey)
	}
	return ""
}

// SequenceNumber returns the record's sequence number, unique within its shard.
func (m *Message) SequenceNumber() string {
	if rec := m.record(); rec != nil {
		return aws.ToString(rec.SequenceNumber)
	}
	return ""
}

// SubSequenceNumber returns the position of the record within the KPL-aggregated record it
// arrived in (whose SequenceNumber it shares), and 0 for a record that was not aggregated.
func (m *Message) SubSequenceNumber() int {
	if m.ext == nil {
		return 0
	}
	return int(m.ext.sub)
}

// ShardID returns the id of the shard the record was read from.
func (m *Message) ShardID() string {
	if w := m.shard(); w != nil {
		return w.id
	}
	return ""
}

// ArrivalTime returns when the service accepted the record.
func (m *Message) ArrivalTime() time.Time {
	if rec := m.record(); rec != nil && rec.ApproximateArrivalTimestamp != nil {
		return *rec.ApproximateArrivalTimestamp
	}
	return time.Time{}
}

// Position returns the shard-scoped position of this record: seeking there delivers it again,
// and the records after it. For a user record of a KPL aggregate that is AtSubSequence: the
// aggregate's earlier user records are not delivered again.
func (m *Message) Position() Position {
	return AtSubSequence(m.ShardID(), m.SequenceNumber(), m.SubSequenceNumber())
}

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
// With requeue true it stays unhandled and is not delivered again by this subscriber: the
// shard's checkpoint cannot pass it until the lease moves (a restart or a handoff), when it and
// every later record of its shard are delivered again. Reading goes on meanwhile, up to
// WithMaxInFlight, which then stops the shard. To retry a record, use Process, which retries it
// in process, in order with its key.
func (m *Message) Nack(ctx context.Context, requeue bool) error { return m.settle(ctx, true, requeue) }

func (m *Message) settle(ctx context.Context, nack, requeue bool) error {
	w := m.shard()
	if w != nil && w.closed() {
		return ErrClosed
	}
	if !atomic.CompareAndSwapUint32(&m.settled, 0, 1) {
		return ErrAlreadySettled
	}
	if w == nil {
		return nil
	}
	w.stats.settled(ctx, m, nack, requeue)
	return w.settle(ctx, m, !requeue)
}
