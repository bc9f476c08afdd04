package kinesub

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// TestImportCrateAggregates: ruststream-kinesis refuses KPL aggregates and checkpoints only whole
// records, with no sub-sequence. A table in its 0.7 format (stream:shard keys) and one in its
// 0.6 format (bare shard ids, read with legacy) resume after the record named: an aggregate
// before it is not delivered (the crate had passed it), one after it is, from its first user
// record. A 0.7 row with no checkpoint gives way to the 0.6 row, as in the crate. A lease whose
// expiry is still ahead refuses the import, naming its owner, unless forced.
func TestImportCrateAggregates(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	ctx := context.Background()
	aggs := kplAggregate(t, users("a", 3), users("b", 3))
	expired := strconv.FormatInt(time.Now().Add(-time.Minute).UnixMilli(), 10)

	for _, legacy := range []bool{false, true} {
		s := newStream(t, 1)
		shard := s.shardIDs()[0]
		s.put("k", []byte("p0"))
		s.putKPL(aggs[0], false)
		seqP1 := s.put("k", []byte("p1"))
		s.putKPL(aggs[1], false)
		s.put("k", []byte("p2"))

		crate := sourceTable(t, ddb, "lease_key", "")
		row := map[string]string{"lease_key": s.name + ":" + shard, "checkpoint": seqP1,
			"lease_owner": "crate-1", "lease_expiry": expired, "lease_counter": "12"}
		if legacy {
			row["lease_key"] = shard
			// The 0.7 crate's row of a shard it leased and never checkpointed.
			putItem(t, ddb, crate, map[string]string{"lease_key": s.name + ":" + shard,
				"lease_owner": "crate-2", "lease_expiry": expired, "lease_counter": "1"})
		}
		putItem(t, ddb, crate, row)
		putItem(t, ddb, crate, map[string]string{"lease_key": "other:" + shard, "checkpoint": "TRIM_HORIZON"})

		store := lease.NewDynamoDB(ddb, testenv.Name(t)+"-"+strconv.FormatBool(legacy))
		require.NoError(t, store.EnsureTable(ctx))
		t.Cleanup(func() {
			_, _ = ddb.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(store.Table())})
		})
		rep, err := lease.NewImporter().Crate(ctx, ddb, crate, s.name, legacy, store)
		require.NoError(t, err, "legacy %v", legacy)
		require.Equal(t, 1, rep.Imported, "legacy %v", legacy)
		require.Equal(t, []lease.ImportedShard{{Shard: shard, From: seqP1, Checkpoint: lease.Checkpoint{Sequence: seqP1}, Action: "import"}},
			rep.Shards, "legacy %v: a whole record, no sub-sequence", legacy)

		sub := subscribeT(t, s, testOpts(store)...)
		require.Equal(t, []string{"b0", "b1", "b2", "p2"}, payloads(recv(t, sub, 4, true)), "legacy %v", legacy)
		none(t, sub)
	}

	// A crate instance still holding a lease.
	s := newStream(t, 1)
	shard := s.shardIDs()[0]
	seq := s.put("k", []byte("q0"))
	crate := sourceTable(t, ddb, "lease_key", "")
	putItem(t, ddb, crate, map[string]string{"lease_key": s.name + ":" + shard, "checkpoint": seq,
		"lease_owner": "crate-live", "lease_expiry": strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10), "lease_counter": "3"})
	store := kinesubTable(t, ddb)
	_, err := lease.NewImporter().Crate(ctx, ddb, crate, s.name, false, store)
	require.ErrorIs(t, err, lease.ErrImportRefused)
	require.ErrorContains(t, err, "crate-live")
	all, err := store.List(ctx)
	require.NoError(t, err)
	require.Empty(t, all)
	rep, err := lease.NewImporter(lease.WithForce()).Crate(ctx, ddb, crate, s.name, false, store)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Imported)
}
