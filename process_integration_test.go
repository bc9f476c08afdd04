package kinesub

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// processAcrossReshard publishes 300 records over 12 keys and handles them with Process, 16
// handlers at once taking random times, reshards, then publishes and handles 300 more: per key,
// every record is handled once, in publish order and one at a time, across the parents and
// their children; records come from all three shards.
func processAcrossReshard(t *testing.T, s *stream, reshard func(), store lease.Store) {
	t.Helper()
	rnd := seeded(t)
	sub := subscribeT(t, s, testOpts(store, WithStartAt(Horizon()))...)
	s.publish(300, 12)
	log := newKeyLog(t)
	log.byKey = true
	var mu sync.Mutex
	shards := map[string]int{}
	stop := startProcess(sub, func(ctx context.Context, m *Message) error {
		log.begin(m)
		time.Sleep(time.Duration(rnd.IntN(3000)) * time.Microsecond) // the handler's I/O
		mu.Lock()
		shards[m.ShardID()]++
		mu.Unlock()
		log.end(m, true)
		return nil
	}, WithConcurrency(16))
	eventually(t, 2*time.Minute, "the first 300 handled", func() bool { return log.count() >= 300 })
	reshard()
	testenv.WaitActive(t, s.c, s.name)
	s.publish(300, 12)
	eventually(t, 2*time.Minute, "all 600 handled", func() bool { return log.count() >= 600 })
	require.NoError(t, stop())
	require.Equal(t, 600, log.count(), "a record handled twice")
	require.Len(t, shards, 3, "records from the parents and the children: %v", shards)
	for k, n := range log.next {
		require.Equal(t, 50, n, "key %s", k)
	}
}

// TestProcessSplitDuringConsumption: Process across a split of the only shard, on the emulator.
func TestProcessSplitDuringConsumption(t *testing.T) {
	s := newStream(t, 1)
	processAcrossReshard(t, s, func() { s.splitShard(s.shardIDs()[0]) }, lease.NewMemory())
}

// TestProcessMergeDuringConsumption: Process across a merge of two shards, on the emulator and
// with the DynamoDB lease store: the child waits until both parents' records were handled.
func TestProcessMergeDuringConsumption(t *testing.T) {
	s := newStream(t, 2)
	processAcrossReshard(t, s, func() {
		ids := s.shardIDs()
		_, err := s.c.MergeShards(context.Background(), &kinesis.MergeShardsInput{
			StreamName: aws.String(s.name), ShardToMerge: aws.String(ids[0]), AdjacentShardToMerge: aws.String(ids[1]),
		})
		require.NoError(t, err)
	}, dynamoStore(t))
}

// TestProcessAgainstService: on the emulator, records published with headers are handled by
// Process with their payload and headers; a failing record is retried in process; after Close
// the checkpoints are where the handled records end, and a second subscription on the same
// table handles only what was published since.
func TestProcessAgainstService(t *testing.T) {
	s := newStream(t, 2)
	store := lease.NewMemory()
	ctx := context.Background()
	for i := range 40 {
		_, err := s.pub.Publish(ctx, "order-"+string(rune('a'+i%4)), []byte{byte(i)}, map[string]string{"n": string(rune('0' + i%10))})
		require.NoError(t, err)
	}
	sub := subscribeT(t, s, testOpts(store, WithStartAt(Horizon()))...)
	var mu sync.Mutex
	handled := 0
	failed := false
	stop := startProcess(sub, func(ctx context.Context, m *Message) error {
		mu.Lock()
		defer mu.Unlock()
		if m.Data()[0] == 7 && !failed {
			failed = true
			return context.DeadlineExceeded // a downstream timeout, once
		}
		if m.Headers()["n"] != string(rune('0'+int(m.Data()[0])%10)) {
			t.Errorf("record %d: headers %v", m.Data()[0], m.Headers())
		}
		handled++
		return nil
	}, WithRetryBackoff(time.Millisecond, 10*time.Millisecond))
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return handled
	}
	eventually(t, time.Minute, "40 handled", func() bool { return count() == 40 })
	require.NoError(t, stop())
	require.NoError(t, sub.Close(ctx))

	again := subscribeT(t, s, testOpts(store)...)
	_, err := s.pub.Publish(ctx, "order-z", []byte{99}, nil)
	require.NoError(t, err)
	var got []byte
	stop = startProcess(again, func(ctx context.Context, m *Message) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, m.Data()[0])
		return nil
	})
	eventually(t, time.Minute, "the new record", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0
	})
	require.NoError(t, stop())
	require.Equal(t, []byte{99}, got, "only what was published since")
}
