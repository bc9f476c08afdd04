package lease_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// calls counts a client's DynamoDB calls by operation, and the items its Scans read.
type calls struct {
	mu      sync.Mutex
	ops     map[string]int
	scanned int
}

func (c *calls) take() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops, scanned := c.ops, c.scanned
	c.ops, c.scanned = map[string]int{}, 0
	return ops, scanned
}

// counted returns a client on the same server as client that counts its calls in c.
func counted(client *dynamodb.Client, c *calls) *dynamodb.Client {
	c.take()
	return dynamodb.New(client.Options(), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Initialize.Add(middleware.InitializeMiddlewareFunc("count", func(ctx context.Context,
				in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleInitialize(ctx, in)
				op := strings.TrimSuffix(strings.TrimPrefix(fmt.Sprintf("%T", in.Parameters), "*dynamodb."), "Input")
				c.mu.Lock()
				c.ops[op]++
				if r, ok := out.Result.(*dynamodb.ScanOutput); ok {
					c.scanned += int(r.ScannedCount)
				}
				c.mu.Unlock()
				return out, md, err
			}), middleware.Before)
		})
	})
}

// oldTable creates a lease table as earlier versions did: the key, no index.
func oldTable(t *testing.T, client *dynamodb.Client) string {
	t.Helper()
	table := testenv.Name(t)
	_, err := client.CreateTable(timeout(t), &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("lease_key"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("lease_key"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	require.NoError(t, err)
	t.Cleanup(func() { deleteTable(t, client, table) })
	require.Eventually(t, func() bool {
		out, err := client.DescribeTable(timeout(t), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		return err == nil && out.Table.TableStatus == types.TableStatusActive
	}, 10*time.Second, 10*time.Millisecond)
	return table
}

// putRows writes n rows of stream, each with a checkpoint of pad bytes, as items of an earlier
// version (tagged false) or of this one.
func putRows(t *testing.T, client *dynamodb.Client, table, stream string, from, n, pad int, tagged bool) {
	t.Helper()
	for i := from; i < from+n; i++ {
		item := map[string]types.AttributeValue{
			"lease_key":     &types.AttributeValueMemberS{Value: fmt.Sprintf("%s/shardId-%012d", stream, i)},
			"lease_counter": &types.AttributeValueMemberN{Value: "5"},
			"checkpoint":    &types.AttributeValueMemberS{Value: strings.Repeat("4", pad)},
		}
		if tagged {
			item["lease_stream"] = &types.AttributeValueMemberS{Value: stream}
		}
		_, err := client.PutItem(timeout(t), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item})
		require.NoError(t, err)
	}
}

// unitsOf runs list under WithConsumedCapacity and returns the read units it consumed.
func unitsOf(t *testing.T, list func(context.Context) ([]lease.Lease, error)) ([]lease.Lease, float64) {
	t.Helper()
	var mu sync.Mutex
	units := 0.0
	ls, err := list(lease.WithConsumedCapacity(timeout(t), func(u float64) {
		mu.Lock()
		units += u
		mu.Unlock()
	}))
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	return ls, units
}

func keysOf(ls []lease.Lease) []string {
	var ks []string
	for _, l := range ls {
		ks = append(ks, l.Key)
	}
	return ks
}

// TestDynamoDBListPrefixReadsOnlyStream: through the index, listing a stream reads its rows
// and no other: what it reads and costs does not grow with another stream's rows, whereas the
// scan of a table without the index does.
func TestDynamoDBListPrefixReadsOnlyStream(t *testing.T) {
	base := testenv.DynamoDB(t)
	var c calls
	client := counted(base, &c)
	withIndex := newTable(t, client)
	without := lease.NewDynamoDB(client, oldTable(t, base))
	for _, s := range []*lease.DynamoDB{withIndex, without} {
		for i := range 3 {
			ok, err := s.Acquire(timeout(t), fmt.Sprintf("orders/shardId-%012d", i), "a", time.Minute)
			require.NoError(t, err)
			require.True(t, ok)
		}
	}
	want := []string{"orders/shardId-000000000000", "orders/shardId-000000000001", "orders/shardId-000000000002"}
	list := func(s *lease.DynamoDB) func(context.Context) ([]lease.Lease, error) {
		return func(ctx context.Context) ([]lease.Lease, error) { return s.ListPrefix(ctx, "orders/") }
	}

	var units [2][2]float64 // [with index, without][200 other rows, 400]
	var scanned [2][2]int
	for round, from := range []int{0, 200} {
		for i, s := range []*lease.DynamoDB{withIndex, without} {
			putRows(t, base, s.Table(), "payments", from, 200, 1000, true)
			_, err := s.ListPrefix(timeout(t), "orders/") // the first listing in a process scans
			require.NoError(t, err)
			c.take()
			ls, u := unitsOf(t, list(s))
			assert.Equal(t, want, keysOf(ls))
			for _, l := range ls {
				assert.Equal(t, "a", l.Owner, "strongly consistent items")
			}
			ops, n := c.take()
			units[i][round], scanned[i][round] = u, n
			if i == 0 {
				assert.Zero(t, ops["Scan"], "listed through the index: %v", ops)
				assert.Equal(t, 1, ops["Query"], "%v", ops)
				assert.Equal(t, 1, ops["BatchGetItem"], "%v", ops)
			}
		}
	}
	t.Logf("read units with the index %v, without %v; items scanned without %v", units[0], units[1], scanned[1])
	assert.Equal(t, units[0][0], units[0][1], "with the index, other streams' rows cost nothing")
	assert.Less(t, units[0][0], 5.0, "three rows and their keys")
	assert.Zero(t, scanned[0][0]+scanned[0][1])
	assert.Greater(t, units[1][1], 1.5*units[1][0], "without it, a scan reads every row")
	assert.Equal(t, [2]int{203, 403}, scanned[1])
}

// TestDynamoDBListPrefixScansWhenCheaper: when the stream's rows are most of the table, a scan
// costs fewer read units than reading them one by one, and ListPrefix scans, without querying
// the index first.
func TestDynamoDBListPrefixScansWhenCheaper(t *testing.T) {
	base := testenv.DynamoDB(t)
	var c calls
	s := newTable(t, counted(base, &c))
	putRows(t, base, s.Table(), "orders", 0, 40, 50, true)
	putRows(t, base, s.Table(), "payments", 0, 5, 50, true)
	for range 3 {
		ls, err := s.ListPrefix(timeout(t), "orders/")
		require.NoError(t, err)
		assert.Len(t, ls, 40)
	}
	ops, scanned := c.take()
	assert.Zero(t, ops["BatchGetItem"]+ops["Query"], "%v", ops)
	assert.Equal(t, 3, ops["Scan"], "%v", ops)
	assert.Equal(t, 3*45, scanned)
}

// TestDynamoDBListPrefixScansAfterEmptyScan: a first listing that scans an empty table (a
// subscriber's first look, before any lease exists) does not leave the store reading rows one by
// one through the index once the table fills, when a Scan costs less.
func TestDynamoDBListPrefixScansAfterEmptyScan(t *testing.T) {
	base := testenv.DynamoDB(t)
	var c calls
	s := newTable(t, counted(base, &c))
	ls, err := s.ListPrefix(timeout(t), "orders/")
	require.NoError(t, err)
	require.Empty(t, ls)
	putRows(t, base, s.Table(), "orders", 0, 200, 50, true)
	for range 3 {
		ls, err := s.ListPrefix(timeout(t), "orders/")
		require.NoError(t, err)
		assert.Len(t, ls, 200)
	}
	ops, _ := c.take()
	assert.Zero(t, ops["BatchGetItem"], "rows read one by one where a Scan costs less: %v", ops)
	assert.LessOrEqual(t, ops["Query"], 1, "%v", ops)
}

// TestDynamoDBOldTable: a table created by an earlier version, without the index and with
// rows lacking lease_stream, keeps working: listed by scan, and EnsureTable asks DynamoDB to
// add the index.
func TestDynamoDBOldTable(t *testing.T) {
	base := testenv.DynamoDB(t)
	var c calls
	table := oldTable(t, base)
	putRows(t, base, table, "orders", 0, 3, 10, false)
	putRows(t, base, table, "payments", 0, 2, 10, false)
	s := lease.NewDynamoDB(counted(base, &c), table)
	for range 2 {
		ls, err := s.ListPrefix(timeout(t), "orders/")
		require.NoError(t, err)
		assert.Len(t, ls, 3)
	}
	ops, _ := c.take()
	assert.Zero(t, ops["Query"]+ops["BatchGetItem"]+ops["UpdateItem"], "no index: scanned, nothing tagged: %v", ops)
	assert.Equal(t, 2, ops["Scan"], "%v", ops)
	assert.Equal(t, 1, ops["DescribeTable"], "looked for the index once: %v", ops)

	require.NoError(t, s.EnsureTable(timeout(t)))
	ops, _ = c.take()
	assert.Equal(t, 1, ops["UpdateTable"], "asked for the index: %v", ops)
	ls, err := s.ListPrefix(timeout(t), "orders/")
	require.NoError(t, err)
	assert.Len(t, ls, 3, "still listed")

	ok, err := s.Acquire(timeout(t), "orders/shardId-000000000000", "a", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, &types.AttributeValueMemberS{Value: "orders"}, rawItem(t, base, table, "orders/shardId-000000000000")["lease_stream"],
		"a write tags an old row")
}

func rawItem(t *testing.T, client *dynamodb.Client, table, key string) map[string]types.AttributeValue {
	t.Helper()
	out, err := client.GetItem(timeout(t), &dynamodb.GetItemInput{
		TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"lease_key": &types.AttributeValueMemberS{Value: key}},
	})
	require.NoError(t, err)
	return out.Item
}

// TestDynamoDBMigratesOldRows: on a table with the index, rows written before lease_stream
// existed are listed by the first listing, which tags them without touching their counter,
// owner or checkpoint; later listings find them through the index.
func TestDynamoDBMigratesOldRows(t *testing.T) {
	base := testenv.DynamoDB(t)
	var c calls
	s := newTable(t, counted(base, &c))
	putRows(t, base, s.Table(), "orders", 0, 3, 10, false)
	putRows(t, base, s.Table(), "payments", 0, 200, 1000, false)
	_, err := base.PutItem(timeout(t), &dynamodb.PutItemInput{TableName: aws.String(s.Table()), Item: map[string]types.AttributeValue{
		"lease_key": &types.AttributeValueMemberS{Value: "orders/~owner/a"}, "lease_owner": &types.AttributeValueMemberS{Value: "a"},
		"lease_expiry": &types.AttributeValueMemberN{Value: "4102444800000"}, "lease_counter": &types.AttributeValueMemberN{Value: "3"},
	}})
	require.NoError(t, err)
	before, err := s.List(timeout(t))
	require.NoError(t, err)
	c.take()

	first, err := s.ListPrefix(timeout(t), "orders/")
	require.NoError(t, err)
	require.Len(t, first, 4)
	ops, _ := c.take()
	assert.Equal(t, 4, ops["UpdateItem"], "tagged the stream's four old rows only: %v", ops)
	for _, l := range first {
		assert.Equal(t, &types.AttributeValueMemberS{Value: "orders"}, rawItem(t, base, s.Table(), l.Key)["lease_stream"], l.Key)
	}
	after, err := s.List(timeout(t))
	require.NoError(t, err)
	assert.Equal(t, before, after, "counters, owners, expiries and checkpoints unchanged")
	c.take()

	again, err := s.ListPrefix(timeout(t), "orders/")
	require.NoError(t, err)
	assert.Equal(t, first, again)
	ops, _ = c.take()
	assert.Equal(t, 1, ops["Query"], "through the index: %v", ops)
	assert.Zero(t, ops["Scan"]+ops["UpdateItem"], "%v", ops)
}

// TestDynamoDBReadWeak: an eventually consistent read returns the lease for half the read
// units.
func TestDynamoDBReadWeak(t *testing.T) {
	s := newTable(t, testenv.DynamoDB(t))
	ok, err := s.Acquire(timeout(t), "orders/~table/changes", "a", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	strong, su := unitsOf(t, func(ctx context.Context) ([]lease.Lease, error) {
		l, err := s.Read(ctx, "orders/~table/changes")
		return []lease.Lease{l}, err
	})
	weak, wu := unitsOf(t, func(ctx context.Context) ([]lease.Lease, error) {
		l, err := s.ReadWeak(ctx, "orders/~table/changes")
		return []lease.Lease{l}, err
	})
	assert.Equal(t, strong, weak)
	assert.Equal(t, "a", weak[0].Owner)
	assert.Equal(t, su/2, wu)
	assert.Positive(t, wu)
}
