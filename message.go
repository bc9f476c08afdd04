package kinesub

import (
	"context"
	"math"
	"sync/atomic"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel/trace"

	"github.com/gostream/kinesub/lease"
)

// Message is one Kinesis record delivered by a Subscriber: its payload (Data), the headers
// of its envelope (Headers), its partition key, sequence number, shard and arrival time, and
// the position and lease holding (Tenure) it was read under. Ack marks it handled, so that its
// shard's checkpoint may pass it; Nack gives it back unhandled. A Message is safe for use from
// any goroutine; its Data and Headers must not be modified.
type Message struct {
	// Layout (internal):
	// A Message holds its own record's fields (their bytes in blocks of a few KiB that the
	// decoder shares between neighbouring records), and shares with its page only a small header:
	// a Message kept alive keeps its record, a block or two and the chunk of Messages it was
	// built in (msgChunk of them), never its page.
	//
	// A Message is not written once built: whether it was settled is a bit of its page's
	// (shardPage.settled). A record is fetched by the shard's reader and settled by the consumer,
	// often on another core, and with Process read by the goroutine that queues it and settled by
	// a worker: a write to the Message would take its cache line from every core that read it, for
	// each record, where a page's bits are written by one consumer at a time (under the shard's
	// lock when in runs), a cache line for 512 records.
	//
	// It is 64 bytes, a cache line: a reader builds one per record, tens of thousands a second,
	// and the memory written, collected and read back per record is most of what delivery costs.
	// So its payload, key and sequence number are kept as a pointer and a length each (the
	// strings' and slice's other words are not needed), and what only some records carry (an
	// envelope's headers, a position within a KPL aggregate, an outsized key or sequence number)
	// is kept apart, in x.
	pg      *shardPage // shard, generation, watermark base: shared by the page's Messages
	data    *byte      // the payload (without the header envelope): dlen bytes; nil when empty
	key     *byte      // the partition key (a KPL user record's own): klen bytes; nil when empty
	seq     *byte      // the sequence number (a KPL user record's aggregate's): slen bytes
	x       *msgExtra  // what few records carry; nil for most
	dlen    uint32
	off     uint32 // its delivery's offset in the page: its watermark index is pg.first+off
	klen    uint16
	slen    uint8
	flags   uint8  // msgEmptyData
	zero    uint32 // whether a Message with no page (the zero Message) was settled
	arrival int64  // ApproximateArrivalTimestamp, in Unix ns; 0 when absent
}

// msgEmptyData: the payload is empty but not nil (Data returns an empty slice, as the record had).
const msgEmptyData = 1

// msgExtra is what only some records carry.
type msgExtra struct {
	headers map[string]string // the envelope's headers; nil when the record carried none
	key     string            // a partition key too long for Message.klen
	seq     string            // a sequence number too long for Message.slen
	sub     int32             // the position within a KPL aggregate
	span    trace.Span        // its receive span, when its subscription traces (tracing.go)
}

// shardPage is what the deliveries of one page share: their shard, the generation they were
// fetched in and where they start in the shard's watermark. It refers to no record.
type shardPage struct {
	shard *worker
	gen   uint64 // the shard's generation when the page was fetched
	first uint64 // the watermark index the page's offsets count from
	lead  uint32 // the offset of the page's first delivery (metrics)
	// settled has a bit per offset, set once, atomically, when its delivery is settled (Ack,
	// Nack, or given back: see Message).
	settled []uint32
	// handed holds when the sampled deliveries were handed to the consumer, in Unix ns
	// (metrics: see handedAt); nil when the shard is not metered.
	handed []int64
	// proc is set while Process holds the page's deliveries (process_seam.go): a Nack of one of
	// them from its handler fails the attempt rather than settling the record.
	proc atomic.Pointer[procMarks]
}

// msgChunk is how many Messages are built in one allocation: a Message kept alive keeps its
// chunk, 4 KiB, rather than every Message of its page. 63 Messages and the allocator's
// 8-byte header of an object with pointers fill a 4 KiB size class.
const msgChunk = 63

// fetched is one page's deliveries as a reader hands them to the consumer (handoff.go): in
// chunks of msgChunk, every chunk but the last full.
type fetched struct {
	pg     *shardPage
	chunks [][]Message
	n      int
}

// newFetched returns the deliveries of page pg, with room made for n of them.
func newFetched(pg *shardPage, n int) *fetched {
	f := &fetched{pg: pg, chunks: make([][]Message, 0, (n+msgChunk-1)/msgChunk)}
	for n > 0 {
		c := min(n, msgChunk)
		f.chunks = append(f.chunks, make([]Message, c))
		n -= c
	}
	return f
}

// add returns a new Message at the end of the page: in the room made for it, or (a page whose
// KPL aggregates hold more user records than it has records) in room made now.
func (f *fetched) add() *Message {
	i, k := f.n/msgChunk, f.n%msgChunk
	switch {
	case i < len(f.chunks) && k < len(f.chunks[i]):
	case k == 0:
		f.chunks = append(f.chunks, make([]Message, 1, msgChunk))
	default:
		f.chunks[i] = append(f.chunks[i], Message{})
	}
	f.n++
	m := &f.chunks[i][k]
	m.pg = f.pg
	return m
}

// seal makes the page's room for what is settled and, when metered, sampled, once its
// deliveries are added: they span offsets 0 to offsets-1.
func (f *fetched) seal(offsets int, metered bool) {
	f.pg.settled = make([]uint32, offsets/32+1)
	if metered {
		f.pg.handed = make([]int64, offsets/settleSample+1)
	}
}

// markSettled sets m's settled bit and reports whether it was clear.
func (m *Message) markSettled() bool {
	if m.pg == nil {
		return atomic.CompareAndSwapUint32(&m.zero, 0, 1)
	}
	bit := uint32(1) << (m.off % 32)
	return atomic.OrUint32(&m.pg.settled[m.off/32], bit)&bit == 0
}

// isSettled reports whether m was settled.
func (m *Message) isSettled() bool {
	if m.pg == nil {
		return atomic.LoadUint32(&m.zero) != 0
	}
	return atomic.LoadUint32(&m.pg.settled[m.off/32])&(1<<(m.off%32)) != 0
}

// at returns the page's i-th Message.
func (f *fetched) at(i int) *Message { return &f.chunks[i/msgChunk][i%msgChunk] }

// setData sets the payload.
func (m *Message) setData(b []byte) {
	m.data, m.dlen, m.flags = nil, 0, m.flags&^msgEmptyData
	switch {
	case len(b) > 0:
		m.data, m.dlen = unsafe.SliceData(b), uint32(len(b))
	case b != nil:
		m.flags |= msgEmptyData
	}
}

// setKey sets the partition key.
func (m *Message) setKey(s string) {
	if len(s) > math.MaxUint16 {
		m.extra().key, m.key, m.klen = s, nil, 0
		return
	}
	m.key, m.klen = nil, uint16(len(s))
	if len(s) > 0 {
		m.key = unsafe.StringData(s)
	}
}

// setSeq sets the sequence number.
func (m *Message) setSeq(s string) {
	if len(s) > math.MaxUint8 {
		m.extra().seq, m.seq, m.slen = s, nil, 0
		return
	}
	m.seq, m.slen = nil, uint8(len(s))
	if len(s) > 0 {
		m.seq = unsafe.StringData(s)
	}
}

// extra returns m's extra fields, made on first use.
func (m *Message) extra() *msgExtra {
	if m.x == nil {
		m.x = new(msgExtra)
	}
	return m.x
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
	if m.data == nil {
		if m.flags&msgEmptyData != 0 {
			return []byte{}
		}
		return nil
	}
	return unsafe.Slice(m.data, m.dlen)
}

// Headers returns the user headers the record carried in its envelope, names lowercased (as the
// Rust crate reads them), or nil when it carried none (a nil map reads as empty: h["x"] is "",
// len(h) is 0). The map must not be modified.
func (m *Message) Headers() map[string]string {
	if m.x == nil {
		return nil
	}
	return m.x.headers
}

// PartitionKey returns the record's partition key.
func (m *Message) PartitionKey() string {
	if m.key == nil && m.x != nil {
		return m.x.key
	}
	return unsafe.String(m.key, m.klen)
}

// SequenceNumber returns the record's sequence number, unique within its shard.
func (m *Message) SequenceNumber() string {
	if m.seq == nil && m.x != nil {
		return m.x.seq
	}
	return unsafe.String(m.seq, m.slen)
}

// SubSequenceNumber returns the position of the record within the KPL-aggregated record it
// arrived in (whose SequenceNumber it shares), and 0 for a record that was not aggregated.
func (m *Message) SubSequenceNumber() int {
	if m.x == nil {
		return 0
	}
	return int(m.x.sub)
}

// ShardID returns the id of the shard the record was read from.
func (m *Message) ShardID() string {
	if w := m.shard(); w != nil {
		return w.id
	}
	return ""
}

// Tenure returns the fencing token of the record's delivery: the lease holding under which
// this subscriber read it (its owner name and the lease's counter). Every change of a shard's
// holder adds one to the counter of the shard's lease, so a later holder always carries a
// higher counter than an earlier one. A sink that remembers, per shard, the highest counter it
// has seen and refuses writes that carry a lower one refuses a holder that has been superseded,
// even one whose process was paused past the end of its lease and resumed (docs/leases.md,
// "Fencing a sink"). The zero Message returns the zero Tenure.
func (m *Message) Tenure() lease.Tenure {
	if w := m.shard(); w != nil {
		return w.tenureOf()
	}
	return lease.Tenure{}
}

// ArrivalTime returns when the service accepted the record.
func (m *Message) ArrivalTime() time.Time {
	if m.arrival == 0 {
		return time.Time{}
	}
	return time.Unix(0, m.arrival).UTC()
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
// or given up moves no checkpoint: it returns an error matching ErrAckedLate (and
// ErrLeaseLost when the lease was lost), since the record will be delivered again, and is
// counted by the metric kinesub.records.acked_late. A second Ack or Nack returns
// ErrAlreadySettled; Ack or Nack once Close has returned returns ErrClosed (what was not settled by then is delivered again, by this
// subscriber or the shard's next owner). A nil ctx is context.Background(): Ack never refuses.
func (m *Message) Ack(ctx context.Context) error { return m.settle(ctx, false) }

// Nack gives the message back unhandled: the shard's checkpoint cannot pass it, so it and
// every later record of its shard are delivered again when the shard's lease is next taken
// (after a restart or a handoff), and not before: Nack does not retry. Until then it holds
// the shard's checkpoint where it is, and, since WithMaxInFlight counts from the oldest
// unsettled record, the shard stops reading once that many more were fetched (Shards shows
// it as OldestUnsettled). To retry a record in process, with backoff and a dead-letter
// function, consume with Process; to skip a record, Ack it. Nack in a Process handler settles
// nothing: it fails the handler's attempt, as returning an error does, and Process retries the
// record under its usual rules. A nil ctx is context.Background(), as for Ack.
func (m *Message) Nack(ctx context.Context) error { return m.settle(ctx, true) }

func (m *Message) settle(ctx context.Context, nack bool) error {
	err := m.settleOnce(ctx, nack)
	if tracingBuilt && m.x != nil {
		m.endReceive(nack, err)
	}
	return err
}

func (m *Message) settleOnce(ctx context.Context, nack bool) error {
	if ctx == nil {
		ctx = context.Background()
	}
	w := m.shard()
	if w != nil && w.closed() {
		return ErrClosed
	}
	if nack && m.nackInProcess() {
		return nil // Process retries it: the handler's attempt failed
	}
	if !m.markSettled() {
		return ErrAlreadySettled
	}
	if w == nil {
		return nil
	}
	w.stats.settled(ctx, m, nack)
	return w.settle(ctx, m, !nack)
}
