package publish

import (
	"crypto/md5"
	"encoding/binary"
	"math/bits"

	"github.com/gostream/kinesub/internal/kpl"
)

// KPL aggregation (WithPublishAggregation). An aggregated record is the magic bytes, an
// AggregatedRecord protobuf, and the MD5 digest of the protobuf (internal/kpl reads it). As the
// KPL writes it, the partition-key table (field 1) comes first, then the explicit-hash-key
// table (field 2), then the records (field 3), each naming its key, and its explicit hash key
// when it has one, by index. The Kinesis record carries the first user record's partition key,
// and that record's hash key as explicit hash key, so that it lands on the shard predicted for
// the user records it holds.
//
// A batch plans its aggregates when it books them in a shard's pacer, which may be seconds
// before they are due: planning counts sizes only (aggPlan), and the bytes are written when the
// call that carries them is made (encodeAggregate), so that a burst does not encode ahead what
// it cannot send yet.

// aggPlan sizes one aggregated record as user records are added. It is reused.
type aggPlan struct {
	keys, ehks map[string]uint64
	body       int // the protobuf's length so far
	n          int
	key        string // the first user record's partition key
}

func newAggPlan() *aggPlan { return &aggPlan{keys: map[string]uint64{}, ehks: map[string]uint64{}} }

func (a *aggPlan) reset() {
	clear(a.keys)
	clear(a.ehks)
	a.body, a.n, a.key = 0, 0, ""
}

// size is what the aggregated record counts against the service's limits: its data and its
// partition key (0 while it is empty).
func (a *aggPlan) size() int {
	if a.n == 0 {
		return 0
	}
	return len(kpl.Magic) + a.body + md5.Size + len(a.key)
}

// grow is how much adding a user record would add to size.
func (a *aggPlan) grow(r *Record) int {
	d := 0
	ki, ok := a.keys[r.key]
	if !ok {
		ki = uint64(len(a.keys))
		d += fieldLen(len(r.key))
	}
	ei, ok := a.ehks[r.ehk]
	if r.ehk != "" && !ok {
		ei = uint64(len(a.ehks))
		d += fieldLen(len(r.ehk))
	}
	d += fieldLen(recordLen(r, ki, ei))
	if a.n == 0 {
		d += len(kpl.Magic) + md5.Size + len(r.key)
	}
	return d
}

// add counts a user record in.
func (a *aggPlan) add(r *Record) {
	ki, ok := a.keys[r.key]
	if !ok {
		ki = uint64(len(a.keys))
		a.keys[r.key] = ki
		a.body += fieldLen(len(r.key))
	}
	ei, ok := a.ehks[r.ehk]
	if r.ehk != "" && !ok {
		ei = uint64(len(a.ehks))
		a.ehks[r.ehk] = ei
		a.body += fieldLen(len(r.ehk))
	}
	a.body += fieldLen(recordLen(r, ki, ei))
	if a.n == 0 {
		a.key = r.key
	}
	a.n++
}

// recordLen is the length of a Record message of r with key index ki and, when r has an
// explicit hash key, hash-key index ei.
func recordLen(r *Record, ki, ei uint64) int {
	n := 1 + uvarintLen(ki) + fieldLen(len(r.data))
	if r.ehk != "" {
		n += 1 + uvarintLen(ei)
	}
	return n
}

// encodeAggregate writes the aggregated record of recs, in order: exactly the size a plan of
// the same records counted.
func encodeAggregate(recs []*Record) []byte {
	keys, ehks := map[string]uint64{}, map[string]uint64{}
	var keyTable, ehkTable []byte
	body := 0
	for _, r := range recs {
		if _, ok := keys[r.key]; !ok {
			keys[r.key] = uint64(len(keys))
			keyTable = appendField(keyTable, 1, r.key)
		}
		if _, ok := ehks[r.ehk]; r.ehk != "" && !ok {
			ehks[r.ehk] = uint64(len(ehks))
			ehkTable = appendField(ehkTable, 2, r.ehk)
		}
		body += fieldLen(recordLen(r, keys[r.key], ehks[r.ehk]))
	}
	body += len(keyTable) + len(ehkTable)
	out := make([]byte, 0, len(kpl.Magic)+body+md5.Size)
	out = append(out, kpl.Magic...)
	out = append(out, keyTable...)
	out = append(out, ehkTable...)
	for _, r := range recs {
		ki, ei := keys[r.key], ehks[r.ehk]
		out = append(out, 3<<3|kpl.WireBytes)
		out = binary.AppendUvarint(out, uint64(recordLen(r, ki, ei)))
		out = append(out, 1<<3|kpl.WireVarint)
		out = binary.AppendUvarint(out, ki)
		if r.ehk != "" {
			out = append(out, 2<<3|kpl.WireVarint)
			out = binary.AppendUvarint(out, ei)
		}
		out = appendField(out, 3, r.data)
	}
	sum := md5.Sum(out[len(kpl.Magic):])
	return append(out, sum[:]...)
}

func appendField[T string | []byte](b []byte, field int, v T) []byte {
	b = append(b, byte(field<<3|kpl.WireBytes))
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// fieldLen is the encoded length of a length-delimited field of n bytes with a one-byte tag.
func fieldLen(n int) int { return 1 + uvarintLen(uint64(n)) + n }

func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }
