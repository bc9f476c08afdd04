package lease_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
	"github.com/gostream/kinesub/lease/leasetest"
)

func timeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newTable returns a store on a new lease table, deleted when the test ends.
func newTable(t *testing.T, client *dynamodb.Client) *lease.DynamoDB {
	t.Helper()
	s := lease.NewDynamoDB(client, testenv.Name(t))
	require.NoError(t, s.EnsureTable(timeout(t)))
	t.Cleanup(func() { deleteTable(t, client, s.Table()) })
	return s
}

func deleteTable(t *testing.T, client *dynamodb.Client, table string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)}); err != nil {
		t.Logf("delete table %s: %v", table, err)
	}
}

func TestDynamoDB(t *testing.T) {
	client := testenv.DynamoDB(t)
	leasetest.Run(t, func(t *testing.T) lease.Store { return newTable(t, client) })
}

func TestDynamoDBTableNotFound(t *testing.T) {
	client := testenv.DynamoDB(t)
	table := testenv.Name(t)
	s := lease.NewDynamoDB(client, table)
	ctx := timeout(t)
	for _, tc := range []struct {
		op   string
		call func() error
	}{
		{"Acquire", func() error { _, err := s.Acquire(ctx, "k", "a", time.Minute); return err }},
		{"Steal", func() error { _, err := s.Steal(ctx, "k", "a", 1, time.Minute); return err }},
		{"Renew", func() error {
			_, err := s.Renew(ctx, "k", lease.Tenure{Owner: "a", Counter: 1}, time.Minute)
			return err
		}},
		{"Checkpoint", func() error {
			_, err := s.Checkpoint(ctx, "k", lease.Tenure{Owner: "a", Counter: 1}, lease.Checkpoint{Sequence: "1"})
			return err
		}},
		{"Release", func() error { _, err := s.Release(ctx, "k", lease.Tenure{Owner: "a", Counter: 1}); return err }},
		{"Read", func() error { _, err := s.Read(ctx, "k"); return err }},
		{"List", func() error { _, err := s.List(ctx); return err }},
		{"Delete", func() error { _, err := s.Delete(ctx, "k", 1); return err }},
	} {
		t.Run(tc.op, func(t *testing.T) {
			err := tc.call()
			require.ErrorIs(t, err, lease.ErrTableNotFound)
			assert.Contains(t, err.Error(), table, "the error names the table")
			assert.Contains(t, err.Error(), "EnsureTable", "the error says how to fix it")
			var cause *types.ResourceNotFoundException
			assert.ErrorAs(t, err, &cause, "the SDK's error stays reachable")
		})
	}
}

// refuseHTTP fails the test on any request: the store must not reach the network.
type refuseHTTP struct{ t *testing.T }

func (r refuseHTTP) Do(req *http.Request) (*http.Response, error) {
	r.t.Errorf("unexpected request to %s", req.URL)
	return nil, errors.New("no I/O expected")
}

func TestDynamoDBEmptyTableName(t *testing.T) {
	client := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String("http://127.0.0.1:9"),
		Credentials:  aws.AnonymousCredentials{},
		HTTPClient:   refuseHTTP{t},
	})
	s := lease.NewDynamoDB(client, "")
	ctx := timeout(t)
	for _, tc := range []struct {
		op   string
		call func() error
	}{
		{"EnsureTable", func() error { return s.EnsureTable(ctx) }},
		{"Acquire", func() error { _, err := s.Acquire(ctx, "k", "a", time.Minute); return err }},
		{"Steal", func() error { _, err := s.Steal(ctx, "k", "a", 1, time.Minute); return err }},
		{"Renew", func() error {
			_, err := s.Renew(ctx, "k", lease.Tenure{Owner: "a", Counter: 1}, time.Minute)
			return err
		}},
		{"Checkpoint", func() error {
			_, err := s.Checkpoint(ctx, "k", lease.Tenure{Owner: "a", Counter: 1}, lease.Checkpoint{Sequence: "1"})
			return err
		}},
		{"Release", func() error { _, err := s.Release(ctx, "k", lease.Tenure{Owner: "a", Counter: 1}); return err }},
		{"Read", func() error { _, err := s.Read(ctx, "k"); return err }},
		{"List", func() error { _, err := s.List(ctx); return err }},
		{"Delete", func() error { _, err := s.Delete(ctx, "k", 1); return err }},
	} {
		err := tc.call()
		assert.ErrorIs(t, err, lease.ErrInvalidArgument, tc.op)
		assert.ErrorContains(t, err, "table name", tc.op)
	}
}

func TestDynamoDBNilClient(t *testing.T) {
	s := lease.NewDynamoDB(nil, "leases")
	_, err := s.Acquire(timeout(t), "k", "a", time.Minute)
	assert.ErrorIs(t, err, lease.ErrInvalidArgument)
	assert.ErrorIs(t, s.EnsureTable(timeout(t)), lease.ErrInvalidArgument)
}

// A call that fails to reach the server is an error naming the operation and the key, not
// a lost lease.
func TestDynamoDBUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	client := dynamodb.New(dynamodb.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String("http://" + addr),
		Credentials:      aws.AnonymousCredentials{},
		RetryMaxAttempts: 1,
	})
	s := lease.NewDynamoDB(client, "leases")
	ok, err := s.Acquire(timeout(t), "stream/shardId-0", "a", time.Minute)
	assert.False(t, ok)
	require.Error(t, err)
	assert.ErrorContains(t, err, `lease: acquire "stream/shardId-0"`)
	assert.NotErrorIs(t, err, lease.ErrTableNotFound)
}

func TestDynamoDBEnsureTableIdempotent(t *testing.T) {
	client := testenv.DynamoDB(t)
	s := newTable(t, client)
	require.NoError(t, s.EnsureTable(timeout(t)), "second EnsureTable")

	ok, err := s.Acquire(timeout(t), "k", "a", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.EnsureTable(timeout(t)), "EnsureTable of a table holding leases")
	l, err := s.Read(timeout(t), "k")
	require.NoError(t, err)
	assert.Equal(t, "a", l.Owner, "EnsureTable kept the lease")
}

// Several processes starting at once all call EnsureTable; only one CreateTable wins.
func TestDynamoDBEnsureTableConcurrent(t *testing.T) {
	client := testenv.DynamoDB(t)
	table := testenv.Name(t)
	t.Cleanup(func() { deleteTable(t, client, table) })
	ctx := timeout(t)
	const n = 4
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = lease.NewDynamoDB(client, table).EnsureTable(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		assert.NoError(t, err, "EnsureTable %d", i)
	}
	ok, err := lease.NewDynamoDB(client, table).Acquire(ctx, "k", "a", time.Minute)
	require.NoError(t, err)
	assert.True(t, ok)
}

func TestDynamoDBEnsureTableWrongSchema(t *testing.T) {
	client := testenv.DynamoDB(t)
	table := testenv.Name(t)
	ctx := timeout(t)
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	require.NoError(t, err)
	t.Cleanup(func() { deleteTable(t, client, table) })

	err = lease.NewDynamoDB(client, table).EnsureTable(ctx)
	require.Error(t, err)
	assert.ErrorContains(t, err, table)
	assert.ErrorContains(t, err, "lease_key")
}

// TestDynamoDBItemWithoutSubSequence: an item written before checkpoints carried a sub-sequence
// reads as sub-sequence 0 and takes checkpoints with one.
func TestDynamoDBItemWithoutSubSequence(t *testing.T) {
	client := testenv.DynamoDB(t)
	s := newTable(t, client)
	_, err := client.PutItem(timeout(t), &dynamodb.PutItemInput{
		TableName: aws.String(s.Table()),
		Item: map[string]types.AttributeValue{
			"lease_key":     &types.AttributeValueMemberS{Value: "orders/shardId-000000000000"},
			"lease_counter": &types.AttributeValueMemberN{Value: "7"},
			"checkpoint":    &types.AttributeValueMemberS{Value: "42"},
		},
	})
	require.NoError(t, err)
	l, err := s.Read(timeout(t), "orders/shardId-000000000000")
	require.NoError(t, err)
	assert.Equal(t, lease.Lease{Key: "orders/shardId-000000000000", Counter: 7, Checkpoint: lease.Checkpoint{Sequence: "42"}}, l)

	ok, err := s.Acquire(timeout(t), l.Key, "a", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.Checkpoint(timeout(t), l.Key, lease.Tenure{Owner: "a", Counter: 8}, lease.Checkpoint{Sequence: "43", SubSequence: 2})
	require.NoError(t, err)
	require.True(t, ok)
	out, err := client.GetItem(timeout(t), &dynamodb.GetItemInput{
		TableName: aws.String(s.Table()), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"lease_key": &types.AttributeValueMemberS{Value: l.Key}},
	})
	require.NoError(t, err)
	assert.Equal(t, &types.AttributeValueMemberN{Value: "2"}, out.Item["checkpoint_subsequence"], "stored as a number")
}

// TestDynamoDBListPrefixReadsOldRows: rows written by earlier versions (no sub-sequence, no
// change row) are listed by stream, decoded as Read decodes them, without other streams' rows.
func TestDynamoDBListPrefixReadsOldRows(t *testing.T) {
	client := testenv.DynamoDB(t)
	s := newTable(t, client)
	for _, item := range []map[string]types.AttributeValue{
		{"lease_key": &types.AttributeValueMemberS{Value: "orders/shardId-000000000000"},
			"lease_counter": &types.AttributeValueMemberN{Value: "7"}, "checkpoint": &types.AttributeValueMemberS{Value: "42"}},
		{"lease_key": &types.AttributeValueMemberS{Value: "orders/~owner/a"}, "lease_owner": &types.AttributeValueMemberS{Value: "a"},
			"lease_expiry": &types.AttributeValueMemberN{Value: "4102444800000"}, "lease_counter": &types.AttributeValueMemberN{Value: "3"}},
		{"lease_key": &types.AttributeValueMemberS{Value: "orders-eu/shardId-000000000000"},
			"lease_counter": &types.AttributeValueMemberN{Value: "1"}},
	} {
		_, err := client.PutItem(timeout(t), &dynamodb.PutItemInput{TableName: aws.String(s.Table()), Item: item})
		require.NoError(t, err)
	}
	got, err := s.ListPrefix(timeout(t), "orders/")
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, lease.Lease{Key: "orders/shardId-000000000000", Counter: 7, Checkpoint: lease.Checkpoint{Sequence: "42"}}, got[0])
	assert.Equal(t, lease.Lease{Key: "orders/~owner/a", Owner: "a", Counter: 3, Expiry: time.UnixMilli(4102444800000)}, got[1])
}

// TestDynamoDBConsumedCapacity: under WithConsumedCapacity every call that DynamoDB answered
// reports the capacity it consumed; a failed condition reports nothing.
func TestDynamoDBConsumedCapacity(t *testing.T) {
	s := newTable(t, testenv.DynamoDB(t))
	var mu sync.Mutex
	units := map[string]float64{}
	ctx := func(op string) context.Context {
		return lease.WithConsumedCapacity(timeout(t), func(u float64) {
			mu.Lock()
			units[op] += u
			mu.Unlock()
		})
	}
	const key = "orders/shardId-000000000000"
	ok, err := s.Acquire(ctx("acquire"), key, "a", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.Acquire(ctx("refused"), key, "b", time.Minute)
	require.NoError(t, err)
	require.False(t, ok)
	l, err := s.Read(ctx("read"), key)
	require.NoError(t, err)
	_, err = s.ListPrefix(ctx("list"), "orders/")
	require.NoError(t, err)
	ok, err = s.Release(ctx("release"), key, l.Tenure())
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.Delete(ctx("delete"), key, l.Counter+1)
	require.NoError(t, err)
	require.True(t, ok)
	mu.Lock()
	defer mu.Unlock()
	for _, op := range []string{"acquire", "read", "list", "release", "delete"} {
		assert.Positive(t, units[op], op)
	}
	assert.Zero(t, units["refused"], "a failed condition")
}
