package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

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
	_, err := ddb.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(src),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("leaseKey"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("leaseKey"), KeyType: types.KeyTypeHash}},
	})
	require.NoError(t, err)
	// dynalite creates a table over a moment: writes before it is active are refused.
	require.NoError(t, dynamodb.NewTableExistsWaiter(ddb, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50*time.Millisecond, time.Second
	}).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(src)}, 30*time.Second))
	t.Cleanup(func() {
		for _, n := range []string{src, dst} {
			_, _ = ddb.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(n)})
		}
	})
	_, err = ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(src), Item: map[string]types.AttributeValue{
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
