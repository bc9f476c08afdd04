package kinesub

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/gostream/kinesub/internal/envelope"
	"maps"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/kpl"
	"github.com/gostream/kinesub/internal/publish"
	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// Integration tests of the Publisher against the test server (kinesalite, or kinesistest under
// KINESUB_KINESIS_BACKEND=kinesistest).

// unevenStream creates a stream of three shards and splits the second a third of the way into
// its range, so that the open shards' ranges are uneven, and returns the open shards.
func unevenStream(t *testing.T, c *kinesis.Client, name string) []types.Shard {
	t.Helper()
	testenv.CreateStream(t, c, name, 3)
	out, err := c.ListShards(t.Context(), &kinesis.ListShardsInput{StreamName: aws.String(name)})
	require.NoError(t, err)
	r := out.Shards[1].HashKeyRange
	start, _ := new(big.Int).SetString(aws.ToString(r.StartingHashKey), 10)
	end, _ := new(big.Int).SetString(aws.ToString(r.EndingHashKey), 10)
	at := new(big.Int).Add(start, new(big.Int).Div(new(big.Int).Sub(end, start), big.NewInt(3)))
	_, err = c.SplitShard(t.Context(), &kinesis.SplitShardInput{StreamName: aws.String(name), ShardToSplit: out.Shards[1].ShardId, NewStartingHashKey: aws.String(at.String())})
	require.NoError(t, err)
	testenv.WaitActive(t, c, name)
	out, err = c.ListShards(t.Context(), &kinesis.ListShardsInput{StreamName: aws.String(name)})
	require.NoError(t, err)
	var open []types.Shard
	for _, s := range out.Shards {
		if s.SequenceNumberRange.EndingSequenceNumber == nil {
			open = append(open, s)
		}
	}
	require.Len(t, open, 4)
	return open
}

// TestPublishPredictsShards: the shard the publisher predicts for a record is the one the
// server reports writing it to (PutRecord's ShardId), for partition keys and for explicit hash
// keys at both ends of every open shard's range, on a stream whose ranges are uneven after a
// split; and a PublishBatch of such records is written with no prediction missed.
func TestPublishPredictsShards(t *testing.T) {
	c := testenv.Kinesis(t)
	name := testenv.Name(t)
	open := unevenStream(t, c, name)
	p, err := NewPublisher(c, name)
	require.NoError(t, err)
	m, err := p.shards.Current(t.Context())
	require.NoError(t, err)
	require.Equal(t, 4, m.Len())

	var recs []Record
	for i := range 200 {
		recs = append(recs, Record{PartitionKey: "key-" + strconv.Itoa(i), Data: []byte("x")})
	}
	for _, s := range open {
		for _, h := range []string{aws.ToString(s.HashKeyRange.StartingHashKey), aws.ToString(s.HashKeyRange.EndingHashKey)} {
			recs = append(recs, Record{PartitionKey: "k", ExplicitHashKey: h, Data: []byte("x")})
		}
	}
	perShard := map[string]int{}
	for _, r := range recs {
		_, h, err := publish.Prepare(r.PartitionKey, r.ExplicitHashKey, r.Data, nil)
		require.NoError(t, err)
		in := &kinesis.PutRecordInput{StreamName: aws.String(name), PartitionKey: aws.String(r.PartitionKey), Data: r.Data}
		if r.ExplicitHashKey != "" {
			in.ExplicitHashKey = aws.String(r.ExplicitHashKey)
		}
		out, err := c.PutRecord(t.Context(), in)
		require.NoError(t, err)
		require.Equal(t, aws.ToString(out.ShardId), m.Find(h), "key %q, explicit hash key %q", r.PartitionKey, r.ExplicitHashKey)
		perShard[aws.ToString(out.ShardId)]++
	}
	require.Len(t, perShard, 4, "the records did not reach every shard")
	require.NoError(t, p.PublishBatch(t.Context(), recs))
	require.Zero(t, p.shards.Mispredicted())
}

// kplUser is one user record as the reference deaggregator (testenv/deaggregate.js) reads it.
type kplUser struct {
	PartitionKey      string `json:"partitionKey"`
	ExplicitHashKey   string `json:"explicitHashKey"`
	SubSequenceNumber int    `json:"subSequenceNumber"` // -1 for a record that is not an aggregate
	Data              []byte `json:"data"`
}

// referenceDeaggregate reads records with the Node.js reference deaggregator (aws-kinesis-agg,
// pinned in testenv), checksums verified, and returns each record's user records.
func referenceDeaggregate(t *testing.T, recs []types.Record) [][]kplUser {
	t.Helper()
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node is needed to run the reference KPL deaggregator")
	dir, err := filepath.Abs("testenv")
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "aws-kinesis-agg")); err != nil {
		t.Fatalf("aws-kinesis-agg is not installed in %s: run scripts/emulators.sh up (or make test): %v", dir, err)
	}
	type in struct {
		PartitionKey   string `json:"partitionKey"`
		SequenceNumber string `json:"sequenceNumber"`
		Data           []byte `json:"data"`
	}
	var ins []in
	for _, r := range recs {
		ins = append(ins, in{aws.ToString(r.PartitionKey), aws.ToString(r.SequenceNumber), r.Data})
	}
	body, err := json.Marshal(ins)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "deaggregate.js")
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "deaggregate.js: %s", stderr.String())
	var users [][]kplUser
	require.NoError(t, json.Unmarshal(out, &users))
	require.Len(t, users, len(recs))
	return users
}

// aggregatedBatch is the small records TestPublishAggregated publishes, over many keys, some
// with headers and some with explicit hash keys.
func aggregatedBatch() []Record {
	var recs []Record
	for i := range 3000 {
		k := "key-" + strconv.Itoa(i%40)
		r := Record{PartitionKey: k, Data: []byte(k + "/" + strconv.Itoa(i/40))}
		if i%5 == 0 {
			r.Headers = map[string]string{"n": strconv.Itoa(i)}
		}
		if i%40 == 7 { // one key placed by explicit hash key, always the same
			r.ExplicitHashKey = "12345678901234567890123456789012345678"
		}
		recs = append(recs, r)
	}
	return recs
}

// bigBatch is two records that fill one aggregate to within a few bytes of 1 MiB (the second
// crosses the size at which an aggregate takes no more), and one too large for any aggregate.
func bigBatch() []Record {
	small := 200_000
	return []Record{
		{PartitionKey: "big", Data: append([]byte("big/0"), bytes.Repeat([]byte("a"), small-5)...)},
		{PartitionKey: "big", Data: append([]byte("big/1"), bytes.Repeat([]byte("b"), publish.MaxRecordBytes-200-small-5)...)},
		{PartitionKey: "huge", Data: append([]byte("huge/0"), bytes.Repeat([]byte("c"), publish.MaxRecordBytes-10)...)},
	}
}

// TestPublishAggregated: with aggregation, records are packed into aggregates of at most 1 MiB
// (data and partition key) that land on the shard each of their user records is predicted for;
// kinesub's deaggregator and the reference one (aws-kinesis-agg) read back every user record
// exactly: partition key, explicit hash key, data with its envelope, sub-sequence number, each
// key's records in order.
func TestPublishAggregated(t *testing.T) {
	c := testenv.Kinesis(t)
	name := testenv.Name(t)
	open := unevenStream(t, c, name)
	p, err := NewPublisher(c, name, WithPublishAggregation(true))
	require.NoError(t, err)
	sent := aggregatedBatch()
	require.NoError(t, p.PublishBatch(t.Context(), sent))
	require.NoError(t, p.PublishBatch(t.Context(), bigBatch()))
	sent = append(sent, bigBatch()...)
	require.Zero(t, p.shards.Mispredicted())

	want := map[string]Record{} // by payload
	for _, r := range sent {
		want[string(r.Data[:min(len(r.Data), 12)])] = r
	}
	ranges := map[string][2]kpl.HashKey{}
	for _, s := range open {
		a, _ := kpl.ParseHashKey(aws.ToString(s.HashKeyRange.StartingHashKey))
		b, _ := kpl.ParseHashKey(aws.ToString(s.HashKeyRange.EndingHashKey))
		ranges[aws.ToString(s.ShardId)] = [2]kpl.HashKey{a, b}
	}
	var all []types.Record
	shardOf := map[string]string{} // sequence number → shard
	aggregates, nearLimit := 0, false
	for _, s := range open {
		recs := readShard(t, c, name, aws.ToString(s.ShardId))
		for _, r := range recs {
			shardOf[aws.ToString(r.SequenceNumber)] = aws.ToString(s.ShardId)
			size := len(r.Data) + len(aws.ToString(r.PartitionKey))
			require.LessOrEqual(t, size, publish.MaxRecordBytes)
			if kpl.IsAggregated(r.Data) {
				aggregates++
				nearLimit = nearLimit || size > publish.MaxRecordBytes-300
			}
		}
		all = append(all, recs...)
	}
	require.Positive(t, aggregates)
	require.True(t, nearLimit, "no aggregate came within 300 bytes of 1 MiB")
	// By sequence number: each shard's records in the order stored.
	slices.SortFunc(all, func(a, b types.Record) int { return compareSeq(*a.SequenceNumber, *b.SequenceNumber) })
	ref := referenceDeaggregate(t, all)

	next := map[string]int{}
	seen := 0
	for i, r := range all {
		seqNo := aws.ToString(r.SequenceNumber)
		users := ref[i]
		var ours []kpl.Record
		if kpl.IsAggregated(r.Data) {
			ours, err = kpl.Deaggregate(r.Data)
			require.NoError(t, err)
		} else {
			ours = []kpl.Record{{PartitionKey: aws.ToString(r.PartitionKey), Data: r.Data}}
		}
		require.Len(t, users, len(ours), "record %s: kinesub and the reference read different numbers of user records", seqNo)
		for j, u := range users {
			require.Equal(t, ours[j].PartitionKey, u.PartitionKey)
			require.Equal(t, ours[j].Data, u.Data, "record %s, user record %d", seqNo, j)
			if kpl.IsAggregated(r.Data) {
				require.Equal(t, j, u.SubSequenceNumber)
			}
			headers, payload := envelope.Decode(u.Data)
			w, ok := want[string(payload[:min(len(payload), 12)])]
			require.True(t, ok, "record %s, user record %d: payload %.20q was not published", seqNo, j, payload)
			require.Equal(t, w.PartitionKey, u.PartitionKey)
			require.Equal(t, w.Data, payload)
			if len(w.Headers) == 0 {
				require.Empty(t, headers)
			} else {
				require.True(t, maps.Equal(w.Headers, headers), "headers %v, want %v", headers, w.Headers)
			}
			if kpl.IsAggregated(r.Data) {
				// The reference deaggregator reads a missing index as 0, so it reports the
				// table's first key for records without one: compare only those with one, and
				// read the index's absence from the protobuf itself.
				require.Equal(t, w.ExplicitHashKey, explicitHashKeys(t, r.Data)[j], "explicit hash key of %s", payload[:min(len(payload), 12)])
				if w.ExplicitHashKey != "" {
					require.Equal(t, w.ExplicitHashKey, u.ExplicitHashKey, "explicit hash key of %s", payload[:min(len(payload), 12)])
				}
			}
			// The user record lies in the range of the shard its aggregate landed on.
			_, h, err := publish.Prepare(w.PartitionKey, w.ExplicitHashKey, nil, nil)
			require.NoError(t, err)
			rg := ranges[shardOf[seqNo]]
			require.True(t, rg[0].Cmp(h) <= 0 && h.Cmp(rg[1]) <= 0, "user record %s stored on %s, outside its range", payload[:min(len(payload), 12)], shardOf[seqNo])
			// Each key's records in order.
			key, n := splitPayload(payload)
			require.Equal(t, next[key], n, "key %s: record %d after %d", key, n, next[key]-1)
			next[key]++
			seen++
		}
	}
	require.Equal(t, len(sent), seen, "user records read back")
}

// explicitHashKeys returns the explicit hash key of each user record of an aggregate, "" for
// those without an explicit_hash_key_index.
func explicitHashKeys(t *testing.T, data []byte) []string {
	t.Helper()
	var table, out []string
	var idx []int
	body := data[len(kpl.Magic) : len(data)-16]
	require.NoError(t, kpl.WalkFields(body, func(field, wire int, _ uint64, b []byte) error {
		switch field {
		case 2:
			table = append(table, string(b))
		case 3:
			i := -1
			err := kpl.WalkFields(b, func(field, wire int, v uint64, _ []byte) error {
				if field == 2 {
					i = int(v)
				}
				return nil
			})
			idx = append(idx, i)
			return err
		}
		return nil
	}))
	for _, i := range idx {
		if i < 0 {
			out = append(out, "")
		} else {
			out = append(out, table[i])
		}
	}
	return out
}

// compareSeq orders sequence numbers, decimal strings of up to 128 bits.
func compareSeq(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return bytes.Compare([]byte(a), []byte(b))
}

// splitPayload reads "<key>/<n>" at the start of a payload.
func splitPayload(p []byte) (string, int) {
	k, rest, _ := bytes.Cut(p, []byte("/"))
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(string(rest[:end]))
	return string(k), n
}

// readShard reads every record of one shard from its trim horizon.
func readShard(t *testing.T, c *kinesis.Client, stream, shard string) []types.Record {
	t.Helper()
	it, err := c.GetShardIterator(t.Context(), Horizon().iteratorInput(streamRef{name: stream}, shard))
	require.NoError(t, err)
	var all []types.Record
	for iter := it.ShardIterator; iter != nil; {
		out, err := c.GetRecords(t.Context(), &kinesis.GetRecordsInput{ShardIterator: iter})
		require.NoError(t, err)
		all = append(all, out.Records...)
		if len(out.Records) == 0 {
			break
		}
		iter = out.NextShardIterator
	}
	return all
}

// TestPublishAggregatedSubscribed: a kinesub subscriber receives what an aggregating publisher
// wrote as its user records, each with its own partition key, headers and sub-sequence number,
// each key's records in order.
func TestPublishAggregatedSubscribed(t *testing.T) {
	s := newStream(t, 2)
	p, err := NewPublisher(s.c, s.name, WithPublishAggregation(true))
	require.NoError(t, err)
	var recs []Record
	for i := range 600 {
		k := "key-" + strconv.Itoa(i%6)
		recs = append(recs, Record{PartitionKey: k, Data: []byte(k + "/" + strconv.Itoa(i/6)), Headers: map[string]string{"i": strconv.Itoa(i)}})
	}
	require.NoError(t, p.PublishBatch(t.Context(), recs))
	sub := subscribeT(t, s, testOpts(lease.NewMemory(), WithStartAt(Horizon()))...)
	var oc orderChecker
	subSeqs := map[string]bool{}
	for _, m := range recv(t, sub, len(recs), true) {
		oc.see(t, m)
		key, n := splitPayload(m.Data())
		require.Equal(t, strconv.Itoa(n*6+int(key[len(key)-1]-'0')), m.Headers()["i"])
		subSeqs[fmt.Sprint(m.SequenceNumber(), "/", m.SubSequenceNumber())] = true
	}
	require.Len(t, subSeqs, len(recs), "two user records share a sequence and sub-sequence number")
	require.Less(t, len(readAll(t, s.c, s.name)), 10, "the records were not aggregated")
}
