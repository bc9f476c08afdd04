package dynamosink_test

import (
	"context"
	"errors"
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

// Records read by a subscriber, KPL-aggregated, applied with Process through Sink.Handler;
// then the whole stream read again from the start (as after a crash before any checkpoint):
// every record is a replay, and the effects are as after the first reading.
func TestProcessAppliesOnceAcrossReplay(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := kinesistest.NewServer()
	t.Cleanup(srv.Close)
	const stream, keys, records = "effects", 8, 400
	client := srv.Client()
	_, err := client.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(2)})
	require.NoError(t, err)
	pub, err := kinesub.NewPublisher(client, stream, kinesub.WithPublishAggregation(true))
	require.NoError(t, err)
	recs := make([]kinesub.Record, records)
	for i := range recs {
		recs[i] = kinesub.Record{PartitionKey: "k" + strconv.Itoa(i%keys), Data: []byte(strconv.Itoa(i))}
	}
	require.NoError(t, pub.PublishBatch(ctx, recs))

	// Each record's effect adds one to its own counter, and its key's counter.
	effect := func(_ context.Context, m *kinesub.Message) ([]types.TransactWriteItem, error) {
		return []types.TransactWriteItem{f.add("r"+string(m.Data()), string(m.Data())), f.add(m.PartitionKey(), string(m.Data()))}, nil
	}
	var aggregated atomic.Int64
	first := f.sink.Handler(effect)
	consumeAll(ctx, t, client, stream, records, func(ctx context.Context, m *kinesub.Message) error {
		if m.SubSequenceNumber() > 0 {
			aggregated.Add(1)
		}
		return first(ctx, m)
	})
	require.Positive(t, aggregated.Load(), "no record came in a KPL aggregate")

	var mu sync.Mutex
	results := map[string]int{}
	consumeAll(ctx, t, client, stream, records, func(ctx context.Context, m *kinesub.Message) error {
		err := f.sink.Apply(ctx, m, f.add("r"+string(m.Data()), "again"))
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
	assert.Equal(t, map[string]int{"replay": records}, results)

	for i := range records {
		n, by := f.count(t, "r"+strconv.Itoa(i))
		require.Equal(t, 1, n, "record %d applied %d times", i, n)
		require.Equal(t, strconv.Itoa(i), by)
	}
	for k := range keys {
		n, by := f.count(t, "k"+strconv.Itoa(k))
		assert.Equal(t, records/keys, n, "key k%d", k)
		assert.Equal(t, strconv.Itoa(records-keys+k), by, "key k%d: its last record applied last", k)
	}
}

// consumeAll reads the stream from its start with a new subscription (leases in memory) and
// Process, until n records were handled.
func consumeAll(ctx context.Context, t *testing.T, client *kinesis.Client, stream string, n int64, handle func(context.Context, *kinesub.Message) error) {
	t.Helper()
	sub, err := kinesub.Subscribe(ctx, client, stream, kinesub.WithLeaseStore(lease.NewMemory()),
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
	}, kinesub.WithConcurrency(16))
	require.ErrorIs(t, err, context.Canceled, "Process returns its ctx's cause")
	require.Equal(t, n, handled.Load())
	require.NoError(t, sub.Close(ctx))
}
