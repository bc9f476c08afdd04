package kinesub

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
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// opCounter counts a DynamoDB client's calls by operation.
type opCounter struct {
	mu  sync.Mutex
	ops map[string]int
}

func (c *opCounter) get(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops[op]
}

// client returns a client on the same server as base that counts its calls.
func (c *opCounter) client(base *dynamodb.Client) *dynamodb.Client {
	c.ops = map[string]int{}
	return dynamodb.New(base.Options(), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Initialize.Add(middleware.InitializeMiddlewareFunc("count", func(ctx context.Context,
				in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				op := strings.TrimSuffix(strings.TrimPrefix(fmt.Sprintf("%T", in.Parameters), "*dynamodb."), "Input")
				c.mu.Lock()
				c.ops[op]++
				c.mu.Unlock()
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
		})
	})
}

// TestIndexedTableBalancesAndHandsOff: two subscribers on a table shared with a large other
// stream list their stream through the lease_stream index, not by scanning the table, split
// its shards evenly, and a Close hands the closed one's shards to the other within 2 s.
func TestIndexedTableBalancesAndHandsOff(t *testing.T) {
	base := testenv.DynamoDB(t)
	table := testenv.Name(t)
	require.NoError(t, lease.NewDynamoDB(base, table).EnsureTable(context.Background()))
	// 300 rows of about 1 KB of another stream: a scan of the table costs far more read units
	// than reading this stream's few rows one by one.
	for i := range 300 {
		_, err := base.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			"lease_key":     &types.AttributeValueMemberS{Value: fmt.Sprintf("elsewhere/shardId-%012d", i)},
			"lease_stream":  &types.AttributeValueMemberS{Value: "elsewhere"},
			"lease_counter": &types.AttributeValueMemberN{Value: "1"},
			"checkpoint":    &types.AttributeValueMemberS{Value: strings.Repeat("4", 1000)},
		}})
		require.NoError(t, err)
	}
	s := newStream(t, 4)
	var ca, cb opCounter
	storeA, storeB := lease.NewDynamoDB(ca.client(base), table), lease.NewDynamoDB(cb.client(base), table)
	opts := func(store lease.Store, owner string) []Option {
		return testOpts(store, WithOwner(owner), WithBalanceInterval(500*time.Millisecond), WithLeaseTTL(10*time.Second))
	}
	a := subscribeT(t, s, opts(storeA, "a")...)
	b := subscribeT(t, s, opts(storeB, "b")...)
	eventually(t, 30*time.Second, "2/2", func() bool { return reading(a) == 2 && reading(b) == 2 })

	// Each store scans once, at its first listing (it tags rows written before lease_stream),
	// then lists through the index.
	scansA, queriesA := ca.get("Scan"), ca.get("Query")
	eventually(t, 30*time.Second, "three more listings by a", func() bool { return ca.get("Query") >= queriesA+3 })
	require.Equal(t, scansA, ca.get("Scan"), "a scanned the table")
	require.LessOrEqual(t, ca.get("Scan"), 1)
	require.LessOrEqual(t, cb.get("Scan"), 1)
	require.Positive(t, ca.get("BatchGetItem"))

	require.NoError(t, a.Close(context.Background()))
	closed := time.Now()
	eventually(t, 30*time.Second, "b reads 4", func() bool { return reading(b) == 4 })
	require.LessOrEqual(t, time.Since(closed), 2*time.Second, "handoff after Close")
	require.LessOrEqual(t, cb.get("Scan"), 1, "b scanned the table")
}
