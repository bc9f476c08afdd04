package kpl

import (
	"bytes"
	"cmp"
	"crypto/md5"
	"encoding/json"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
)

// The reference reading of the format, against which Deaggregate is held: a decoding written
// with protowire, the aggregates the reference aggregator wrote, and the fuzz target comparing
// the two.

// kplRecords reads a KPL aggregate as a protobuf decoder reads the schema in kpl.go,
// field by field with protowire: the reference that FuzzDeaggregate holds Deaggregate to. It
// accepts data that starts with the magic bytes and ends with the MD5 digest of the protobuf
// between them, whose fields all have valid numbers (1 to 2^29-1) and wire types, whose
// records and tags parse as their messages with their required fields (a record's partition
// key index and data, a tag's key), which holds at least one record, and whose records' key
// indexes are in the key table. A field of the schema with another wire type is an unknown
// field, as protobuf reads it; the last of a repeated scalar field wins. Unlike a generic
// protobuf decoder it refuses groups: the schema has none and no KPL writes one. An explicit
// hash key's index must be in its table, and the key in the form the service takes.
func kplRecords(data []byte) ([]Record, bool) {
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
	out := make([]Record, len(recs))
	for i, r := range recs {
		if r.key >= uint64(len(keys)) {
			return nil, false
		}
		out[i] = Record{PartitionKey: keys[r.key], Data: r.data}
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
	out := append(bytes.Clone(Magic), body...)
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
		Magic,
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
	require.Equal(t, []Record{{PartitionKey: "a", Data: []byte("one"), ExplicitHashKey: ""}, {PartitionKey: "b", Data: []byte("two"), ExplicitHashKey: ""}, {PartitionKey: "a", Data: []byte("three"), ExplicitHashKey: ""}}, recs)
	seeds := kplSeeds()
	for i, want := range [][]Record{
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

// referenceAggregates reads testdata/aggregates.json: aggregates that the reference
// aggregator (aws-kinesis-agg, run by testenv/aggregate.js) made of the user records beside
// them, with explicit hash keys, keys and data of every byte, and one of 200 records.
func referenceAggregates(t testing.TB) (aggs [][]byte, users [][]Record) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "aggregates.json"))
	require.NoError(t, err)
	var file []struct {
		Records []struct {
			PartitionKey    string `json:"partitionKey"`
			ExplicitHashKey string `json:"explicitHashKey"`
			Data            []byte `json:"data"`
		}
		Aggregate []byte
	}
	require.NoError(t, json.Unmarshal(raw, &file))
	for _, a := range file {
		var recs []Record
		for _, r := range a.Records {
			recs = append(recs, Record{PartitionKey: r.PartitionKey, Data: r.Data, ExplicitHashKey: r.ExplicitHashKey})
		}
		aggs, users = append(aggs, a.Aggregate), append(users, recs)
	}
	return aggs, users
}

// TestDeaggregateReference: aggregates the reference aggregator wrote read back as the user
// records they were made of, through Deaggregate and through kplRecords alike, explicit hash
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
		got, err := Deaggregate(agg)
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

// FuzzDeaggregate holds Deaggregate to kplRecords: both accept the same aggregates and read
// the same user records from them. With body set, the input is the protobuf of an aggregate
// and the test frames it with its digest, so the fuzzer reaches the protobuf past a digest it
// cannot compute; otherwise the input is the whole record.
func FuzzDeaggregate(f *testing.F) {
	seeds := append(kplSeeds(), aggregate([2]string{"k", "v"}), aggregate([2]string{"a", "1"}, [2]string{"b", "2"}))
	reference, _ := referenceAggregates(f)
	seeds = append(seeds, reference...)
	for _, s := range seeds {
		f.Add(s, false)
		if len(s) >= len(Magic)+md5.Size {
			f.Add(s[len(Magic):len(s)-md5.Size], true)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, body bool) {
		if body {
			data = kplMessage(data)
		}
		subs, err := Deaggregate(data)
		want, ok := kplRecords(data)
		if ok != (err == nil) {
			t.Fatalf("Deaggregate: %v; protobuf reading accepts: %v", err, ok)
		}
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed)
			return
		}
		require.Equal(t, want, subs)
	})
}
