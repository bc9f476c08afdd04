package lease

// The lease table itself: creating it, waiting for it, and checking its key schema.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// EnsureTable creates the lease table, billed per request, unless it exists, and waits until
// it is ACTIVE or ctx ends. It may be called any number of times, also concurrently from
// several processes. A nil ctx is an error wrapping ErrInvalidArgument. It returns an error if
// the table exists with a key schema other than a string partition key lease_key.
//
// A new table is created with the index lease_stream-index. On a table without it (created by
// an earlier version, or elsewhere), EnsureTable asks for it with UpdateTable and returns
// without waiting: DynamoDB builds an index over existing items in minutes, and until the
// store sees it ACTIVE, ListPrefix scans as before (see ListPrefix). Should DynamoDB refuse
// (a role without dynamodb:UpdateTable), EnsureTable still succeeds and the store scans.
//
// Where the table is managed elsewhere (infrastructure as code, or a role without
// dynamodb:CreateTable), skip EnsureTable: the store then needs GetItem, UpdateItem,
// DeleteItem, Scan, and, to list one stream's rows through the index, DescribeTable, Query and
// BatchGetItem (without them, or without the index, it scans).
func (d *DynamoDB) EnsureTable(ctx context.Context) error {
	if err := checkContext(ctx, "DynamoDB.EnsureTable"); err != nil {
		return err
	}
	if err := d.checkTable(); err != nil {
		return err
	}
	_, err := d.api.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: aws.String(d.table),
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(attrKey), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(attrStream), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(attrKey), KeyType: types.KeyTypeHash},
		},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{streamIndexSpec()},
		BillingMode:            types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) { // in use: it exists, or another process is creating it
		return fmt.Errorf("lease: create table %q: %w", d.table, err)
	}
	t, err := d.waitActive(ctx)
	if err != nil {
		return err
	}
	return d.ensureIndex(ctx, t)
}

// waitActive polls DescribeTable until the table is ACTIVE, and returns its description. The
// SDK's waiter starts at a 20s delay, far longer than creating a single-key on-demand table
// takes.
func (d *DynamoDB) waitActive(ctx context.Context) (*types.TableDescription, error) {
	delay := 25 * time.Millisecond
	for {
		out, err := d.api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(d.table)})
		if err != nil {
			return nil, d.wrap("describe table", "", err)
		}
		if out.Table != nil && out.Table.TableStatus == types.TableStatusActive {
			return out.Table, d.checkSchema(out.Table)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("lease: wait for table %q to become active: %w", d.table, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, time.Second)
	}
}

func (d *DynamoDB) checkSchema(t *types.TableDescription) error {
	keyType := map[string]types.ScalarAttributeType{}
	for _, a := range t.AttributeDefinitions {
		keyType[aws.ToString(a.AttributeName)] = a.AttributeType
	}
	if len(t.KeySchema) == 1 && aws.ToString(t.KeySchema[0].AttributeName) == attrKey &&
		t.KeySchema[0].KeyType == types.KeyTypeHash && keyType[attrKey] == types.ScalarAttributeTypeS {
		return nil
	}
	return fmt.Errorf("lease: table %q exists with another key schema: a lease table needs only a string partition key %q", d.table, attrKey)
}
