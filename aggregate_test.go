package kinesub

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// aggregate builds a KPL-aggregated record of the given (partition key, data) pairs, as the
// Kinesis Producer Library writes it.
func aggregate(recs ...[2]string) []byte {
	field := func(b []byte, num int, payload []byte) []byte {
		b = binary.AppendUvarint(b, uint64(num<<3|wireBytes))
		b = binary.AppendUvarint(b, uint64(len(payload)))
		return append(b, payload...)
	}
	var keys []string
	index := map[string]int{}
	var body []byte
	for _, r := range recs {
		if _, ok := index[r[0]]; !ok {
			index[r[0]] = len(keys)
			keys = append(keys, r[0])
		}
	}
	for _, k := range keys {
		body = field(body, 1, []byte(k))
	}
	for _, r := range recs {
		var rec []byte
		rec = binary.AppendUvarint(rec, 1<<3|wireVarint)
		rec = binary.AppendUvarint(rec, uint64(index[r[0]]))
		rec = field(rec, 3, []byte(r[1]))
		body = field(body, 3, rec)
	}
	sum := md5.Sum(body)
	out := append([]byte{}, aggregatedMagic...)
	out = append(out, body...)
	return append(out, sum[:]...)
}

func TestDeaggregate(t *testing.T) {
	good := aggregate([2]string{"a", "one"}, [2]string{"b", "two"}, [2]string{"a", "three"})
	subs, err := deaggregate(good)
	require.NoError(t, err)
	require.Equal(t, []subRecord{{"a", []byte("one")}, {"b", []byte("two")}, {"a", []byte("three")}}, subs)

	// body frames a protobuf as an aggregate of one record (key "k", data "x") followed by
	// fields.
	body := func(fields ...byte) []byte {
		b := append([]byte{0x0a, 0x01, 'k', 0x1a, 0x05, 0x08, 0x00, 0x1a, 0x01, 'x'}, fields...)
		sum := md5.Sum(b)
		return append(append(append([]byte{}, aggregatedMagic...), b...), sum[:]...)
	}
	// withTag is that aggregate with a tag of the given protobuf added to its record.
	withTag := func(tag ...byte) []byte {
		b := append([]byte{0x0a, 0x01, 'k', 0x1a, byte(7 + len(tag)), 0x08, 0x00, 0x1a, 0x01, 'x', 0x22, byte(len(tag))}, tag...)
		sum := md5.Sum(b)
		return append(append(append([]byte{}, aggregatedMagic...), b...), sum[:]...)
	}
	subs, err = deaggregate(body(0x28, 0x01))
	require.NoError(t, err, "an unknown field")
	require.Equal(t, []subRecord{{"k", []byte("x")}}, subs)
	subs, err = deaggregate(withTag(0x0a, 0x01, 't', 0x12, 0x01, 'v'))
	require.NoError(t, err, "a tag")
	require.Equal(t, []subRecord{{"k", []byte("x")}}, subs)

	badDigest := append([]byte{}, good...)
	badDigest[len(badDigest)-1] ^= 1
	truncated := good[:len(good)-20]
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"digest mismatch", badDigest},
		{"truncated", truncated},
		{"magic only", aggregatedMagic},
		{"no records", aggregate()},
		{"junk body", append(append([]byte{}, aggregatedMagic...), "\x0a\x01x0123456789abcdef"...)},
		{"field number 0", body(0x00, 0x01)},
		{"field number past 2^29-1", body(0x80, 0x80, 0x80, 0x80, 0x10, 0x01)},
		{"a group", body(0x2b, 0x2c)},
		{"a tag without its key", withTag(0x12, 0x01, 'v')},
		{"a tag that does not parse", withTag(0xff)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := deaggregate(tc.data)
			require.True(t, errors.Is(err, errMalformedAggregate), "err = %v", err)
		})
	}
}

func FuzzDeaggregate(f *testing.F) {
	f.Add(aggregate([2]string{"k", "v"}))
	f.Add(aggregate([2]string{"a", "1"}, [2]string{"b", "2"}))
	f.Fuzz(func(t *testing.T, data []byte) {
		subs, err := deaggregate(data)
		if err == nil && len(subs) == 0 {
			t.Fatal("a valid aggregate with no records")
		}
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
	require.Equal(t, []any{aggSeq, int64(2)}, []any{l.Checkpoint, l.SubSequence}, "two user records of the aggregate handled (plain was %s)", before)
	require.NoError(t, got[3].Ack(ctx))
	require.NoError(t, sub.Commit(ctx))
	l = readLease(t, store, s.name, shard)
	require.Equal(t, []any{aggSeq, int64(0)}, []any{l.Checkpoint, l.SubSequence}, "the whole aggregate handled")
}
