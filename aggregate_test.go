package kinesub

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/kpl"
	"github.com/gostream/kinesub/lease"
)

// The reader's side of KPL aggregates, through the subscriber; internal/kpl's tests hold the
// format itself.

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
