package kinesub

import (
	"context"
	"testing"
	"time"
)

// TestMaxInFlightBoundsBatches: a cap smaller than a batch holds; the reader asks for no more
// than the room left, so a consumer that never acks holds exactly cap records per shard.
func TestMaxInFlightBoundsBatches(t *testing.T) {
	const inflight = 1000
	f := newPageKinesis(50_000, true)
	sub := benchSubscribe(t, f, WithMaxInFlight(inflight), WithBatchSize(benchPage))
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = sub.Close(ctx)
	}()
	f.start()
	perShard := map[string]int{}
	for _, m := range holdToCap(t, sub, benchShards) {
		perShard[m.ShardID()]++
	}
	if len(perShard) != benchShards {
		t.Fatalf("records from %d shards, want %d: %v", len(perShard), benchShards, perShard)
	}
	for shard, n := range perShard {
		if n != inflight {
			t.Errorf("shard %s: %d records delivered without an ack, want the cap, %d", shard, n, inflight)
		}
	}
}
