package kinesub

import (
	"math/big"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/testenv"
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
	m, err := p.shards.current(t.Context())
	require.NoError(t, err)
	require.Len(t, m.spans, 4)

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
		_, h, err := prepareRecord(r.PartitionKey, r.ExplicitHashKey, r.Data, nil)
		require.NoError(t, err)
		in := &kinesis.PutRecordInput{StreamName: aws.String(name), PartitionKey: aws.String(r.PartitionKey), Data: r.Data}
		if r.ExplicitHashKey != "" {
			in.ExplicitHashKey = aws.String(r.ExplicitHashKey)
		}
		out, err := c.PutRecord(t.Context(), in)
		require.NoError(t, err)
		require.Equal(t, aws.ToString(out.ShardId), m.find(h), "key %q, explicit hash key %q", r.PartitionKey, r.ExplicitHashKey)
		perShard[aws.ToString(out.ShardId)]++
	}
	require.Len(t, perShard, 4, "the records did not reach every shard")
	require.NoError(t, p.PublishBatch(t.Context(), recs))
	require.Zero(t, p.shards.mispredicted.Load())
}
