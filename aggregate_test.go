package kinesub

import (
	"bytes"
	"cmp"
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gostream/kinesub/internal/kpl"
	"github.com/gostream/kinesub/lease"
)

// aggregate builds a KPL-aggregated record of the given (partition key, data) pairs, as the
// Kinesis Producer Library writes it.
func aggregate(recs ...[2]string) []byte {
	subs := make([]kpl.Record, len(recs))
	for i, r := range recs {
		subs[i] = kpl.Record{PartitionKey: r[0], Data: []byte(r[1])}
	}
	return aggregateOf(subs...)
}

// aggregateOf builds a KPL-aggregated record of the given user records, with an explicit hash
// key table for those that have one.
func aggregateOf(recs ...kpl.Record) []byte {
	field := func(b []byte, num int, payload []byte) []byte {
		b = binary.AppendUvarint(b, uint64(num<<3|kpl.WireBytes))
		b = binary.AppendUvarint(b, uint64(len(payload)))
		return append(b, payload...)
	}
	var keys, ehks []string
	keyIndex, ehkIndex := map[string]int{}, map[string]int{}
	for _, r := range recs {
		if _, ok := keyIndex[r.PartitionKey]; !ok {
			keyIndex[r.PartitionKey] = len(keys)
			keys = append(keys, r.PartitionKey)
		}
		if _, ok := ehkIndex[r.ExplicitHashKey]; !ok && r.ExplicitHashKey != "" {
			ehkIndex[r.ExplicitHashKey] = len(ehks)
			ehks = append(ehks, r.ExplicitHashKey)
		}
	}
	var body []byte
	for _, k := range keys {
		body = field(body, 1, []byte(k))
	}
	for _, k := range ehks {
		body = field(body, 2, []byte(k))
	}
	for _, r := range recs {
		var rec []byte
		rec = binary.AppendUvarint(rec, 1<<3|kpl.WireVarint)
		rec = binary.AppendUvarint(rec, uint64(keyIndex[r.PartitionKey]))
		if r.ExplicitHashKey != "" {
			rec = binary.AppendUvarint(rec, 2<<3|kpl.WireVarint)
			rec = binary.AppendUvarint(rec, uint64(ehkIndex[r.ExplicitHashKey]))
		}
		rec = field(rec, 3, r.Data)
		body = field(body, 3, rec)
	}
	sum := md5.Sum(body)
	out := append([]byte{}, kpl.Magic...)
	out = append(out, body...)
	return append(out, sum[:]...)
}

func TestDeaggregate(t *testing.T) {
	good := aggregate([2]string{"a", "one"}, [2]string{"b", "two"}, [2]string{"a", "three"})
	subs, err := kpl.Deaggregate(good)
	require.NoError(t, err)
	require.Equal(t, []kpl.Record{{PartitionKey: "a", Data: []byte("one"), ExplicitHashKey: ""}, {PartitionKey: "b", Data: []byte("two"), ExplicitHashKey: ""}, {PartitionKey: "a", Data: []byte("three"), ExplicitHashKey: ""}}, subs)

	// body frames a protobuf as an aggregate of one record (key "k", data "x") followed by
	// fields.
	body := func(fields ...byte) []byte {
		b := append([]byte{0x0a, 0x01, 'k', 0x1a, 0x05, 0x08, 0x00, 0x1a, 0x01, 'x'}, fields...)
		sum := md5.Sum(b)
		return append(append(append([]byte{}, kpl.Magic...), b...), sum[:]...)
	}
	// withTag is that aggregate with a tag of the given protobuf added to its record.
	withTag := func(tag ...byte) []byte {
		b := append([]byte{0x0a, 0x01, 'k', 0x1a, byte(7 + len(tag)), 0x08, 0x00, 0x1a, 0x01, 'x', 0x22, byte(len(tag))}, tag...)
		sum := md5.Sum(b)
		return append(append(append([]byte{}, kpl.Magic...), b...), sum[:]...)
	}
	subs, err = kpl.Deaggregate(body(0x28, 0x01))
	require.NoError(t, err, "an unknown field")
	require.Equal(t, []kpl.Record{{PartitionKey: "k", Data: []byte("x"), ExplicitHashKey: ""}}, subs)
	subs, err = kpl.Deaggregate(withTag(0x0a, 0x01, 't', 0x12, 0x01, 'v'))
	require.NoError(t, err, "a tag")
	require.Equal(t, []kpl.Record{{PartitionKey: "k", Data: []byte("x"), ExplicitHashKey: ""}}, subs)

	badDigest := append([]byte{}, good...)
	badDigest[len(badDigest)-1] ^= 1
	truncated := good[:len(good)-20]
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"digest mismatch", badDigest},
		{"truncated", truncated},
		{"magic only", kpl.Magic},
		{"no records", aggregate()},
		{"junk body", append(append([]byte{}, kpl.Magic...), "\x0a\x01x0123456789abcdef"...)},
		{"field number 0", body(0x00, 0x01)},
		{"field number past 2^29-1", body(0x80, 0x80, 0x80, 0x80, 0x10, 0x01)},
		{"a group", body(0x2b, 0x2c)},
		{"a tag without its key", withTag(0x12, 0x01, 'v')},
		{"a tag that does not parse", withTag(0xff)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kpl.Deaggregate(tc.data)
			require.True(t, errors.Is(err, kpl.ErrMalformed), "err = %v", err)
		})
	}
}

// kplRecords reads a KPL aggregate as a protobuf decoder reads the schema in aggregate.go,
// field by field with protowire: the reference that FuzzDeaggregate holds deaggregate to. It
// accepts data that starts with the magic bytes and ends with the MD5 digest of the protobuf
// between them, whose fields all have valid numbers (1 to 2^29-1) and wire types, whose
// records and tags parse as their messages with their required fields (a record's partition
// key index and data, a tag's key), which holds at least one record, and whose records' key
// indexes are in the key table. A field of the schema with another wire type is an unknown
// field, as protobuf reads it; the last of a repeated scalar field wins. Unlike a generic
// protobuf decoder it refuses groups: the schema has none and no KPL writes one. Explicit
// hash keys are read past, their indexes unchecked: kinesub does not expose them.
func kplRecords(data []byte) ([]kpl.Record, bool) {
	magic := []byte{0xF3, 0x89, 0x9A, 0xC2}
	if len(data) < len(magic)+md5.Size || !bytes.Equal(data[:len(magic)], magic) {
		return nil, false
	}
	body := data[len(magic) : len(data)-md5.Size]
	if sum := md5.Sum(body); !bytes.Equal(sum[:], data[len(data)-md5.Size:]) {
		return nil, false
	}
	var keys, ehks []string
	type record struct {
		key, ehk uint64
		hasEHK   bool
		data     []byte
	}
	var recs []record
	ok := protoFields(body, func(num protowire.Number, typ protowire.Type, v uint64, b []byte) bool {
		switch {
		case num == 1 && typ == protowire.BytesType:
			keys = append(keys, string(b))
		case num == 2 && typ == protowire.BytesType:
			ehks = append(ehks, string(b))
		case num == 3 && typ == protowire.BytesType:
			var r record
			var haveKey, haveData bool
			ok := protoFields(b, func(num protowire.Number, typ protowire.Type, v uint64, b []byte) bool {
				switch {
				case num == 1 && typ == protowire.VarintType:
					r.key, haveKey = v, true
				case num == 2 && typ == protowire.VarintType:
					r.ehk, r.hasEHK = v, true
				case num == 3 && typ == protowire.BytesType:
					r.data, haveData = b, true
				case num == 4 && typ == protowire.BytesType:
					var haveTagKey bool
					return protoFields(b, func(num protowire.Number, typ protowire.Type, _ uint64, _ []byte) bool {
						haveTagKey = haveTagKey || num == 1 && typ == protowire.BytesType
						return true
					}) && haveTagKey
				}
				return true
			})
			if !ok || !haveKey || !haveData {
				return false
			}
			recs = append(recs, r)
		}
		return true
	})
	if !ok || len(recs) == 0 {
		return nil, false
	}
	out := make([]kpl.Record, len(recs))
	for i, r := range recs {
		if r.key >= uint64(len(keys)) {
			return nil, false
		}
		out[i] = kpl.Record{PartitionKey: keys[r.key], Data: r.data}
		if r.hasEHK {
			// An explicit hash key as the service takes one: 0|[1-9]\d{0,38}, at most 2^128-1.
			if r.ehk >= uint64(len(ehks)) || !explicitHashKeyRE.MatchString(ehks[r.ehk]) {
				return nil, false
			}
			if v, _ := new(big.Int).SetString(ehks[r.ehk], 10); v.BitLen() > 128 {
				return nil, false
			}
			out[i].ExplicitHashKey = ehks[r.ehk]
		}
	}
	return out, true
}

var explicitHashKeyRE = regexp.MustCompile(`^(0|[1-9][0-9]{0,38})$`)

// protoFields calls fn with each field of a protobuf message (v holds a varint's value, b a
// length-delimited field's bytes) while fn returns true; false for a message that does not
// parse or holds a group.
func protoFields(msg []byte, fn func(num protowire.Number, typ protowire.Type, v uint64, b []byte) bool) bool {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 || !num.IsValid() || typ == protowire.StartGroupType || typ == protowire.EndGroupType {
			return false
		}
		msg = msg[n:]
		var v uint64
		var b []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(msg)
		case protowire.BytesType:
			b, n = protowire.ConsumeBytes(msg)
		default:
			n = protowire.ConsumeFieldValue(num, typ, msg)
		}
		if n < 0 || !fn(num, typ, v, b) {
			return false
		}
		msg = msg[n:]
	}
	return true
}

// kplMessage frames a protobuf body as a KPL aggregate: the magic bytes, the body, its MD5.
func kplMessage(body []byte) []byte {
	sum := md5.Sum(body)
	out := append(bytes.Clone(kpl.Magic), body...)
	return append(out, sum[:]...)
}

// pbBytes and pbVarint append a protobuf field.
func pbBytes(b []byte, num protowire.Number, v string) []byte {
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), v)
}

func pbVarint(b []byte, num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

// kplSeeds are aggregates that exercise every part of the format: explicit hash keys, tags,
// unknown fields of each wire type, repeated scalars, the wire types protobuf treats as unknown
// for a field of the schema, and the ways an aggregate is malformed.
func kplSeeds() [][]byte {
	rec := func(fields ...[]byte) string { return string(bytes.Join(fields, nil)) }
	key := func(i uint64) []byte { return pbVarint(nil, 1, i) }
	dat := func(s string) []byte { return pbBytes(nil, 3, s) }
	tag := func(fields ...[]byte) []byte { return pbBytes(nil, 4, rec(fields...)) }
	agg := func(fields ...[]byte) []byte { return kplMessage(bytes.Join(fields, nil)) }
	keys := append(pbBytes(nil, 1, "alice"), pbBytes(nil, 1, "")...)
	seeds := [][]byte{
		agg(keys, pbBytes(nil, 2, "1234567890"), pbBytes(nil, 3, rec(key(0), pbVarint(nil, 2, 0), dat("a1"))),
			pbBytes(nil, 3, rec(key(1), dat("")))),
		agg(keys, pbBytes(nil, 3, rec(key(0), dat("t"), tag(pbBytes(nil, 1, "k"), pbBytes(nil, 2, "v")), tag(pbBytes(nil, 1, ""))))),
		agg(keys, pbBytes(nil, 3, rec(key(1), dat("first"), key(0), dat("last")))),
		agg(keys, pbVarint(nil, 1, 7), pbVarint(nil, 3, 7), pbBytes(nil, 3, rec(pbBytes(nil, 1, "x"), key(0), pbVarint(nil, 3, 1), dat("d")))),
		agg(keys, protowire.AppendFixed32(protowire.AppendTag(nil, 9, protowire.Fixed32Type), 1),
			protowire.AppendFixed64(protowire.AppendTag(nil, 10, protowire.Fixed64Type), 2), pbBytes(nil, 11, "?"), pbVarint(nil, 12, 1<<63),
			pbBytes(nil, 3, rec(key(0), dat("u"), pbVarint(nil, protowire.MaxValidNumber, 1)))),
		agg(keys), // no records
		agg(keys, pbBytes(nil, 3, rec(key(2), dat("x")))),                            // key index past the table
		agg(keys, pbBytes(nil, 3, rec(dat("x")))),                                    // no key index
		agg(keys, pbBytes(nil, 3, rec(key(0)))),                                      // no data
		agg(keys, pbBytes(nil, 3, rec(key(0), dat("x"), tag(pbBytes(nil, 2, "v"))))), // a tag without its key
		agg(keys, pbBytes(nil, 3, rec(key(0), dat("x"), pbBytes(nil, 4, "\xff")))),   // a tag that does not parse
		agg(keys, pbBytes(nil, 3, rec(key(0), dat("x"))), pbVarint(nil, 0, 1)),       // field number 0
		agg(keys, pbBytes(nil, 3, rec(key(0), dat("x"))), protowire.AppendTag(nil, 5, protowire.StartGroupType),
			protowire.AppendTag(nil, 5, protowire.EndGroupType)), // a group
		agg(keys, []byte{0x1a, 0x84, 0x80, 0x00}, key(0), dat("x")), // a non-minimal length
		kplMessage([]byte{0x0a, 0x05, 'a'}),                         // a length past the end
		kpl.Magic,
	}
	bad := agg(keys, pbBytes(nil, 3, rec(key(0), dat("x"))))
	bad[len(bad)-1] ^= 1
	return append(seeds, bad)
}

// TestKPLRecordsReference: the reference decoding reads the aggregates the tests write, and
// refuses the malformed ones, so that FuzzDeaggregate compares against a decoding that works.
func TestKPLRecordsReference(t *testing.T) {
	recs, ok := kplRecords(aggregate([2]string{"a", "one"}, [2]string{"b", "two"}, [2]string{"a", "three"}))
	require.True(t, ok)
	require.Equal(t, []kpl.Record{{PartitionKey: "a", Data: []byte("one"), ExplicitHashKey: ""}, {PartitionKey: "b", Data: []byte("two"), ExplicitHashKey: ""}, {PartitionKey: "a", Data: []byte("three"), ExplicitHashKey: ""}}, recs)
	seeds := kplSeeds()
	for i, want := range [][]kpl.Record{
		{{PartitionKey: "alice", Data: []byte("a1"), ExplicitHashKey: "1234567890"}, {PartitionKey: "", Data: []byte{}, ExplicitHashKey: ""}},
		{{PartitionKey: "alice", Data: []byte("t"), ExplicitHashKey: ""}},
		{{PartitionKey: "alice", Data: []byte("last"), ExplicitHashKey: ""}},
		{{PartitionKey: "alice", Data: []byte("d"), ExplicitHashKey: ""}},
		{{PartitionKey: "alice", Data: []byte("u"), ExplicitHashKey: ""}},
	} {
		got, ok := kplRecords(seeds[i])
		require.True(t, ok, "seed %d", i)
		require.Equal(t, want, got, "seed %d", i)
	}
	for i, s := range seeds[5:] {
		_, ok := kplRecords(s)
		require.False(t, ok, "seed %d", 5+i)
	}
}

// referenceAggregates reads testdata/kpl/aggregates.json: aggregates that the reference
// aggregator (aws-kinesis-agg, run by testenv/aggregate.js) made of the user records beside
// them, with explicit hash keys, keys and data of every byte, and one of 200 records.
func referenceAggregates(t testing.TB) (aggs [][]byte, users [][]kpl.Record) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "kpl", "aggregates.json"))
	require.NoError(t, err)
	var file []struct {
		Records   []userRecord
		Aggregate []byte
	}
	require.NoError(t, json.Unmarshal(raw, &file))
	for _, a := range file {
		var recs []kpl.Record
		for _, r := range a.Records {
			recs = append(recs, kpl.Record{PartitionKey: r.PartitionKey, Data: r.Data, ExplicitHashKey: r.ExplicitHashKey})
		}
		aggs, users = append(aggs, a.Aggregate), append(users, recs)
	}
	return aggs, users
}

// TestDeaggregateReference: aggregates the reference aggregator wrote read back as the user
// records they were made of, through deaggregate and through kplRecords alike, explicit hash
// keys included where the aggregator wrote them as given (see shufflesTable).
func TestDeaggregateReference(t *testing.T) {
	aggs, users := referenceAggregates(t)
	require.NotEmpty(t, aggs)
	shuffled := 0
	for i, agg := range aggs {
		var ehks []string
		for j := range users[i] {
			if users[i][j].Data == nil {
				users[i][j].Data = []byte{}
			}
			ehks = append(ehks, users[i][j].ExplicitHashKey)
		}
		got, err := kpl.Deaggregate(agg)
		require.NoError(t, err, "aggregate %d", i)
		ref, ok := kplRecords(agg)
		require.True(t, ok, "aggregate %d", i)
		require.Equal(t, ref, got, "aggregate %d", i)
		if shufflesTable(ehks) {
			shuffled++
			for j := range got {
				got[j].ExplicitHashKey = users[i][j].ExplicitHashKey
			}
		}
		require.Equal(t, users[i], got, "aggregate %d", i)
	}
	require.Equal(t, 1, shuffled, "aggregates whose explicit hash key table the aggregator shuffled")
}

// shufflesTable reports whether aws-kinesis-agg (JavaScript) writes an explicit hash key
// table of these keys in another order than it numbers them: it numbers keys as they come but
// writes the table as Object.keys lists it, array-index-like keys (decimals below 2^32-1)
// first and in numeric order, so a record's index then names another record's key.
func shufflesTable(keys []string) bool {
	var order, intLike, rest []string
	seen := map[string]bool{}
	for _, k := range keys {
		if k == "" || seen[k] {
			continue
		}
		seen[k] = true
		order = append(order, k)
		if v, err := strconv.ParseUint(k, 10, 64); err == nil && v < 1<<32-1 && strconv.FormatUint(v, 10) == k {
			intLike = append(intLike, k)
		} else {
			rest = append(rest, k)
		}
	}
	slices.SortFunc(intLike, func(a, b string) int {
		x, _ := strconv.ParseUint(a, 10, 64)
		y, _ := strconv.ParseUint(b, 10, 64)
		return cmp.Compare(x, y)
	})
	return !slices.Equal(order, append(intLike, rest...))
}

// TestDeaggregateExplicitHashKeys: explicit hash keys are read from their table; an index past
// the table, or a key that is not one (the KPL writes neither), makes the aggregate malformed.
func TestDeaggregateExplicitHashKeys(t *testing.T) {
	want := []kpl.Record{
		{PartitionKey: "a", Data: []byte("1"), ExplicitHashKey: "340282366920938463463374607431768211455"},
		{PartitionKey: "b", Data: []byte("2")},
		{PartitionKey: "a", Data: []byte("3"), ExplicitHashKey: "0"},
	}
	got, err := kpl.Deaggregate(aggregateOf(want...))
	require.NoError(t, err)
	require.Equal(t, want, got)
	for _, bad := range []string{"340282366920938463463374607431768211456", "01", "-1", "1e3", " 1"} {
		_, err := kpl.Deaggregate(aggregateOf(kpl.Record{PartitionKey: "a", Data: []byte("x"), ExplicitHashKey: bad}))
		require.ErrorIs(t, err, kpl.ErrMalformed, "explicit hash key %q", bad)
	}
	// An index past the table: the record names key 1 of a table of one.
	pb := pbBytes(pbBytes(nil, 1, "a"), 2, "7")
	rec := pbBytes(pbVarint(pbVarint(nil, 1, 0), 2, 1), 3, "x")
	_, err = kpl.Deaggregate(kplMessage(pbBytes(pb, 3, string(rec))))
	require.ErrorIs(t, err, kpl.ErrMalformed)
}

// TestSubRecordInRange: a user record's hash key is its explicit hash key, or else the MD5
// digest of its partition key read as a 128-bit big-endian number; a shard's range holds both
// its ends.
func TestSubRecordInRange(t *testing.T) {
	md5Of := func(k string) *big.Int {
		sum := md5.Sum([]byte(k))
		return new(big.Int).SetBytes(sum[:])
	}
	rangeOf := func(start, end *big.Int) kpl.KeyRange {
		r, ok := kpl.ParseKeyRange(&types.HashKeyRange{StartingHashKey: aws.String(start.String()), EndingHashKey: aws.String(end.String())})
		require.True(t, ok)
		return r
	}
	one := big.NewInt(1)
	max := new(big.Int).Sub(new(big.Int).Lsh(one, 128), one)
	mid := new(big.Int).Lsh(one, 127)
	kA := md5Of("a") // 0x0cc175b9…: the lower half
	for _, tc := range []struct {
		name       string
		rec        kpl.Record
		start, end *big.Int
		want       bool
	}{
		{"partition key inside", kpl.Record{PartitionKey: "a"}, big.NewInt(0), new(big.Int).Sub(mid, one), true},
		{"partition key outside", kpl.Record{PartitionKey: "a"}, mid, max, false},
		{"partition key at the start", kpl.Record{PartitionKey: "a"}, kA, max, true},
		{"partition key at the end", kpl.Record{PartitionKey: "a"}, big.NewInt(0), kA, true},
		{"partition key just past the end", kpl.Record{PartitionKey: "a"}, big.NewInt(0), new(big.Int).Sub(kA, one), false},
		{"partition key just before the start", kpl.Record{PartitionKey: "a"}, new(big.Int).Add(kA, one), max, false},
		{"explicit hash key over the partition key", kpl.Record{PartitionKey: "a", ExplicitHashKey: mid.String()}, mid, max, true},
		{"explicit hash key outside", kpl.Record{PartitionKey: "a", ExplicitHashKey: new(big.Int).Sub(mid, one).String()}, mid, max, false},
		{"explicit hash key at the end", kpl.Record{PartitionKey: "z", ExplicitHashKey: max.String()}, mid, max, true},
		{"explicit hash key 0 at the start", kpl.Record{PartitionKey: "z", ExplicitHashKey: "0"}, big.NewInt(0), one, true},
		{"explicit hash key past a one-key range", kpl.Record{PartitionKey: "z", ExplicitHashKey: "6"}, big.NewInt(5), big.NewInt(5), false},
	} {
		r := rangeOf(tc.start, tc.end)
		require.Equal(t, tc.want, r.Holds(tc.rec.HashKey()), tc.name)
	}
	require.True(t, rangeOf(big.NewInt(0), max).Whole())
	require.False(t, rangeOf(big.NewInt(0), new(big.Int).Sub(max, one)).Whole())
	require.False(t, rangeOf(one, max).Whole())
	for _, bad := range []*types.HashKeyRange{
		nil,
		{StartingHashKey: aws.String("0")},
		{StartingHashKey: aws.String("5"), EndingHashKey: aws.String("4")},
		{StartingHashKey: aws.String("0"), EndingHashKey: aws.String(new(big.Int).Lsh(one, 128).String())},
	} {
		_, ok := kpl.ParseKeyRange(bad)
		require.False(t, ok, "%+v", bad)
	}
}

// FuzzDeaggregate holds deaggregate to kplRecords: both accept the same aggregates and read
// the same user records from them. With body set, the input is the protobuf of an aggregate
// and the test frames it with its digest, so the fuzzer reaches the protobuf past a digest it
// cannot compute; otherwise the input is the whole record.
func FuzzDeaggregate(f *testing.F) {
	seeds := append(kplSeeds(), aggregate([2]string{"k", "v"}), aggregate([2]string{"a", "1"}, [2]string{"b", "2"}))
	reference, _ := referenceAggregates(f)
	seeds = append(seeds, reference...)
	for _, s := range seeds {
		f.Add(s, false)
		if len(s) >= len(kpl.Magic)+md5.Size {
			f.Add(s[len(kpl.Magic):len(s)-md5.Size], true)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, body bool) {
		if body {
			data = kplMessage(data)
		}
		subs, err := kpl.Deaggregate(data)
		want, ok := kplRecords(data)
		if ok != (err == nil) {
			t.Fatalf("deaggregate: %v; protobuf reading accepts: %v", err, ok)
		}
		if err != nil {
			require.ErrorIs(t, err, kpl.ErrMalformed)
			return
		}
		require.Equal(t, want, subs)
	})
}

// TestAggregatedRecordsDelivered: a KPL aggregate arrives as its user records, sharing the
// aggregate's sequence number; until every one of them is handled the checkpoint stays inside
// the aggregate, counting its handled user records, so a restart neither skips nor repeats any.
func TestAggregatedRecordsDelivered(t *testing.T) {
	s := newStream(t, 1)
	store := lease.NewMemory()
	sub := subscribeT(t, s, testOpts(store, WithStartAt(Horizon()))...)
	before := s.put("k", []byte("plain"))
	aggSeq := s.put("k", aggregate([2]string{"alice", "a1"}, [2]string{"bob", "b1"}, [2]string{"alice", "a2"}))
	got := recv(t, sub, 4, false)
	require.Equal(t, []string{"plain", "a1", "b1", "a2"}, payloads(got))
	require.Equal(t, []string{"k", "alice", "bob", "alice"}, []string{got[0].PartitionKey(), got[1].PartitionKey(), got[2].PartitionKey(), got[3].PartitionKey()})
	for i, m := range got[1:] {
		require.Equal(t, aggSeq, m.SequenceNumber())
		require.Equal(t, i, m.SubSequenceNumber())
	}
	ctx := context.Background()
	for _, m := range got[:3] {
		require.NoError(t, m.Ack(ctx))
	}
	require.NoError(t, sub.Commit(ctx))
	shard := got[0].ShardID()
	l := readLease(t, store, s.name, shard)
	require.Equal(t, []any{aggSeq, int64(2)}, []any{l.Checkpoint.Sequence, l.Checkpoint.SubSequence}, "two user records of the aggregate handled (plain was %s)", before)
	require.NoError(t, got[3].Ack(ctx))
	require.NoError(t, sub.Commit(ctx))
	l = readLease(t, store, s.name, shard)
	require.Equal(t, []any{aggSeq, int64(0)}, []any{l.Checkpoint.Sequence, l.Checkpoint.SubSequence}, "the whole aggregate handled")
}

func TestIsAggregated(t *testing.T) {
	for _, tc := range []struct {
		data []byte
		want bool
	}{
		{[]byte{0xF3, 0x89, 0x9A, 0xC2}, true},
		{[]byte{0xF3, 0x89, 0x9A, 0xC2, 0x0A, 0x01}, true},
		{[]byte{0xF3, 0x89, 0x9A}, false},
		{[]byte{0xF3, 0x89, 0x9A, 0xC3}, false},
		{[]byte("RSK1"), false},
		{nil, false},
	} {
		if got := kpl.IsAggregated(tc.data); got != tc.want {
			t.Errorf("kpl.IsAggregated(% x) = %v, want %v", tc.data, got, tc.want)
		}
	}
}
