package dynamosink_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/dynamosink"
	"github.com/gostream/kinesub/kinesistest"
	"github.com/gostream/kinesub/lease"
)

// Records read by a subscriber, KPL-aggregated, applied with Process through Sink.Handler,
// under a lease table whose counters had risen; then the stream read again from the start with
// a new lease table (counters from 1), 80 records more on it: the first records are replays,
// the new ones applied, none refused as superseded; then read a third time in a new replay
// epoch: every record applied once more.
func TestProcessAppliesOnceAcrossReplay(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := kinesistest.NewServer()
	t.Cleanup(srv.Close)
	const stream, keys, records, more = "effects", 8, 400, 80
	client := srv.Client()
	_, err := client.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(2)})
	require.NoError(t, err)
	pub, err := kinesub.NewPublisher(client, stream, kinesub.WithPublishAggregation(true))
	require.NoError(t, err)
	publish := func(from, to int) {
		recs := make([]kinesub.Record, 0, to-from)
		for i := from; i < to; i++ {
			recs = append(recs, kinesub.Record{PartitionKey: "k" + strconv.Itoa(i%keys), Data: []byte(strconv.Itoa(i))})
		}
		require.NoError(t, pub.PublishBatch(ctx, recs))
	}
	publish(0, records)

	// Each record's effect adds one to its own counter, and its key's counter.
	effect := func(_ context.Context, m *kinesub.Message) ([]types.TransactWriteItem, error) {
		return []types.TransactWriteItem{f.add("r"+string(m.Data()), string(m.Data())), f.add(m.PartitionKey(), string(m.Data()))}, nil
	}
	sinkOf := func(opts ...dynamosink.Option) *dynamosink.Sink {
		s, err := dynamosink.New(f.db, f.marks, opts...)
		require.NoError(t, err)
		return s
	}

	// The first lease table's counters rose: its leases were taken and given up before.
	one := lease.NewMemory()
	for _, shard := range []string{"shardId-000000000000", "shardId-000000000001"} {
		for range 5 {
			ok, err := one.Acquire(ctx, stream+"/"+shard, "earlier", time.Minute)
			require.NoError(t, err)
			require.True(t, ok)
			l, err := one.Read(ctx, stream+"/"+shard)
			require.NoError(t, err)
			ok, err = one.Release(ctx, stream+"/"+shard, l.Tenure())
			require.NoError(t, err)
			require.True(t, ok)
		}
	}
	var aggregated atomic.Int64
	first := sinkOf(dynamosink.WithLeaseTable("one")).Handler(effect)
	consumeAll(ctx, t, client, stream, one, records, func(ctx context.Context, m *kinesub.Message) error {
		if c := m.Tenure().Counter; c <= 10 {
			return fmt.Errorf("read under counter %d, want one above 10", c)
		}
		if m.SubSequenceNumber() > 0 {
			aggregated.Add(1)
		}
		return first(ctx, m)
	})
	require.Positive(t, aggregated.Load(), "no record came in a KPL aggregate")

	answers := func(s *dynamosink.Sink, store lease.Store, n int64) map[string]int {
		var mu sync.Mutex
		results := map[string]int{}
		consumeAll(ctx, t, client, stream, store, n, func(ctx context.Context, m *kinesub.Message) error {
			items, _ := effect(ctx, m)
			err := s.Apply(ctx, m, items...)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				results["applied"]++
			case errors.Is(err, dynamosink.ErrReplay):
				results["replay"]++
			default:
				return err
			}
			return nil
		})
		return results
	}
	publish(records, records+more)
	assert.Equal(t, map[string]int{"replay": records, "applied": more},
		answers(sinkOf(dynamosink.WithLeaseTable("two")), lease.NewMemory(), records+more), "a new lease table")
	assert.Equal(t, map[string]int{"applied": records + more},
		answers(sinkOf(dynamosink.WithLeaseTable("two"), dynamosink.WithEpoch(func(*kinesub.Message) int64 { return 1 })), lease.NewMemory(), records+more),
		"a new replay epoch")

	for i := range records + more {
		n, by := f.count(t, "r"+strconv.Itoa(i))
		require.Equal(t, 2, n, "record %d applied %d times in two epochs", i, n)
		require.Equal(t, strconv.Itoa(i), by)
	}
	for k := range keys {
		n, by := f.count(t, "k"+strconv.Itoa(k))
		assert.Equal(t, 2*(records+more)/keys, n, "key k%d", k)
		assert.Equal(t, strconv.Itoa(records+more-keys+k), by, "key k%d: its last record applied last", k)
	}
}

// consumeAll reads the stream from its start with a new subscription (leases in store) and
// Process, until n records were handled.
func consumeAll(ctx context.Context, t *testing.T, client *kinesis.Client, stream string, store lease.Store, n int64, handle func(context.Context, *kinesub.Message) error, opts ...kinesub.ProcessOption) {
	t.Helper()
	sub, err := kinesub.Subscribe(ctx, client, stream, kinesub.WithLeaseStore(store),
		kinesub.WithStartAt(kinesub.Horizon()), kinesub.WithPollInterval(20*time.Millisecond))
	require.NoError(t, err)
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	var handled atomic.Int64
	err = sub.Process(pctx, func(ctx context.Context, m *kinesub.Message) error {
		if err := handle(ctx, m); err != nil {
			return err
		}
		if handled.Add(1) == n {
			stop()
		}
		return nil
	}, append([]kinesub.ProcessOption{kinesub.WithConcurrency(16)}, opts...)...)
	require.ErrorIs(t, err, context.Canceled, "Process returns its ctx's cause")
	require.Equal(t, n, handled.Load())
	require.NoError(t, sub.Close(ctx))
}
