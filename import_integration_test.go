package kinesub

import (
	"context"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// sourceTable creates a DynamoDB table keyed as another consumer keys its checkpoints (hash, and
// range when not empty), deleted when the test ends.
func sourceTable(t *testing.T, c *dynamodb.Client, hash, rangeKey string) string {
	t.Helper()
	name := testenv.Name(t) + "-src"
	testenv.CreateTable(t, c, name, hash, rangeKey)
	return name
}

// numericAttrs are the attributes the source tables store as numbers.
var numericAttrs = map[string]bool{"leaseCounter": true, "checkpointSubSequenceNumber": true,
	"pendingCheckpointSubSequenceNumber": true, "lease_counter": true, "lease_expiry": true}

func putItem(t *testing.T, c *dynamodb.Client, table string, attrs map[string]string) {
	t.Helper()
	item := map[string]ddbtypes.AttributeValue{}
	for k, v := range attrs {
		if numericAttrs[k] {
			item[k] = &ddbtypes.AttributeValueMemberN{Value: v}
			continue
		}
		if k == "pendingCheckpointState" {
			item[k] = &ddbtypes.AttributeValueMemberB{Value: []byte(v)}
			continue
		}
		item[k] = &ddbtypes.AttributeValueMemberS{Value: v}
	}
	_, err := c.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item})
	require.NoError(t, err)
}

// kinesubTable is a fresh kinesub lease table.
func kinesubTable(t *testing.T, c *dynamodb.Client) *lease.DynamoDB {
	t.Helper()
	store := lease.NewDynamoDB(c, testenv.Name(t))
	require.NoError(t, store.EnsureTable(context.Background()))
	t.Cleanup(func() {
		_, _ = c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(store.Table())})
	})
	return store
}

// drainSorted receives n messages and returns their payloads sorted (for several shards).
func drainSorted(t *testing.T, sub *Subscriber, n int) []string {
	got := payloads(recv(t, sub, n, true))
	sort.Strings(got)
	return got
}

// TestImportKCL: a KCL lease table in multi-stream mode, with a checkpoint inside a KPL
// aggregate (with a pending checkpoint, reported and not imported), one on a plain record and
// rows of another stream; after the import a subscriber delivers exactly the records after
// each committed checkpoint, and a second import changes nothing.
func TestImportKCL(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	s := newStream(t, 1)
	shard := s.shardIDs()[0]
	s.put("k", []byte("p0"))
	aggs := kplAggregate(t, users("a", 5))
	seqA := s.putKPL(aggs[0], false)
	seqP1 := s.put("k", []byte("p1"))
	s.put("k", []byte("p2"))

	plain := newStream(t, 1)
	seqQ0 := plain.put("k", []byte("q0"))
	plain.put("k", []byte("q1"))

	kcl := sourceTable(t, ddb, "leaseKey", "")
	putItem(t, ddb, kcl, map[string]string{"leaseKey": "123456789012:" + s.name + ":1700000000:" + shard,
		"checkpoint": seqA, "checkpointSubSequenceNumber": "2", "leaseCounter": "7", "leaseOwner": "worker-1",
		// A checkpoint the application prepared and never committed: reported, not imported.
		"pendingCheckpoint": seqP1, "pendingCheckpointSubSequenceNumber": "0", "pendingCheckpointState": "app state"})
	putItem(t, ddb, kcl, map[string]string{"leaseKey": "123456789012:" + plain.name + ":1700000000:" + shard,
		"checkpoint": seqQ0, "checkpointSubSequenceNumber": "0", "leaseCounter": "3", "leaseOwner": "worker-2"})
	putItem(t, ddb, kcl, map[string]string{"leaseKey": "123456789012:elsewhere:1700000000:" + shard,
		"checkpoint": "TRIM_HORIZON", "leaseCounter": "1"})

	store := kinesubTable(t, ddb)
	ctx := context.Background()
	imp := lease.NewImporter(lease.WithWatch(0))

	rep, err := lease.NewImporter(lease.WithWatch(0), lease.WithDryRun()).KCL(ctx, ddb, kcl, s.name, store)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Imported)
	pending := []lease.PendingCheckpoint{{Shard: shard, Sequence: seqP1, State: true}}
	require.Equal(t, pending, rep.Pending, "a dry run reports the prepared checkpoint")
	all, err := store.List(ctx)
	require.NoError(t, err)
	require.Empty(t, all, "a dry run writes nothing")

	rep, err = imp.KCL(ctx, ddb, kcl, s.name, store)
	require.NoError(t, err)
	require.Equal(t, []int{3, 1, 2}, []int{rep.Rows, rep.Imported, rep.Skipped})
	require.Equal(t, pending, rep.Pending)
	rep, err = imp.KCL(ctx, ddb, kcl, plain.name, store)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Imported)
	require.Empty(t, rep.Pending)

	before, err := store.List(ctx)
	require.NoError(t, err)
	for _, l := range before {
		require.Empty(t, l.Owner, "%s: imported leases are free", l.Key)
		require.True(t, l.Expiry.IsZero(), "%s: imported leases carry no expiry", l.Key)
	}
	rep, err = imp.KCL(ctx, ddb, kcl, s.name, store)
	require.NoError(t, err)
	require.Equal(t, []int{0, 1}, []int{rep.Imported, rep.Unchanged})
	after, err := store.List(ctx)
	require.NoError(t, err)
	require.Equal(t, before, after, "importing twice changes nothing")

	sub := subscribeT(t, s, testOpts(store)...)
	require.Equal(t, []string{"a3", "a4", "p1", "p2"}, payloads(recv(t, sub, 4, true)),
		"resumed after user record 2 of the aggregate, the committed checkpoint, not after the pending one")
	none(t, sub)
	sub2 := subscribeT(t, plain, testOpts(store)...)
	require.Equal(t, []string{"q1"}, payloads(recv(t, sub2, 1, true)), "resumed after the plain record")
	none(t, sub2)

	// Imported again once kinesub has read on: its checkpoint is ahead, and kept.
	require.NoError(t, sub.Close(ctx))
	read, err := store.Read(ctx, lease.ShardLeaseKey(s.name, shard))
	require.NoError(t, err)
	rep, err = imp.KCL(ctx, ddb, kcl, s.name, store)
	require.NoError(t, err)
	require.Equal(t, []int{0, 1}, []int{rep.Imported, rep.Kept})
	require.Equal(t, []any{"keep", read.Checkpoint}, []any{rep.Shards[0].Action, rep.Shards[0].Current})
	again, err := store.Read(ctx, lease.ShardLeaseKey(s.name, shard))
	require.NoError(t, err)
	require.Equal(t, read.Checkpoint, again.Checkpoint, "kinesub's checkpoint is not moved back")
	sub3 := subscribeT(t, s, testOpts(store)...)
	s.put("k", []byte("p3"))
	require.Equal(t, []string{"p3"}, payloads(recv(t, sub3, 1, true)), "nothing delivered again")
}

// TestImportRefusesAtOnce: a stream the source table holds no rows of, a stream that does not
// exist and a destination table that does not exist are refused before the watch, with what
// the table holds; the watch says what it waits for.
func TestImportRefusesAtOnce(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	s := newStream(t, 1)
	shard := s.shardIDs()[0]
	multi := sourceTable(t, ddb, "leaseKey", "")
	putItem(t, ddb, multi, map[string]string{"leaseKey": "123456789012:" + s.name + ":1700000000:" + shard, "checkpoint": "TRIM_HORIZON", "leaseCounter": "1"})
	store := kinesubTable(t, ddb)
	// A watch of an hour: any refusal after it would fail the test's deadline instead.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	slow := lease.NewImporter(lease.WithWatch(time.Hour), lease.WithStreamCheck(s.c))

	_, err := lease.NewImporter(lease.WithWatch(time.Hour)).KCL(ctx, ddb, multi, s.name+"-typo", store)
	require.ErrorIs(t, err, lease.ErrImportRefused)
	require.ErrorContains(t, err, "holds no rows of stream "+s.name+"-typo; it holds the rows of streams "+s.name)

	single := testenv.Name(t) + "-single"
	testenv.CreateTable(t, ddb, single, "leaseKey", "")
	putItem(t, ddb, single, map[string]string{"leaseKey": shard, "checkpoint": "TRIM_HORIZON", "leaseCounter": "1"})
	_, err = slow.KCL(ctx, ddb, single, s.name+"-typo", store)
	require.ErrorIs(t, err, lease.ErrImportRefused)
	require.ErrorContains(t, err, "stream "+s.name+"-typo does not exist")

	_, err = slow.KCL(ctx, ddb, single, s.name, lease.NewDynamoDB(ddb, testenv.Name(t)+"-missing"))
	require.ErrorContains(t, err, "the destination store cannot be read")
	require.NoError(t, ctx.Err())

	harlow := sourceTable(t, ddb, "namespace", "shard_id")
	putItem(t, ddb, harlow, map[string]string{"namespace": "app-" + s.name, "shard_id": shard, "sequence_number": "1"})
	_, err = lease.NewImporter().Harlow(ctx, ddb, harlow, "app", s.name+"-typo", store)
	require.ErrorIs(t, err, lease.ErrImportRefused)
	require.ErrorContains(t, err, "app-"+s.name)
	crate := testenv.Name(t) + "-crate"
	testenv.CreateTable(t, ddb, crate, "lease_key", "")
	putItem(t, ddb, crate, map[string]string{"lease_key": s.name + ":" + shard, "checkpoint": "1"})
	_, err = lease.NewImporter().Crate(ctx, ddb, crate, s.name+"-typo", false, store)
	require.ErrorIs(t, err, lease.ErrImportRefused)
	require.ErrorContains(t, err, "it holds the rows of streams "+s.name)
	all, err := store.List(ctx)
	require.NoError(t, err)
	require.Empty(t, all, "nothing written")

	var progress strings.Builder
	_, err = lease.NewImporter(lease.WithWatch(time.Millisecond), lease.WithProgress(&progress)).KCL(ctx, ddb, single, s.name, store)
	require.NoError(t, err)
	require.Contains(t, progress.String(), "watching the lease counters of KCL table "+single+" for 1ms")
}

// TestImportKCLSentinels: SHARD_END on a split parent and TRIM_HORIZON on a child carry over:
// the parent's records are not read again, the children's are.
func TestImportKCLSentinels(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	s := newStream(t, 1)
	parent := s.shardIDs()[0]
	s.put("k", []byte("old"))
	s.splitShard(parent)
	testenv.WaitActive(t, s.c, s.name)
	mid := new(big.Int).Lsh(big.NewInt(1), 127)
	for i, h := range []string{"0", mid.String()} {
		_, err := s.c.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: aws.String(s.name),
			PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(h), Data: []byte("child" + strconv.Itoa(i))})
		require.NoError(t, err)
	}
	kcl := sourceTable(t, ddb, "leaseKey", "")
	putItem(t, ddb, kcl, map[string]string{"leaseKey": parent, "checkpoint": "SHARD_END", "leaseCounter": "9"})
	var children []string
	for _, id := range s.shardIDs() {
		if id != parent {
			children = append(children, id)
		}
	}
	require.Len(t, children, 2)
	putItem(t, ddb, kcl, map[string]string{"leaseKey": children[0], "checkpoint": "TRIM_HORIZON", "leaseCounter": "1"})
	putItem(t, ddb, kcl, map[string]string{"leaseKey": children[1], "checkpoint": "TRIM_HORIZON", "leaseCounter": "1"})

	store := kinesubTable(t, ddb)
	rep, err := lease.NewImporter(lease.WithWatch(0)).KCL(context.Background(), ddb, kcl, s.name, store)
	require.NoError(t, err)
	require.Equal(t, 3, rep.Imported)
	sub := subscribeT(t, s, testOpts(store)...)
	require.Equal(t, []string{"child0", "child1"}, drainSorted(t, sub, 2))
	none(t, sub)
}

// TestImportKCLLatest: a KCL shard opened at LATEST with nothing handled yet imports as the tip
// as of the import: a subscriber started later delivers what was published after the import
// (also before it opened the shard), not what came before.
func TestImportKCLLatest(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	s := newStream(t, 1)
	s.put("k", []byte("before"))
	// Arrival times are kept to the millisecond: the import's instant is a later one.
	for put := time.Now(); time.Now().UnixMilli() <= put.UnixMilli(); {
	}
	kcl := sourceTable(t, ddb, "leaseKey", "")
	putItem(t, ddb, kcl, map[string]string{"leaseKey": s.shardIDs()[0], "checkpoint": "LATEST", "leaseCounter": "2"})
	store := kinesubTable(t, ddb)
	rep, err := lease.NewImporter(lease.WithWatch(0)).KCL(context.Background(), ddb, kcl, s.name, store)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Imported)
	for imported := time.Now(); time.Now().UnixMilli() <= imported.UnixMilli(); {
	}
	s.put("k", []byte("after import"))
	sub := subscribeT(t, s, testOpts(store)...)
	s.put("k", []byte("after subscribe"))
	require.Equal(t, []string{"after import", "after subscribe"}, payloads(recv(t, sub, 2, true)))
	none(t, sub)
}

// TestImportKCLAtTimestamp: a KCL table whose rows are AT_TIMESTAMP on one shard and
// TRIM_HORIZON on the other. Without the instant the AT_TIMESTAMP row stands for, the import is
// refused and writes nothing, not even the other shard's row; with it, the first shard delivers
// what arrived from that instant on and the second everything.
func TestImportKCLAtTimestamp(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	ctx := context.Background()
	s := newStream(t, 2)
	ids := s.shardIDs()
	mid := new(big.Int).Lsh(big.NewInt(1), 127)
	put := func(hash, data string) {
		_, err := s.c.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(s.name),
			PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(hash), Data: []byte(data)})
		require.NoError(t, err)
	}
	put("0", "s0 before")
	put(mid.String(), "s1 before")
	// Arrival times are kept to the millisecond: the instant is a later one than "before"'s,
	// and "after" arrives later still.
	for p := time.Now(); time.Now().UnixMilli() <= p.UnixMilli(); {
	}
	at := time.Now()
	for time.Now().UnixMilli() <= at.UnixMilli() {
	}
	put("0", "s0 after")
	put(mid.String(), "s1 after")

	kcl := sourceTable(t, ddb, "leaseKey", "")
	putItem(t, ddb, kcl, map[string]string{"leaseKey": ids[0], "checkpoint": "AT_TIMESTAMP", "leaseCounter": "4"})
	putItem(t, ddb, kcl, map[string]string{"leaseKey": ids[1], "checkpoint": "TRIM_HORIZON", "leaseCounter": "4"})
	store := kinesubTable(t, ddb)

	_, err := lease.NewImporter(lease.WithWatch(0)).KCL(ctx, ddb, kcl, s.name, store)
	require.ErrorIs(t, err, lease.ErrImportRefused)
	require.ErrorContains(t, err, "WithAtTimestamp")
	all, err := store.List(ctx)
	require.NoError(t, err)
	require.Empty(t, all, "one row that cannot be translated: nothing imported")

	rep, err := lease.NewImporter(lease.WithWatch(0), lease.WithAtTimestamp(at)).KCL(ctx, ddb, kcl, s.name, store)
	require.NoError(t, err)
	require.Equal(t, 2, rep.Imported)
	sub := subscribeT(t, s, testOpts(store)...)
	require.Equal(t, []string{"s0 after", "s1 after", "s1 before"}, drainSorted(t, sub, 3))
	none(t, sub)
}

// TestImportKCLRefusesLiveWorkers: a lease counter that moves during the watch window refuses
// the import, naming the worker; WithForce goes ahead.
func TestImportKCLRefusesLiveWorkers(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	kcl := sourceTable(t, ddb, "leaseKey", "")
	putItem(t, ddb, kcl, map[string]string{"leaseKey": "shardId-000000000000", "checkpoint": "TRIM_HORIZON", "leaseCounter": "1", "leaseOwner": "worker-7"})
	store := kinesubTable(t, ddb)

	run := func(opts ...lease.ImportOption) (lease.ImportReport, error) {
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // a live worker renewing its lease until the import returns
			defer wg.Done()
			for n := 2; ; n++ {
				select {
				case <-done:
					return
				default:
				}
				// Errors are ignored here (not the test's goroutine): a missed renewal only
				// slows the worker down.
				_, _ = ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(kcl), Item: map[string]ddbtypes.AttributeValue{
					"leaseKey":     &ddbtypes.AttributeValueMemberS{Value: "shardId-000000000000"},
					"checkpoint":   &ddbtypes.AttributeValueMemberS{Value: "TRIM_HORIZON"},
					"leaseCounter": &ddbtypes.AttributeValueMemberN{Value: strconv.Itoa(n)},
					"leaseOwner":   &ddbtypes.AttributeValueMemberS{Value: "worker-7"},
				}})
			}
		}()
		defer wg.Wait()
		defer close(done)
		return lease.NewImporter(append(opts, lease.WithWatch(300*time.Millisecond))...).KCL(context.Background(), ddb, kcl, "orders", store)
	}
	_, err := run()
	require.ErrorIs(t, err, lease.ErrImportRefused)
	require.ErrorContains(t, err, "worker-7")
	all, err := store.List(context.Background())
	require.NoError(t, err)
	require.Empty(t, all)
	rep, err := run(lease.WithForce())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Imported)
}

// TestImportHarlowAndCrate: harlow's rows (namespace "<app>-<stream>", shard_id,
// sequence_number) and the Rust crate's (lease_key "<stream>:<shard>" in 0.7, the bare shard
// id in 0.6) resume after their checkpoints.
func TestImportHarlowAndCrate(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	ctx := context.Background()
	imp := lease.NewImporter()

	h := newStream(t, 1)
	shard := h.shardIDs()[0]
	seqH := h.put("k", []byte("h0"))
	h.put("k", []byte("h1"))
	harlow := sourceTable(t, ddb, "namespace", "shard_id")
	putItem(t, ddb, harlow, map[string]string{"namespace": "app-" + h.name, "shard_id": shard, "sequence_number": seqH})
	putItem(t, ddb, harlow, map[string]string{"namespace": "app-other", "shard_id": shard, "sequence_number": seqH})
	store := kinesubTable(t, ddb)
	rep, err := imp.Harlow(ctx, ddb, harlow, "app", h.name, store)
	require.NoError(t, err)
	require.Equal(t, []int{1, 1}, []int{rep.Imported, rep.Skipped})
	sub := subscribeT(t, h, testOpts(store)...)
	require.Equal(t, []string{"h1"}, payloads(recv(t, sub, 1, true)))
	none(t, sub)

	for _, legacy := range []bool{false, true} {
		c := newStream(t, 1)
		seqC := c.put("k", []byte("c0"))
		c.put("k", []byte("c1"))
		crate := sourceTable(t, ddb, "lease_key", "")
		key := c.name + ":" + shard
		if legacy {
			key = shard
		}
		putItem(t, ddb, crate, map[string]string{"lease_key": key, "checkpoint": seqC})
		putItem(t, ddb, crate, map[string]string{"lease_key": "other:" + shard, "checkpoint": seqC})
		store := lease.NewDynamoDB(ddb, testenv.Name(t)+"-"+strconv.FormatBool(legacy))
		require.NoError(t, store.EnsureTable(ctx))
		t.Cleanup(func() { _, _ = ddb.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(store.Table())}) })
		rep, err := imp.Crate(ctx, ddb, crate, c.name, legacy, store)
		require.NoError(t, err)
		require.Equal(t, 1, rep.Imported, "legacy %v", legacy)
		sub := subscribeT(t, c, testOpts(store)...)
		require.Equal(t, []string{"c1"}, payloads(recv(t, sub, 1, true)), "legacy %v", legacy)
		none(t, sub)
	}
}
