package kinesub

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/kpl"
	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// userRecord is one user record for the reference aggregator.
type userRecord struct {
	PartitionKey    string `json:"partitionKey"`
	ExplicitHashKey string `json:"explicitHashKey,omitempty"`
	Data            []byte `json:"data"` // base64 in JSON, as the script reads it
}

// kplRecord is one Kinesis record the reference aggregator made: a KPL aggregate.
type kplRecord struct {
	PartitionKey    string `json:"partitionKey"`
	ExplicitHashKey string `json:"explicitHashKey"`
	Data            string `json:"data"`
}

// kplAggregate aggregates each group of user records into one record with the Node.js
// reference aggregator (aws-kinesis-agg, pinned in testenv), which scripts/emulators.sh
// installs beside the emulators.
func kplAggregate(t *testing.T, groups ...[]userRecord) []kplRecord {
	t.Helper()
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node is needed to run the reference KPL aggregator")
	dir, err := filepath.Abs("testenv")
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "aws-kinesis-agg")); err != nil {
		t.Fatalf("aws-kinesis-agg is not installed in %s: run scripts/emulators.sh up (or make test): %v", dir, err)
	}
	in, err := json.Marshal(groups)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "aggregate.js")
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "aggregate.js: %s", stderr.String())
	var recs []kplRecord
	require.NoError(t, json.Unmarshal(out, &recs))
	require.Len(t, recs, len(groups))
	return recs
}

// putKPL writes an aggregate as the KPL would and returns its sequence number.
func (s *stream) putKPL(r kplRecord, corrupt bool) string {
	s.t.Helper()
	data, err := base64.StdEncoding.DecodeString(r.Data)
	require.NoError(s.t, err)
	require.True(s.t, kpl.IsAggregated(data), "the aggregator wrote no KPL magic")
	if corrupt {
		data[len(data)-1] ^= 0xFF // the last byte of the MD5 checksum
	}
	in := &kinesis.PutRecordInput{StreamName: aws.String(s.name), PartitionKey: aws.String(r.PartitionKey), Data: data}
	if r.ExplicitHashKey != "" {
		in.ExplicitHashKey = aws.String(r.ExplicitHashKey)
	}
	out, err := s.c.PutRecord(context.Background(), in)
	require.NoError(s.t, err)
	return aws.ToString(out.SequenceNumber)
}

// users returns n user records "<prefix><i>" over a few partition keys, every other one with an
// explicit hash key.
func users(prefix string, n int) []userRecord {
	recs := make([]userRecord, n)
	for i := range recs {
		recs[i] = userRecord{PartitionKey: fmt.Sprintf("key-%d", i%3), Data: fmt.Appendf(nil, "%s%d", prefix, i)}
		if i%2 == 1 {
			recs[i].ExplicitHashKey = fmt.Sprint(uint64(i) * 1_000_000_007)
		}
	}
	return recs
}

// TestKPLSubSequenceCheckpoints: with aggregates made by the reference KPL aggregator, a
// subscription closed after acking 4 of an aggregate's 10 user records resumes at the fifth;
// the checkpoint in DynamoDB says so; Seek to a user record's Position delivers it and what
// follows; an aggregate with a corrupted checksum is reported on Errors and skipped, and
// nothing else is lost.
func TestKPLSubSequenceCheckpoints(t *testing.T) {
	s := newStream(t, 1)
	aggs := kplAggregate(t, users("a", 10), users("bad", 3), users("c", 3))
	seqA := s.putKPL(aggs[0], false)
	seqBad := s.putKPL(aggs[1], true)
	s.putKPL(aggs[2], false)
	seqP := s.put("plain", []byte("p"))

	store := lease.NewDynamoDB(testenv.DynamoDB(t), testenv.Name(t))
	require.NoError(t, store.EnsureTable(context.Background()))
	opts := testOpts(store, WithInitialPosition(Horizon()))

	first, err := Subscribe(context.Background(), s.c, s.name, opts...)
	require.NoError(t, err)
	got := recv(t, first, 4, true)
	require.Equal(t, []string{"a0", "a1", "a2", "a3"}, payloads(got))
	for i, m := range got {
		require.Equal(t, seqA, m.SequenceNumber())
		require.Equal(t, i, m.SubSequenceNumber())
		require.Equal(t, fmt.Sprintf("key-%d", i%3), m.PartitionKey())
	}
	shard := got[0].ShardID()
	require.NoError(t, first.Commit(context.Background()))
	var st ShardStatus
	for _, x := range first.Shards() {
		if x.ShardID == shard {
			st = x
		}
	}
	require.Equal(t, []any{seqA, 4}, []any{st.LastCheckpoint, st.LastCheckpointSubSequence}, "Shards shows the sub-sequence written")
	closeCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, first.Close(closeCtx))
	l := readLease(t, store, s.name, shard)
	require.Equal(t, seqA, l.Checkpoint.Sequence)
	require.Equal(t, int64(4), l.Checkpoint.SubSequence, "four user records of the aggregate handled")

	second := subscribeT(t, s, opts...)
	want := []string{"a4", "a5", "a6", "a7", "a8", "a9", "c0", "c1", "c2", "p"}
	got = recv(t, second, len(want), false)
	require.Equal(t, want, payloads(got), "resumed at the first unacknowledged user record")
	err = waitErr(t, second, ErrAggregatedRecord, 30*time.Second)
	require.Contains(t, err.Error(), seqBad)
	require.Equal(t, 4, got[0].SubSequenceNumber())
	a6 := got[2]
	require.Equal(t, AtSubSequence(shard, seqA, 6), a6.Position())
	require.Equal(t, fmt.Sprintf("sequence:%s:%s:6", shard, seqA), a6.Position().String())
	parsed, err := ParsePosition(a6.Position().String())
	require.NoError(t, err)
	require.Equal(t, a6.Position(), parsed)
	for _, m := range got {
		require.NoError(t, m.Ack(context.Background()))
	}
	require.NoError(t, second.Commit(context.Background()))
	l = readLease(t, store, s.name, shard)
	require.Equal(t, []any{seqP, int64(0)}, []any{l.Checkpoint.Sequence, l.Checkpoint.SubSequence})

	// Seek to a user record inside the aggregate: it and what follows, not the whole aggregate.
	require.NoError(t, second.Seeker().Seek(context.Background(), a6.Position()))
	got = recv(t, second, 7, true)
	require.Equal(t, []string{"a6", "a7", "a8", "a9", "c0", "c1", "c2"}, payloads(got))
	require.Equal(t, "p", payloads(recv(t, second, 1, true))[0])
	require.NoError(t, second.Commit(context.Background()))
	l = readLease(t, store, s.name, shard)
	require.Equal(t, []any{seqP, int64(0)}, []any{l.Checkpoint.Sequence, l.Checkpoint.SubSequence})
	none(t, second)
}

func TestSubSequencePositions(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Position
		str  string
	}{
		{"sequence:shardId-000000000000:12:3", AtSubSequence("shardId-000000000000", "12", 3), "sequence:shardId-000000000000:12:3"},
		{"sequence:s:12:0", AtSequence("s", "12"), "sequence:s:12"},
		{"sequence:s:12", AtSubSequence("s", "12", 0), "sequence:s:12"},
	} {
		got, err := ParsePosition(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
		require.Equal(t, tc.str, got.String(), tc.in)
	}
	for _, bad := range []string{"sequence:s:12:-1", "sequence:s:12:x", "sequence:s:12:3:4", "sequence:s:12:", "sequence:s:12:+3", "sequence:s::3"} {
		_, err := ParsePosition(bad)
		require.ErrorIs(t, err, ErrInvalidPosition, bad)
	}
	require.Equal(t, AtSequence("s", "1"), AtSubSequence("s", "1", -2), "a negative sub-sequence counts as 0")

	ref := streamRef{name: "orders"}
	for _, tc := range []struct {
		p    Position
		want string
	}{
		{AtSubSequence("s", "12", 3), "AT_SEQUENCE_NUMBER"},
		{Position{kind: posAfter, sequence: "12"}, "AFTER_SEQUENCE_NUMBER"},
		{Position{kind: posAfter, sequence: "12", sub: 3}, "AT_SEQUENCE_NUMBER"}, // inside an aggregate
	} {
		in := tc.p.iteratorInput(ref, "s")
		require.Equal(t, tc.want, string(in.ShardIteratorType), tc.p.String())
		require.Equal(t, "12", aws.ToString(in.StartingSequenceNumber))
	}
}

// TestKPLOutsideShardRangeDropped: after a split, aggregates made for the parent land in one
// child each with user records of both halves (by explicit hash key and by partition key).
// Only those in the child's hash-key range are delivered, both ends of the range included,
// each with its own sub-sequence number; the others are counted in kinesub.records.dropped
// and handled, so that the checkpoint moves past the aggregate, also when its last user
// record is one dropped.
func TestKPLOutsideShardRangeDropped(t *testing.T) {
	s := newStream(t, 1)
	mid := new(big.Int).Lsh(big.NewInt(1), 127)
	_, err := s.c.SplitShard(t.Context(), &kinesis.SplitShardInput{StreamName: aws.String(s.name),
		ShardToSplit: aws.String("shardId-000000000000"), NewStartingHashKey: aws.String(mid.String())})
	require.NoError(t, err)
	testenv.WaitActive(t, s.c, s.name)
	below, top := new(big.Int).Sub(mid, big.NewInt(1)).String(), new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1)).String()
	above := new(big.Int).Add(mid, big.NewInt(1)).String()
	// MD5 puts partition key "a" in the lower half, "b" in the upper.
	upper := []userRecord{
		{PartitionKey: "u", ExplicitHashKey: above, Data: []byte("in-up-1")},
		{PartitionKey: "l", ExplicitHashKey: "5000000000", Data: []byte("out-up-1")},
		{PartitionKey: "b", Data: []byte("in-up-2")},
		{PartitionKey: "a", Data: []byte("out-up-2")},
		{PartitionKey: "start", ExplicitHashKey: mid.String(), Data: []byte("in-up-3")},
		{PartitionKey: "below", ExplicitHashKey: below, Data: []byte("out-up-3")},
		{PartitionKey: "top", ExplicitHashKey: top, Data: []byte("in-up-4")},
	}
	lower := []userRecord{
		{PartitionKey: "end", ExplicitHashKey: below, Data: []byte("in-low-1")},
		{PartitionKey: "a", Data: []byte("in-low-2")},
		{PartitionKey: "start", ExplicitHashKey: mid.String(), Data: []byte("out-low-1")},
	}
	aggs := kplAggregate(t, upper, lower)
	aggs[0].ExplicitHashKey, aggs[1].ExplicitHashKey = above, "0"
	seqUp := s.putKPL(aggs[0], false)
	seqLow := s.putKPL(aggs[1], false)
	endUp, endLow := s.put("b", []byte("end-up")), s.put("a", []byte("end-low"))

	store := lease.NewMemory()
	mt := newMeters(t)
	sub := subscribeT(t, s, testOpts(store, WithStartAt(Horizon()), WithMeterProvider(mt.provider))...)
	byShard := map[string][]string{}
	subSeq := map[string]int{}
	shardOf := map[string]string{}
	deadline := time.After(time.Minute)
	for shardOf["end-up"] == "" || shardOf["end-low"] == "" {
		select {
		case m, ok := <-sub.Messages():
			require.True(t, ok, "Messages closed: %v", sub.Err())
			require.NoError(t, m.Ack(t.Context()))
			byShard[m.ShardID()] = append(byShard[m.ShardID()], string(m.Data()))
			subSeq[string(m.Data())], shardOf[string(m.Data())] = m.SubSequenceNumber(), m.ShardID()
		case <-deadline:
			t.Fatalf("the closing records were not delivered within a minute; got %v", byShard)
		}
	}
	up, low := shardOf["end-up"], shardOf["end-low"]
	require.Equal(t, []string{"in-up-1", "in-up-2", "in-up-3", "in-up-4", "end-up"}, byShard[up])
	require.Equal(t, []string{"in-low-1", "in-low-2", "end-low"}, byShard[low])
	require.Equal(t, map[string]int{"in-up-1": 0, "in-up-2": 2, "in-up-3": 4, "in-up-4": 6, "in-low-1": 0, "in-low-2": 1, "end-up": 0, "end-low": 0}, subSeq,
		"sub-sequence numbers are positions in the aggregate, dropped user records included")
	require.Equal(t, map[string]float64{up: 3, low: 1}, mt.byShard("kinesub.records.dropped", "kinesub.reason", "outside_hash_key_range"))

	require.NoError(t, sub.Commit(t.Context()))
	for shard, end := range map[string]string{up: endUp, low: endLow} {
		l := readLease(t, store, s.name, shard)
		require.Equal(t, []any{end, int64(0)}, []any{l.Checkpoint.Sequence, l.Checkpoint.SubSequence}, "checkpoint of %s (aggregates %s, %s)", shard, seqUp, seqLow)
	}
	none(t, sub)
}

// TestPublishAggregatedKeyAcrossShards: records of one partition key whose explicit hash keys
// place them in two shards are aggregated per shard, never together: a reader drops a user
// record stored outside its shard's range, so an aggregate of both would lose half of them.
// Every record is delivered, each from the shard its hash key names.
func TestPublishAggregatedKeyAcrossShards(t *testing.T) {
	s := newStream(t, 2)
	mid := new(big.Int).Lsh(big.NewInt(1), 127)
	low, high := "1", new(big.Int).Add(mid, big.NewInt(1)).String()
	p, err := NewPublisher(s.c, s.name, WithPublishAggregation(true))
	require.NoError(t, err)
	var recs []Record
	want := map[string]bool{}
	for i := range 40 {
		r := Record{PartitionKey: "k", ExplicitHashKey: low, Data: fmt.Appendf(nil, "k/%d", i)}
		if i%2 == 1 {
			r.ExplicitHashKey = high
		}
		recs = append(recs, r, Record{PartitionKey: "j", Data: fmt.Appendf(nil, "j/%d", i)})
		want[fmt.Sprintf("k/%d", i)], want[fmt.Sprintf("j/%d", i)] = true, true
	}
	require.NoError(t, p.PublishBatch(t.Context(), recs))
	require.NoError(t, p.PublishBatch(t.Context(), []Record{
		{PartitionKey: "end-low", ExplicitHashKey: "0", Data: []byte("end-low")},
		{PartitionKey: "end-high", ExplicitHashKey: new(big.Int).Sub(new(big.Int).Lsh(mid, 1), big.NewInt(1)).String(), Data: []byte("end-high")},
	}))

	sub := subscribeT(t, s, testOpts(lease.NewMemory(), WithStartAt(Horizon()))...)
	got := map[string]bool{}
	shardOf := map[string]string{}
	deadline := time.After(time.Minute)
	for shardOf["end-low"] == "" || shardOf["end-high"] == "" {
		select {
		case m, ok := <-sub.Messages():
			require.True(t, ok, "Messages closed: %v", sub.Err())
			require.NoError(t, m.Ack(t.Context()))
			got[string(m.Data())], shardOf[string(m.Data())] = true, m.ShardID()
		case <-deadline:
			t.Fatalf("the closing records were not delivered within a minute; got %d records", len(got))
		}
	}
	delete(got, "end-low")
	delete(got, "end-high")
	require.Equal(t, want, got)
	for i := range 40 {
		end := "end-low"
		if i%2 == 1 {
			end = "end-high"
		}
		require.Equal(t, shardOf[end], shardOf[fmt.Sprintf("k/%d", i)], "k/%d", i)
	}
}
