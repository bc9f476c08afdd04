package dynamosink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// CreateTable creates a mark table named table, on-demand, and waits until it is active. A
// table that exists already is waited for and not changed. The schema a mark table needs (to
// create it by other means) is a string partition key named "key", and no sort key:
//
//	AttributeDefinitions: key (S); KeySchema: key HASH
//
// A mark item holds the attributes key, pos, shard, seq, sub, owner, counter, epoch, writes,
// and when used leases, skipped and TTLAttribute. The marks of a Sink must not share a table
// with its effects' items (Apply refuses items of the mark table); they may with other Sinks'
// marks, apart by WithKeyPrefix. CreateTable does not enable time to live: with WithMarkTTL,
// enable it on TTLAttribute (UpdateTimeToLive).
func CreateTable(ctx context.Context, client *dynamodb.Client, table string) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context (pass context.Background())", ErrInvalidOption)
	}
	if !tableName.MatchString(table) {
		return fmt.Errorf("%w: table name %q: 3 to 255 characters of a-z, A-Z, 0-9, '_', '-', '.'", ErrInvalidOption, table)
	}
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrKey), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrKey), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("dynamosink: create table %s: %w", table, err)
	}
	if err := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 100*time.Millisecond, 2*time.Second // the SDK's default waits 20s at first
	}).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, 5*time.Minute); err != nil {
		return fmt.Errorf("dynamosink: wait for table %s: %w", table, err)
	}
	return nil
}
