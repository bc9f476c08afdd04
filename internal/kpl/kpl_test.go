package kpl

import (
	"crypto/md5"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// aggregate builds a KPL-aggregated record of the given (partition key, data) pairs, as the
// Kinesis Producer Library writes it.
func aggregate(recs ...[2]string) []byte {
	subs := make([]Record, len(recs))
	for i, r := range recs {
		subs[i] = Record{PartitionKey: r[0], Data: []byte(r[1])}
	}
	return aggregateOf(subs...)
}

// aggregateOf builds a KPL-aggregated record of the given user records, with an explicit hash
// key table for those that have one.
func aggregateOf(recs ...Record) []byte {
	field := func(b []byte, num int, payload []byte) []byte {
		b = binary.AppendUvarint(b, uint64(num<<3|WireBytes))
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
		rec = binary.AppendUvarint(rec, 1<<3|WireVarint)
		rec = binary.AppendUvarint(rec, uint64(keyIndex[r.PartitionKey]))
		if r.ExplicitHashKey != "" {
			rec = binary.AppendUvarint(rec, 2<<3|WireVarint)
			rec = binary.AppendUvarint(rec, uint64(ehkIndex[r.ExplicitHashKey]))
		}
		rec = field(rec, 3, r.Data)
		body = field(body, 3, rec)
	}
	sum := md5.Sum(body)
	out := append([]byte{}, Magic...)
	out = append(out, body...)
	return append(out, sum[:]...)
}

func TestDeaggregate(t *testing.T) {
	good := aggregate([2]string{"a", "one"}, [2]string{"b", "two"}, [2]string{"a", "three"})
	subs, err := Deaggregate(good)
	require.NoError(t, err)
	require.Equal(t, []Record{{PartitionKey: "a", Data: []byte("one"), ExplicitHashKey: ""}, {PartitionKey: "b", Data: []byte("two"), ExplicitHashKey: ""}, {PartitionKey: "a", Data: []byte("three"), ExplicitHashKey: ""}}, subs)

	// body frames a protobuf as an aggregate of one record (key "k", data "x") followed by
	// fields.
	body := func(fields ...byte) []byte {
		b := append([]byte{0x0a, 0x01, 'k', 0x1a, 0x05, 0x08, 0x00, 0x1a, 0x01, 'x'}, fields...)
		sum := md5.Sum(b)
		return append(append(append([]byte{}, Magic...), b...), sum[:]...)
	}
	// withTag is that aggregate with a tag of the given protobuf added to its record.
	withTag := func(tag ...byte) []byte {
		b := append([]byte{0x0a, 0x01, 'k', 0x1a, byte(7 + len(tag)), 0x08, 0x00, 0x1a, 0x01, 'x', 0x22, byte(len(tag))}, tag...)
		sum := md5.Sum(b)
		return append(append(append([]byte{}, Magic...), b...), sum[:]...)
	}
	subs, err = Deaggregate(body(0x28, 0x01))
	require.NoError(t, err, "an unknown field")
	require.Equal(t, []Record{{PartitionKey: "k", Data: []byte("x"), ExplicitHashKey: ""}}, subs)
	subs, err = Deaggregate(withTag(0x0a, 0x01, 't', 0x12, 0x01, 'v'))
	require.NoError(t, err, "a tag")
	require.Equal(t, []Record{{PartitionKey: "k", Data: []byte("x"), ExplicitHashKey: ""}}, subs)

	badDigest := append([]byte{}, good...)
	badDigest[len(badDigest)-1] ^= 1
	truncated := good[:len(good)-20]
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"digest mismatch", badDigest},
		{"truncated", truncated},
		{"magic only", Magic},
		{"no records", aggregate()},
		{"junk body", append(append([]byte{}, Magic...), "\x0a\x01x0123456789abcdef"...)},
		{"field number 0", body(0x00, 0x01)},
		{"field number past 2^29-1", body(0x80, 0x80, 0x80, 0x80, 0x10, 0x01)},
		{"a group", body(0x2b, 0x2c)},
		{"a tag without its key", withTag(0x12, 0x01, 'v')},
		{"a tag that does not parse", withTag(0xff)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Deaggregate(tc.data)
			require.True(t, errors.Is(err, ErrMalformed), "err = %v", err)
		})
	}
}

// TestDeaggregateExplicitHashKeys: explicit hash keys are read from their table; an index past
// the table, or a key that is not one (the KPL writes neither), makes the aggregate malformed.
func TestDeaggregateExplicitHashKeys(t *testing.T) {
	want := []Record{
		{PartitionKey: "a", Data: []byte("1"), ExplicitHashKey: "340282366920938463463374607431768211455"},
		{PartitionKey: "b", Data: []byte("2")},
		{PartitionKey: "a", Data: []byte("3"), ExplicitHashKey: "0"},
	}
	got, err := Deaggregate(aggregateOf(want...))
	require.NoError(t, err)
	require.Equal(t, want, got)
	for _, bad := range []string{"340282366920938463463374607431768211456", "01", "-1", "1e3", " 1"} {
		_, err := Deaggregate(aggregateOf(Record{PartitionKey: "a", Data: []byte("x"), ExplicitHashKey: bad}))
		require.ErrorIs(t, err, ErrMalformed, "explicit hash key %q", bad)
	}
	// An index past the table: the record names key 1 of a table of one.
	pb := pbBytes(pbBytes(nil, 1, "a"), 2, "7")
	rec := pbBytes(pbVarint(pbVarint(nil, 1, 0), 2, 1), 3, "x")
	_, err = Deaggregate(kplMessage(pbBytes(pb, 3, string(rec))))
	require.ErrorIs(t, err, ErrMalformed)
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
		if got := IsAggregated(tc.data); got != tc.want {
			t.Errorf("IsAggregated(% x) = %v, want %v", tc.data, got, tc.want)
		}
	}
}
