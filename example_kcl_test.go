package kinesub_test

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/kinesistest"
	"github.com/gostream/kinesub/lease"
)

// A KCL record processor in kinesub (docs/migrating.md has the mapping): state kept per
// shard, loaded where the KCL calls initialize (ShardListener.Started), updated where it calls
// processRecords (each message), saved where it calls shardEnded or shutdownRequested
// (Stopped), and dropped where it calls leaseLost (Stopped, StopLeaseLost). Ack is the
// checkpointer: kinesub writes the checkpoint once every earlier record of the shard is acked.
func ExampleWithShardListener() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := kinesistest.NewServer()
	defer srv.Close()
	if err := srv.CreateStream(ctx, "orders", 1); err != nil {
		log.Fatal(err)
	}
	if _, err := srv.Put(ctx, "orders", "shop-1", []byte("3"), []byte("4")); err != nil {
		log.Fatal(err)
	}

	// What a KCL record processor keeps in its fields, one per shard. The listener's calls for
	// different shards may run at once, and beside the loop below: one lock guards the map.
	type total struct{ sum, records int }
	var mu sync.Mutex
	totals := map[string]*total{}
	saved := map[string]int{} // stands for the application's own store

	listener := kinesub.ShardListener{
		Started: func(s kinesub.ShardStart) { // initialize
			mu.Lock()
			defer mu.Unlock()
			totals[s.ShardID] = &total{sum: saved[s.ShardID]}
			fmt.Printf("initialize %s at %s\n", s.ShardID, s.Position)
		},
		Stopped: func(s kinesub.ShardStop) {
			mu.Lock()
			defer mu.Unlock()
			t := totals[s.ShardID]
			delete(totals, s.ShardID)
			switch s.Reason {
			case kinesub.StopLeaseLost, kinesub.StopSought: // leaseLost: another owner goes on
				fmt.Printf("leaseLost %s: state dropped\n", s.ShardID)
				return
			case kinesub.StopShardEnded: // shardEnded: SHARD_END is written once this returns
				fmt.Printf("shardEnded %s\n", s.ShardID)
			default: // StopClosing, StopHandedBack: shutdownRequested
				fmt.Printf("shutdownRequested %s (%s)\n", s.ShardID, s.Reason)
			}
			saved[s.ShardID] = t.sum
			fmt.Printf("saved %s: sum %d of %d records\n", s.ShardID, t.sum, t.records)
		},
	}
	sub, err := kinesub.Subscribe(ctx, srv.Client(), "orders",
		kinesub.WithLeaseStore(lease.NewMemory()),
		kinesub.WithInitialPosition(kinesub.Horizon()), // the KCL's TRIM_HORIZON
		kinesub.WithPollInterval(10*time.Millisecond),
		kinesub.WithShardListener(listener))
	if err != nil {
		log.Fatal(err)
	}
	for range 2 { // processRecords, one record at a time
		msg, ok := <-sub.Messages()
		if !ok {
			log.Fatal(sub.Err())
		}
		var n int
		if _, err := fmt.Sscan(string(msg.Data()), &n); err != nil {
			log.Print(err)
		}
		mu.Lock()
		t := totals[msg.ShardID()]
		t.sum += n
		t.records++
		mu.Unlock()
		fmt.Printf("processRecords %s: %s\n", msg.ShardID(), msg.Data())
		if err := msg.Ack(ctx); err != nil { // checkpointer.checkpoint(record)
			log.Print(err)
		}
	}
	if err := sub.Close(ctx); err != nil { // the KCL's shutdown: shutdownRequested per shard
		log.Fatal(err)
	}
	// Output:
	// initialize shardId-000000000000 at horizon
	// processRecords shardId-000000000000: 3
	// processRecords shardId-000000000000: 4
	// shutdownRequested shardId-000000000000 (closing)
	// saved shardId-000000000000: sum 7 of 2 records
}
