package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// TestImportKCLCommand runs import-kcl against dynalite: a dry run reports and writes nothing,
// the import writes a free lease after the checkpoint.
func TestImportKCLCommand(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	ctx := context.Background()
	src, dst := testenv.Name(t)+"-kcl", testenv.Name(t)
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

	args := []string{"import-kcl", "-from", src, "-to", dst, "-stream", "orders", "-watch", "0", "-json"}
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
	l, err := store.Read(ctx, "orders/shardId-000000000000")
	require.NoError(t, err)
	require.Equal(t, lease.Checkpoint{Sequence: "49600", SubSequence: 5}, l.Checkpoint)
	require.Empty(t, l.Owner)

	require.Error(t, run(ctx, []string{"import-nothing"}, &out, &errOut))
	require.Error(t, run(ctx, []string{"import-harlow", "-from", src, "-to", dst, "-stream", "orders"}, &out, &errOut), "-app is required")
}

// TestImportCrateAndHarlowCommands runs import-crate (a 0.6 row, read with -legacy) and
// import-harlow against dynalite: each writes the checkpoint as a whole record handled.
func TestImportCrateAndHarlowCommands(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	ctx := context.Background()
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
		"namespace": &types.AttributeValueMemberS{Value: "app-refunds"}, "shard_id": &types.AttributeValueMemberS{Value: "shardId-000000000001"},
		"sequence_number": &types.AttributeValueMemberS{Value: "49602"},
	}})
	require.NoError(t, err)

	var out, errOut bytes.Buffer
	require.NoError(t, run(ctx, []string{"import-crate", "-from", crate, "-to", dst, "-stream", "orders"}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "crate: stream orders: 1 rows read, imported 0, 0 unchanged, 1 skipped", "without -legacy the 0.6 row is not read")
	out.Reset()
	require.NoError(t, run(ctx, []string{"import-crate", "-from", crate, "-to", dst, "-stream", "orders", "-legacy"}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "imported 1")
	out.Reset()
	require.NoError(t, run(ctx, []string{"import-harlow", "-from", harlow, "-to", dst, "-stream", "refunds", "-app", "app"}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "imported 1")

	store := lease.NewDynamoDB(ddb, dst)
	for key, seq := range map[string]string{"orders/shardId-000000000000": "49601", "refunds/shardId-000000000001": "49602"} {
		l, err := store.Read(ctx, key)
		require.NoError(t, err)
		require.Equal(t, lease.Checkpoint{Sequence: seq}, l.Checkpoint, key)
		require.Empty(t, l.Owner, key)
	}
}
