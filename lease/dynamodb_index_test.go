package lease

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// oldTableAPI answers as DynamoDB does for a lease table of an earlier version: it exists,
// ACTIVE, without the index. It records the UpdateTable requests; other calls panic (nil).
type oldTableAPI struct {
	dynamoAPI
	billing   types.BillingMode
	updates   []*dynamodb.UpdateTableInput
	index     types.IndexStatus // the index's status, "" while it does not exist
	describes int
}

func (o *oldTableAPI) CreateTable(context.Context, *dynamodb.CreateTableInput, ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	return nil, &types.ResourceInUseException{Message: aws.String("Table already exists")}
}

func (o *oldTableAPI) DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	t := &types.TableDescription{
		TableName:            aws.String("leases"),
		TableStatus:          types.TableStatusActive,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrKey), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrKey), KeyType: types.KeyTypeHash}},
	}
	o.describes++
	if o.index != "" {
		g := streamIndexSpec()
		t.GlobalSecondaryIndexes = []types.GlobalSecondaryIndexDescription{{
			IndexName: g.IndexName, KeySchema: g.KeySchema, Projection: g.Projection, IndexStatus: o.index}}
	}
	if o.billing == types.BillingModePayPerRequest {
		t.BillingModeSummary = &types.BillingModeSummary{BillingMode: o.billing}
	} else {
		t.ProvisionedThroughput = &types.ProvisionedThroughputDescription{ReadCapacityUnits: aws.Int64(20), WriteCapacityUnits: aws.Int64(10)}
	}
	return &dynamodb.DescribeTableOutput{Table: t}, nil
}

func (o *oldTableAPI) UpdateTable(_ context.Context, in *dynamodb.UpdateTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateTableOutput, error) {
	o.updates = append(o.updates, in)
	return &dynamodb.UpdateTableOutput{}, nil
}

// TestEnsureTableAddsIndex: on a table without the index, EnsureTable asks for it as DynamoDB
// needs it: keys only, both key attributes defined, throughput only for a provisioned table.
// (dynalite cannot add an index to an existing table, so this is checked against the request.)
func TestEnsureTableAddsIndex(t *testing.T) {
	for _, tc := range []struct {
		billing    types.BillingMode
		throughput *types.ProvisionedThroughput
	}{
		{types.BillingModePayPerRequest, nil},
		{types.BillingModeProvisioned, &types.ProvisionedThroughput{ReadCapacityUnits: aws.Int64(20), WriteCapacityUnits: aws.Int64(10)}},
	} {
		t.Run(string(tc.billing), func(t *testing.T) {
			api := &oldTableAPI{billing: tc.billing}
			d := &DynamoDB{api: api, table: "leases", list: listing{migrated: map[string]bool{}, rows: map[string]int{}}}
			require.NoError(t, d.EnsureTable(context.Background()))
			require.Len(t, api.updates, 1)
			in := api.updates[0]
			assert.Equal(t, "leases", aws.ToString(in.TableName))
			assert.ElementsMatch(t, []types.AttributeDefinition{
				{AttributeName: aws.String(attrKey), AttributeType: types.ScalarAttributeTypeS},
				{AttributeName: aws.String(attrStream), AttributeType: types.ScalarAttributeTypeS},
			}, in.AttributeDefinitions)
			require.Len(t, in.GlobalSecondaryIndexUpdates, 1)
			c := in.GlobalSecondaryIndexUpdates[0].Create
			require.NotNil(t, c)
			spec := streamIndexSpec()
			assert.Equal(t, streamIndex, aws.ToString(c.IndexName))
			assert.Equal(t, spec.KeySchema, c.KeySchema)
			assert.Equal(t, types.ProjectionTypeKeysOnly, c.Projection.ProjectionType)
			assert.Equal(t, tc.throughput, c.ProvisionedThroughput)
		})
	}
}

func TestStreamOf(t *testing.T) {
	for key, want := range map[string]string{
		"orders/shardId-000000000001": "orders",
		"orders/~owner/a":             "orders",
		"orders/":                     "orders",
		"orders":                      "",
		"/x":                          "",
		"":                            "",
	} {
		got, ok := streamOf(key)
		assert.Equal(t, want, got, key)
		assert.Equal(t, want != "", ok, key)
	}
}

// TestIndexedLooksAgain: a store without the index looks for it once a minute, uses it once it
// is ACTIVE (not while it is being built), and then looks only every ten minutes.
func TestIndexedLooksAgain(t *testing.T) {
	api := &oldTableAPI{billing: types.BillingModePayPerRequest}
	now := time.Unix(1_700_000_000, 0)
	d := &DynamoDB{api: api, table: "leases", now: func() time.Time { return now }}
	ctx := context.Background()
	step := func(after time.Duration, want bool, describes int) {
		t.Helper()
		now = now.Add(after)
		assert.Equal(t, want, d.indexed(ctx), "after %v", after)
		assert.Equal(t, describes, api.describes, "DescribeTable calls after %v", after)
	}
	step(0, false, 1)
	step(59*time.Second, false, 1)
	api.index = types.IndexStatusCreating
	step(2*time.Second, false, 2)
	api.index = types.IndexStatusActive
	step(30*time.Second, false, 2)
	step(31*time.Second, true, 3)
	step(9*time.Minute, true, 3)
	step(2*time.Minute, true, 4)
}
