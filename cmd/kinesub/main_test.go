package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// TestImportKCLCommand runs import-kcl against dynalite: a dry run reports and writes nothing,
// the import writes a free lease after the checkpoint.
func TestImportKCLCommand(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	ctx := context.Background()
	src, dst := testenv.Name(t)+"-kcl", testenv.Name(t)
	orders := newStream(t, "orders")
	testenv.CreateTable(t, ddb, src, "leaseKey", "")
	t.Cleanup(func() {
		_, _ = ddb.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(dst)})
	})
	_, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(src), Item: map[string]types.AttributeValue{
		"leaseKey": &types.AttributeValueMemberS{Value: "shardId-000000000000"}, "checkpoint": &types.AttributeValueMemberS{Value: "49600"},
		"checkpointSubSequenceNumber": &types.AttributeValueMemberN{Value: "4"}, "leaseCounter": &types.AttributeValueMemberN{Value: "2"},
		"pendingCheckpoint": &types.AttributeValueMemberS{Value: "49700"}, "pendingCheckpointSubSequenceNumber": &types.AttributeValueMemberN{Value: "1"},
		"pendingCheckpointState": &types.AttributeValueMemberB{Value: []byte("state")},
	}})
	require.NoError(t, err)

	args := []string{"import-kcl", "-from", src, "-to", dst, "-stream", orders, "-watch", "0", "-json"}
	var out, errOut bytes.Buffer
	require.NoError(t, run(ctx, append(args, "-dry-run"), &out, &errOut), errOut.String())
	var rep lease.ImportReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	require.Equal(t, []any{true, 1}, []any{rep.DryRun, rep.Imported})
	require.Equal(t, []lease.PendingCheckpoint{{Shard: "shardId-000000000000", Sequence: "49700", SubSequence: 1, State: true}}, rep.Pending)

	// The operator is told of the prepared checkpoint, in a dry run and in the import.
	for _, dry := range []bool{true, false} {
		out.Reset()
		a := args[:len(args)-1] // without -json
		if dry {
			a = append(a[:len(a):len(a)], "-dry-run")
		}
		require.NoError(t, run(ctx, a, &out, &errOut), errOut.String())
		require.Contains(t, out.String(), "pending: 1 shard had a checkpoint prepared and not committed", "dry run %v", dry)
		require.Contains(t, out.String(), "shardId-000000000000: prepared 49700 (sub-sequence 1), with application state", "dry run %v", dry)
	}

	out.Reset()
	require.NoError(t, run(ctx, args, &out, &errOut), errOut.String())
	store := lease.NewDynamoDB(ddb, dst)
	l, err := store.Read(ctx, orders+"/shardId-000000000000")
	require.NoError(t, err)
	require.Equal(t, lease.Checkpoint{Sequence: "49600", SubSequence: 5}, l.Checkpoint)
	require.Empty(t, l.Owner)

	require.Error(t, run(ctx, []string{"import-nothing"}, &out, &errOut))
	require.Error(t, run(ctx, []string{"import-harlow", "-from", src, "-to", dst, "-stream", orders}, &out, &errOut), "-app is required")
}

// TestImportCrateAndHarlowCommands runs import-crate (a 0.6 row, read with -legacy) and
// import-harlow against dynalite: each writes the checkpoint as a whole record handled.
func TestImportCrateAndHarlowCommands(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	ctx := context.Background()
	orders, refunds := newStream(t, "orders"), newStream(t, "refunds")
	crate, harlow, dst := testenv.Name(t)+"-crate", testenv.Name(t)+"-harlow", testenv.Name(t)
	testenv.CreateTable(t, ddb, crate, "lease_key", "")
	testenv.CreateTable(t, ddb, harlow, "namespace", "shard_id")
	t.Cleanup(func() {
		_, _ = ddb.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(dst)})
	})
	_, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(crate), Item: map[string]types.AttributeValue{
		"lease_key": &types.AttributeValueMemberS{Value: "shardId-000000000000"}, "checkpoint": &types.AttributeValueMemberS{Value: "49601"},
		"lease_counter": &types.AttributeValueMemberN{Value: "9"},
	}})
	require.NoError(t, err)
	_, err = ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(harlow), Item: map[string]types.AttributeValue{
		"namespace": &types.AttributeValueMemberS{Value: "app-" + refunds}, "shard_id": &types.AttributeValueMemberS{Value: "shardId-000000000001"},
		"sequence_number": &types.AttributeValueMemberS{Value: "49602"},
	}})
	require.NoError(t, err)

	var out, errOut bytes.Buffer
	err = run(ctx, []string{"import-crate", "-from", crate, "-to", dst, "-stream", orders}, &out, &errOut)
	require.ErrorContains(t, err, "holds no rows of stream "+orders+"; it holds the rows of streams (rows keyed by the bare shard id", "without -legacy the 0.6 row is not read")
	out.Reset()
	require.NoError(t, run(ctx, []string{"import-crate", "-from", crate, "-to", dst, "-stream", orders, "-legacy"}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "imported 1")
	out.Reset()
	require.NoError(t, run(ctx, []string{"import-harlow", "-from", harlow, "-to", dst, "-stream", refunds, "-app", "app"}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "imported 1")

	store := lease.NewDynamoDB(ddb, dst)
	for key, seq := range map[string]string{orders + "/shardId-000000000000": "49601", refunds + "/shardId-000000000001": "49602"} {
		l, err := store.Read(ctx, key)
		require.NoError(t, err)
		require.Equal(t, lease.Checkpoint{Sequence: seq}, l.Checkpoint, key)
		require.Empty(t, l.Owner, key)
	}
}

// newStream creates a one-shard stream for the test, whose name ends in suffix, and returns its
// name: the command checks that the stream exists.
func newStream(t *testing.T, suffix string) string {
	t.Helper()
	name := testenv.Name(t) + "-" + suffix
	testenv.CreateStream(t, testenv.Kinesis(t), name, 1)
	return name
}

// TestImportCommandTraps: what an operator gets wrong is refused at once, saying what to do in
// the command's own flags; a second import after kinesub read on moves nothing back and shows
// both checkpoints; the positions printed read back with ParsePosition.
func TestImportCommandTraps(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	// Refusals come before the watches of an hour: one after a watch fails on this deadline.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	orders := newStream(t, "orders")
	src, single, crate, dst := testenv.Name(t)+"-kcl", testenv.Name(t)+"-single", testenv.Name(t)+"-crate", testenv.Name(t)
	testenv.CreateTable(t, ddb, src, "leaseKey", "")
	testenv.CreateTable(t, ddb, single, "leaseKey", "")
	testenv.CreateTable(t, ddb, crate, "lease_key", "")
	t.Cleanup(func() {
		_, _ = ddb.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(dst)})
	})
	put := func(table string, item map[string]types.AttributeValue) {
		_, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item})
		require.NoError(t, err)
	}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	for _, shard := range []string{"shardId-000000000000", "shardId-000000000001"} {
		put(src, map[string]types.AttributeValue{"leaseKey": s("123456789012:" + orders + ":1700000000:" + shard),
			"checkpoint": s("49600"), "checkpointSubSequenceNumber": n("0"), "leaseCounter": n("2")})
		put(single, map[string]types.AttributeValue{"leaseKey": s(shard), "checkpoint": s("49600"), "leaseCounter": n("2")})
		put(crate, map[string]types.AttributeValue{"lease_key": s(orders + ":" + shard), "checkpoint": s("49600"),
			"lease_owner": s("crate-1"), "lease_expiry": n(strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10))})
	}
	var out, errOut bytes.Buffer
	cmd := func(args ...string) error {
		out.Reset()
		errOut.Reset()
		return run(ctx, args, &out, &errOut)
	}

	// A misspelt stream: refused before the watch (an hour here), naming what the table holds.
	err := cmd("import-kcl", "-from", src, "-to", dst, "-stream", "ordres", "-watch", "1h", "-dry-run")
	require.ErrorIs(t, err, lease.ErrImportRefused)
	require.ErrorContains(t, err, "stream ordres does not exist")
	testenv.CreateStream(t, testenv.Kinesis(t), orders+"-typo", 1)
	err = cmd("import-kcl", "-from", src, "-to", dst, "-stream", orders+"-typo", "-watch", "1h", "-dry-run")
	require.ErrorContains(t, err, "holds no rows of stream "+orders+"-typo; it holds the rows of streams "+orders)

	// The watch says what it waits for.
	require.NoError(t, cmd("import-kcl", "-from", single, "-to", dst, "-stream", orders, "-watch", "1ms", "-dry-run"), errOut.String())
	require.Contains(t, errOut.String(), "watching the lease counters of KCL table "+single+" for 1ms")

	// Errors name the command's flags.
	err = cmd("import-crate", "-from", crate, "-to", dst, "-stream", orders)
	require.ErrorIs(t, err, lease.ErrImportRefused)
	require.ErrorContains(t, err, "or use -force")
	require.NotContains(t, err.Error(), "WithForce")

	// Imported, then read on by kinesub (shard 0), then imported again.
	require.NoError(t, cmd("import-kcl", "-from", src, "-to", dst, "-stream", orders, "-watch", "0"), errOut.String())
	require.Equal(t, "import 49600 sub 0 - after:shardId-000000000000:49600:1", row(out.String(), "shardId-000000000000"))
	require.Contains(t, out.String(), "SOURCE sub k: the KCL's last handled user record")
	store := lease.NewDynamoDB(ddb, dst)
	key := orders + "/shardId-000000000000"
	ok, err := store.Acquire(ctx, key, "subscriber-1", 0)
	require.NoError(t, err)
	require.True(t, ok)
	l, err := store.Read(ctx, key)
	require.NoError(t, err)
	ok, err = store.Checkpoint(ctx, key, l.Tenure(), lease.Checkpoint{Sequence: "49700"})
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, cmd("import-kcl", "-from", src, "-to", dst, "-stream", orders, "-watch", "0"), errOut.String())
	require.Contains(t, out.String(), "imported 0, 1 unchanged, 1 kept")
	require.Equal(t, "keep 49600 sub 0 after:shardId-000000000000:49700 after:shardId-000000000000:49600:1", row(out.String(), "shardId-000000000000"),
		"the source's checkpoint, kinesub's and the imported one side by side")
	require.Contains(t, out.String(), "keep: the kinesub checkpoint is ahead of the imported one")
	l, err = store.Read(ctx, key)
	require.NoError(t, err)
	require.Equal(t, lease.Checkpoint{Sequence: "49700"}, l.Checkpoint, "not moved back")
	for _, line := range strings.Split(out.String(), "\n") {
		for _, f := range strings.Fields(line) {
			if !strings.HasPrefix(f, "after:") || strings.HasPrefix(f, "after:<") { // not the legend
				continue
			}
			p, err := kinesub.ParsePosition(f)
			require.NoError(t, err, "printed %s", f)
			require.Equal(t, f, p.String())
		}
	}

	// Moving it back, while subscriber-1 holds both leases: refused once, naming the holder once.
	ok, err = store.Acquire(ctx, orders+"/shardId-000000000001", "subscriber-1", 0)
	require.NoError(t, err)
	require.True(t, ok)
	err = cmd("import-kcl", "-from", src, "-to", dst, "-stream", orders, "-watch", "0", "-move-back")
	require.ErrorContains(t, err, "kinesub leases held by subscriber-1 (shards shardId-000000000000): stop those subscribers, or use -overwrite to replace their checkpoints")
	require.Equal(t, 1, strings.Count(err.Error(), "-overwrite"), "%v", err)
	require.NoError(t, cmd("import-kcl", "-from", src, "-to", dst, "-stream", orders, "-watch", "0", "-move-back", "-overwrite"), errOut.String())
	l, err = store.Read(ctx, key)
	require.NoError(t, err)
	require.Equal(t, lease.Checkpoint{Sequence: "49600", SubSequence: 1}, l.Checkpoint, "-move-back moves it back")
}

// row returns the report's row of shard, without the shard, its columns joined by one space.
func row(report, shard string) string {
	for _, line := range strings.Split(report, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == shard {
			return strings.Join(f[1:], " ")
		}
	}
	return ""
}
