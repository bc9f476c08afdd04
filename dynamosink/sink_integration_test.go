package dynamosink_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/dynamosink"
	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// fixture is a mark table and an effects table (key "id" S, a counter "n" per item) on the
// local DynamoDB server.
type fixture struct {
	db      *dynamodb.Client
	sink    *dynamosink.Sink
	marks   string
	effects string
}

func newFixture(t *testing.T, opts ...dynamosink.Option) *fixture {
	t.Helper()
	db := testenv.DynamoDB(t)
	ctx := context.Background()
	marks, effects := testenv.Name(t)+"-marks", testenv.Name(t)+"-effects"
	require.NoError(t, dynamosink.CreateTable(ctx, db, marks))
	require.NoError(t, dynamosink.CreateTable(ctx, db, marks), "CreateTable of an existing table")
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(effects),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	require.NoError(t, err)
	// Writes to a table still being created are refused as to a missing one.
	require.NoError(t, dynamodb.NewTableExistsWaiter(db, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 100*time.Millisecond, 2*time.Second // the SDK's default waits 20s at first
	}).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(effects)}, time.Minute))
	t.Cleanup(func() {
		for _, tb := range []string{marks, effects} {
			_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(tb)})
		}
	})
	sink, err := dynamosink.New(db, marks, opts...)
	require.NoError(t, err)
	return &fixture{db: db, sink: sink, marks: marks, effects: effects}
}

// add is an effect: n of item id goes up by one (and records the record that did it).
func (f *fixture) add(id, by string) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                aws.String(f.effects),
		Key:                      map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}},
		UpdateExpression:         aws.String("ADD n :one SET #by = :by"),
		ExpressionAttributeNames: map[string]string{"#by": "by"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":one": &types.AttributeValueMemberN{Value: "1"},
			":by":  &types.AttributeValueMemberS{Value: by},
		},
	}}
}

// count returns n of item id and the record that last added to it.
func (f *fixture) count(t *testing.T, id string) (int, string) {
	t.Helper()
	out, err := f.db.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(f.effects), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}},
	})
	require.NoError(t, err)
	if out.Item == nil {
		return 0, ""
	}
	n, err := strconv.Atoi(out.Item["n"].(*types.AttributeValueMemberN).Value)
	require.NoError(t, err)
	return n, out.Item["by"].(*types.AttributeValueMemberS).Value
}

const shard0, shard1 = "shardId-000000000000", "shardId-000000000001"

var holdA = lease.Tenure{Owner: "a#00000001", Counter: 3}

func rec(key, shard, seq string, sub int, t lease.Tenure) dynamosink.Mark {
	return dynamosink.Mark{Key: key, Shard: shard, Sequence: seq, SubSequence: sub, Tenure: t}
}

func TestApplyReplayChangesNothing(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	r := rec("k", shard0, "49500", 0, holdA)
	require.NoError(t, f.sink.ApplyMark(ctx, r, f.add("k", "49500")))
	before, ok, err := f.sink.Read(ctx, shard0, "k")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, r, before)

	// The same record again, as after a crash before its checkpoint: and by a later holder.
	later := lease.Tenure{Owner: "b#00000002", Counter: 4}
	for _, again := range []dynamosink.Mark{r, rec("k", shard0, "49500", 0, later)} {
		err := f.sink.ApplyMark(ctx, again, f.add("k", "replay"))
		require.ErrorIs(t, err, dynamosink.ErrReplay)
	}
	n, by := f.count(t, "k")
	assert.Equal(t, 1, n, "effect applied once")
	assert.Equal(t, "49500", by)
	after, _, err := f.sink.Read(ctx, shard0, "k")
	require.NoError(t, err)
	assert.Equal(t, before, after, "a replay leaves the mark as it was")

	_, ok, err = f.sink.Read(ctx, shard0, "other")
	require.NoError(t, err)
	assert.False(t, ok, "no mark for a key never applied")
}

func TestApplyRefusesOlderRecord(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	require.NoError(t, f.sink.ApplyMark(ctx, rec("k", shard0, "200", 0, holdA), f.add("k", "200")))
	// 150 comes after 200: it is below the mark, so it was applied before 200 was (or must not be now).
	for _, seq := range []string{"150", "99", "200"} {
		err := f.sink.ApplyMark(ctx, rec("k", shard0, seq, 0, holdA), f.add("k", seq))
		require.ErrorIs(t, err, dynamosink.ErrReplay, "record %s after 200", seq)
	}
	require.NoError(t, f.sink.ApplyMark(ctx, rec("k", shard0, "1000", 0, holdA), f.add("k", "1000")),
		"a longer sequence number is a later record")
	n, by := f.count(t, "k")
	assert.Equal(t, 2, n)
	assert.Equal(t, "1000", by)
}

func TestApplyRefusesSupersededTenure(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	old := lease.Tenure{Owner: "a#00000001", Counter: 3}
	thief := lease.Tenure{Owner: "b#00000002", Counter: 4}
	in := func(m dynamosink.Mark, leases string) dynamosink.Mark { m.Leases = leases; return m }
	require.NoError(t, f.sink.ApplyMark(ctx, in(rec("k", shard0, "100", 0, old), "L"), f.add("k", "100")))
	// The shard moved to b, which applied 110; a, paused past its lease, resumes with 120.
	require.NoError(t, f.sink.ApplyMark(ctx, in(rec("k", shard0, "110", 0, thief), "L"), f.add("k", "110")))
	err := f.sink.ApplyMark(ctx, in(rec("k", shard0, "120", 0, old), "L"), f.add("k", "120 by a"))
	require.ErrorIs(t, err, dynamosink.ErrSuperseded)
	require.False(t, dynamosink.Permanent(err), "a lost holding ends when its holder notices")
	var se *dynamosink.SupersededError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, dynamosink.SupersededError{Key: "k", Shard: shard0, Mark: thief, Yours: old}, *se)
	n, by := f.count(t, "k")
	assert.Equal(t, 2, n, "the superseded holder wrote nothing")
	assert.Equal(t, "110", by)

	// The later holder goes on; a still older record from a is a replay (nothing to refuse).
	require.NoError(t, f.sink.ApplyMark(ctx, in(rec("k", shard0, "120", 0, thief), "L"), f.add("k", "120")))
	require.ErrorIs(t, f.sink.ApplyMark(ctx, in(rec("k", shard0, "105", 0, old), "L"), f.add("k", "105")), dynamosink.ErrReplay)

	// Holdings and positions of different shards are not compared: the key's records in another
	// shard (a child after a split, or an explicit hash key) have their own mark, whatever
	// their sequence numbers and lease counters.
	other := lease.Tenure{Owner: "a#00000001", Counter: 1}
	require.NoError(t, f.sink.ApplyMark(ctx, in(rec("k", shard1, "50", 0, other), "L"), f.add("k", "50 of shard 1")))
	n, by = f.count(t, "k")
	assert.Equal(t, 4, n)
	assert.Equal(t, "50 of shard 1", by)

	// Counters of another lease table, or of none, are not compared either: a new lease table
	// restarts them.
	require.NoError(t, f.sink.ApplyMark(ctx, in(rec("k", shard0, "130", 0, old), "L2"), f.add("k", "130 by a, new leases")))
	require.NoError(t, f.sink.ApplyMark(ctx, in(rec("k", shard0, "140", 0, lease.Tenure{Owner: "c", Counter: 1}), ""), f.add("k", "140")))
	n, _ = f.count(t, "k")
	assert.Equal(t, 6, n)
}

func TestApplySubSequenceOrder(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const agg = "49590338271490256608559692538361571095921575989136588898"
	// The user records of one KPL aggregate share its sequence number.
	for sub := range 3 {
		require.NoError(t, f.sink.ApplyMark(ctx, rec("k", shard0, agg, sub, holdA), f.add("k", strconv.Itoa(sub))), "sub %d", sub)
	}
	for _, sub := range []int{0, 1, 2} {
		require.ErrorIs(t, f.sink.ApplyMark(ctx, rec("k", shard0, agg, sub, holdA), f.add("k", "again")), dynamosink.ErrReplay, "sub %d again", sub)
	}
	// A rewind into the aggregate (AtSubSequence) redelivers from sub 1: replays, then new.
	require.ErrorIs(t, f.sink.ApplyMark(ctx, rec("k", shard0, agg, 1, holdA), f.add("k", "1")), dynamosink.ErrReplay)
	require.NoError(t, f.sink.ApplyMark(ctx, rec("k", shard0, agg, 3, holdA), f.add("k", "3")))
	require.NoError(t, f.sink.ApplyMark(ctx, rec("k", shard0, "49590338271490256608559692540925702759324208523137515618", 0, holdA), f.add("k", "next")))
	n, by := f.count(t, "k")
	assert.Equal(t, 5, n)
	assert.Equal(t, "next", by)
}

func TestApplyEffectConditionFails(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	never := f.add("k", "1")
	never.Update.ConditionExpression = aws.String("attribute_exists(n)") // the item does not exist
	err := f.sink.ApplyMark(ctx, rec("k", shard0, "100", 0, holdA), never)
	require.ErrorIs(t, err, dynamosink.ErrEffectCondition)
	require.NotErrorIs(t, err, dynamosink.ErrReplay)
	_, ok, err := f.sink.Read(ctx, shard0, "k")
	require.NoError(t, err)
	assert.False(t, ok, "the mark did not move")
	// The record is not lost: once its condition holds it applies.
	require.NoError(t, f.sink.ApplyMark(ctx, rec("k", shard0, "100", 0, holdA), f.add("k", "100")))
	n, _ := f.count(t, "k")
	assert.Equal(t, 1, n)
}

// Instances apply the same records at the same instant (a shard mid-handover): DynamoDB
// cancels transactions that meet on an item (TransactionConflict), which Apply answers as an
// error worth another try; tried again, each record is applied once and the others learn it
// was a replay. Writers go on until they have met at least one conflict.
func TestApplyConcurrentSameRecord(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const tries, batch, maxRecords = 4, 20, 2000
	var mu sync.Mutex
	applied := map[string]int{}
	conflicts, records := 0, 0
	for conflicts == 0 && records < maxRecords {
		var wg sync.WaitGroup
		for w := range tries {
			wg.Go(func() {
				for i := range batch {
					seq := strconv.Itoa(1000 + records + i)
					for {
						err := f.sink.ApplyMark(ctx, rec("k", shard0, seq, 0, holdA), f.add("k", seq))
						var tce *types.TransactionCanceledException
						if errors.As(err, &tce) && !dynamosink.Permanent(err) && !errors.Is(err, dynamosink.ErrReplay) {
							assert.Contains(t, err.Error(), "TransactionConflict")
							mu.Lock()
							conflicts++
							mu.Unlock()
							continue
						}
						if err != nil && !errors.Is(err, dynamosink.ErrReplay) {
							t.Errorf("try %d of %s: %v", w, seq, err)
						}
						if err == nil {
							mu.Lock()
							applied[seq]++
							mu.Unlock()
						}
						break
					}
				}
			})
		}
		wg.Wait()
		records += batch
	}
	require.Positive(t, conflicts, "no transaction conflict met in %d records", records)
	t.Logf("%d records, %d conflicts", records, conflicts)
	n, _ := f.count(t, "k")
	assert.Equal(t, records, n, "each record's effect once")
	assert.Len(t, applied, records)
	for seq, c := range applied {
		assert.Equal(t, 1, c, "record %s applied %d times", seq, c)
	}
}

func TestKeyPrefixKeepsSinksApart(t *testing.T) {
	f := newFixture(t, dynamosink.WithKeyPrefix("orders/"))
	ctx := context.Background()
	other, err := dynamosink.New(f.db, f.marks, dynamosink.WithKeyPrefix("billing/"))
	require.NoError(t, err)
	require.NoError(t, f.sink.ApplyMark(ctx, rec("k", shard0, "100", 0, holdA)))
	require.NoError(t, other.ApplyMark(ctx, rec("k", shard0, "100", 0, holdA)), "same key, other prefix")
	require.ErrorIs(t, other.ApplyMark(ctx, rec("k", shard0, "100", 0, holdA)), dynamosink.ErrReplay)
}
