package publish

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/gostream/kinesub/internal/kpl"
)

// How PublishBatch queues its records: per partition key, in order (pubKeyQueue); the keys whose
// next record may be sent, per predicted shard (shardQueue); and the next group of records for
// each shard, booked in the shard's pacer (group). A key is busy from the moment its first
// records join a group until the call that carried them is answered, so that a key never has
// two sends outstanding and its records are stored in order.

type recState uint8

const (
	recWaiting recState = iota // in its key's queue, to be sent
	recBusy                    // in a group or in a call not yet answered
	recWritten
	recFailed
)

// Record is one record of a PublishBatch call, checked and encoded.
type Record struct {
	key, ehk  string
	data      []byte // with its header envelope
	hash      kpl.HashKey
	size      int // data plus partition key, as the limits count it
	state     recState
	firstSent time.Time // zero until first sent: the time budget counts from here
	refusals  int       // refusals other than throttling
	uncertain bool      // a call that carried it lost its answer: it may be stored already
}

// NewRecord is a record of a PublishBatch call, its data checked and encoded by Prepare.
func NewRecord(partitionKey, explicitHashKey string, data []byte, hash kpl.HashKey) Record {
	return Record{key: partitionKey, ehk: explicitHashKey, data: data, hash: hash, size: len(data) + len(partitionKey)}
}

// Written reports whether the service stored r.
func (r *Record) Written() bool { return r.state == recWritten }

// pubKeyQueue is one partition key's records not yet written or failed, in order.
type pubKeyQueue struct {
	recs []int
	busy bool
	in   *shardQueue // the queue that lists it as ready; nil while busy or empty
}

// keyDeque lists ready keys: refused keys go back to the front, keys with more records after a
// write to the back. Entries are dropped lazily: a key listed in a queue that no longer holds it
// (it moved, became busy or emptied) is skipped.
type keyDeque struct {
	front []*pubKeyQueue // a stack: its last entry comes first
	back  []*pubKeyQueue
	head  int // back[head:] are the entries left
}

func (d *keyDeque) pushFront(k *pubKeyQueue) { d.front = append(d.front, k) }
func (d *keyDeque) pushBack(k *pubKeyQueue)  { d.back = append(d.back, k) }

// first returns the first key still ready in sq, dropping the entries before it.
func (d *keyDeque) first(sq *shardQueue) *pubKeyQueue {
	for {
		var k *pubKeyQueue
		switch {
		case len(d.front) > 0:
			k = d.front[len(d.front)-1]
		case d.head < len(d.back):
			k = d.back[d.head]
		default:
			d.back, d.head = d.back[:0], 0
			return nil
		}
		if k.in == sq && !k.busy && len(k.recs) > 0 {
			return k
		}
		d.drop()
	}
}

// drop removes the first entry.
func (d *keyDeque) drop() {
	if len(d.front) > 0 {
		d.front[len(d.front)-1] = nil
		d.front = d.front[:len(d.front)-1]
		return
	}
	d.back[d.head] = nil
	d.head++
}

// shardQueue is a batch's queue for one predicted shard ("" for records of no known shard).
type shardQueue struct {
	id    string
	pacer *shardPacer
	ready keyDeque
	next  *group // booked in the pacer, not sent yet
}

// group is the records a shard sends next, booked in its pacer as one reservation.
type group struct {
	units []unit
	res   reservation
}

// due reports whether g may be sent now: its booking has come and its shard is not paused.
func (g *group) due(sq *shardQueue, now time.Time) bool {
	return !g.res.at.After(now) && !sq.pacer.resumeAt().After(now)
}

// dueAt is when g may be sent.
func (g *group) dueAt(sq *shardQueue) time.Time {
	at := g.res.at
	if r := sq.pacer.resumeAt(); r.After(at) {
		at = r
	}
	return at
}

// unit is one entry of a PutRecords call: one record, or an aggregate of several.
type unit struct {
	entry types.PutRecordsRequestEntry
	runs  []keyRun
	sq    *shardQueue
	size  int       // data plus partition key
	sent  time.Time // when the call carrying it was made
	// aggregated: an aggregate of runs' records, whose Data is encoded when the call is made
	aggregated bool
}

// keyRun is the first n records of a key, carried by a unit.
type keyRun struct {
	k *pubKeyQueue
	n int
}

// Bounds of one group: a second's worth of a shard's byte limit, so that its booking fits the
// pacer's bucket, and the records of one call.
const groupBytes = ShardBytesPerSecond

// build books the next group of sq's ready records, or returns nil when it has none.
func (b *batch) build(sq *shardQueue, now time.Time) *group {
	g := &group{}
	size := 0
	for len(g.units) < MaxBatchRecords {
		var u unit
		var ok bool
		if b.cfg.Aggregate {
			u, ok = b.aggregateUnit(sq, groupBytes-size, size == 0, now)
		} else {
			u, ok = b.plainUnit(sq, groupBytes-size, now)
		}
		if !ok {
			break
		}
		g.units = append(g.units, u)
		size += u.size
	}
	if len(g.units) == 0 {
		return nil
	}
	g.res = sq.pacer.reserve(now, len(g.units), size)
	return g
}

// nextKey returns sq's first ready key, failing on the way keys whose first record ran out of
// time since it was first sent.
func (b *batch) nextKey(sq *shardQueue, now time.Time) *pubKeyQueue {
	for {
		k := sq.ready.first(sq)
		if k == nil {
			return nil
		}
		if head := &b.recs[k.recs[0]]; head.firstSent.IsZero() || now.Before(head.firstSent.Add(b.cfg.Timeout)) {
			return k
		}
		sq.ready.drop()
		b.failKey(k, b.timeoutReason())
	}
}

// take marks the first n records of k busy in a unit for sq.
func (b *batch) take(sq *shardQueue, k *pubKeyQueue, n int) keyRun {
	sq.ready.drop()
	k.busy, k.in = true, nil
	for _, i := range k.recs[:n] {
		b.recs[i].state = recBusy
	}
	return keyRun{k, n}
}

// plainUnit takes the next ready record of sq as a unit of its own, if it fits in room.
func (b *batch) plainUnit(sq *shardQueue, room int, now time.Time) (unit, bool) {
	k := b.nextKey(sq, now)
	if k == nil {
		return unit{}, false
	}
	r := &b.recs[k.recs[0]]
	if r.size > room {
		return unit{}, false
	}
	return unit{entry: r.entry(), runs: b.oneRun(b.take(sq, k, 1)), sq: sq, size: r.size}, true
}

// oneRun returns a slice of run, from a backing array shared by the batch's units: a unit of
// one record then costs no allocation of its own.
func (b *batch) oneRun(run keyRun) []keyRun {
	if len(b.runs) == cap(b.runs) {
		b.runs = make([]keyRun, 0, 256)
	}
	b.runs = append(b.runs, run)
	return b.runs[len(b.runs)-1 : len(b.runs) : len(b.runs)]
}

func (r *Record) entry() types.PutRecordsRequestEntry {
	e := types.PutRecordsRequestEntry{Data: r.data, PartitionKey: aws.String(r.key)}
	if r.ehk != "" {
		e.ExplicitHashKey = aws.String(r.ehk)
	}
	return e
}

// aggregateTarget is the size at which an aggregate takes no more records. A refused
// aggregate is booked again whole, so smaller ones cost less when the service's count and the
// pacer's part for a moment; each aggregate repeats the keys of its records, so larger ones
// waste fewer bytes of the shard's 1 MiB a second. A quarter of it does both well enough: the
// keys of a few hundred records cost about 1%.
const aggregateTarget = 256 << 10

// aggregateUnit plans an aggregated record of sq's ready records, of at most room bytes (and
// 1 MiB): whole runs of each key's records in turn, until one does not fit or the aggregate
// reached aggregateTarget (the record that crosses it may take it up to 1 MiB). A single record
// is sent as it is, as the KPL does, and so is one too large to aggregate when the group is
// empty. The aggregate is encoded when the call that carries it is made.
func (b *batch) aggregateUnit(sq *shardQueue, room int, empty bool, now time.Time) (unit, bool) {
	a := b.plan
	a.reset()
	limit := min(room, MaxRecordBytes)
	var runs []keyRun
	var first *Record
	for {
		k := b.nextKey(sq, now)
		if k == nil {
			break
		}
		n, elsewhere := 0, false
		for n < len(k.recs) {
			r := &b.recs[k.recs[n]]
			// A record of the key that its explicit hash key places in another shard ends the
			// run: a reader drops a user record stored outside its shard's range, as the KCL
			// does. The key's next records wait for this run, then queue for their shard.
			if n > 0 && b.m != nil && b.m.Find(r.hash) != sq.id {
				elsewhere = true
				break
			}
			if a.size() >= aggregateTarget || a.size()+a.grow(r) > limit {
				break
			}
			if first == nil {
				first = r
			}
			a.add(r)
			n++
		}
		if n == 0 {
			break
		}
		runs = append(runs, b.take(sq, k, n))
		if n < len(k.recs) && !elsewhere {
			break // the aggregate is full
		}
	}
	switch {
	case a.n == 0 && empty:
		return b.plainUnit(sq, room, now)
	case a.n == 0:
		return unit{}, false
	case a.n == 1 && !kpl.IsAggregated(first.data):
		return unit{entry: first.entry(), runs: runs, sq: sq, size: first.size}, true
	}
	return unit{runs: runs, sq: sq, size: a.size(), aggregated: true, entry: types.PutRecordsRequestEntry{
		PartitionKey: aws.String(first.key), ExplicitHashKey: aws.String(first.hash.String()),
	}}, true
}
