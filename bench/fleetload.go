package main

import (
	"context"
	"flag"
	"fmt"
	"math/big"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/lease"
)

// The fleet section's load figure: a stream whose shards carry unequal traffic, read by a few
// instances balanced by count first; then the shards one instance holds start to carry half
// the stream's bytes, and the figure is the balance rounds until the most loaded instance
// carries at most 1.1× (and 1.2×) the mean bytes a second, counted from the traffic each shard
// is sent (not from what the instances measure).
var (
	fleetLoadShards    = flag.Int("fleet-load-shards", 32, "shards of the fleet's load-skewed stream")
	fleetLoadInstances = flag.Int("fleet-load-instances", 4, "instances reading the fleet's load-skewed stream")
	fleetLoadBalance   = flag.Duration("fleet-load-balance", 2*time.Second, "balance interval of the load-skewed fleet")
)

func fleetLoadFigure(ctx context.Context, kc *kinesis.Client) error {
	stream := fmt.Sprintf("kinesub-bench-fleetload-%d", time.Now().UnixNano())
	if _, err := createStream(ctx, kc, stream, int32(*fleetLoadShards)); err != nil {
		return err
	}
	defer deleteStream(kc, stream)
	out, err := kc.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		return err
	}
	var shards []string
	for _, sh := range out.Shards {
		shards = append(shards, aws.ToString(sh.ShardId))
	}
	mem := lease.NewMemory()
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { // after the subscribers closed (the defer below): the publisher ends with rctx
		stop()
		wg.Wait()
	}()
	var subs []*kinesub.Subscriber
	defer func() {
		for _, s := range subs {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = s.Close(cctx)
			cancel()
		}
	}()
	for i := range *fleetLoadInstances {
		sub, err := kinesub.Subscribe(rctx, kc, stream, kinesub.WithLeaseStore(mem), kinesub.WithOwner(fmt.Sprintf("l%d", i)),
			kinesub.WithLeaseTTL(*fleetTTL), kinesub.WithBalanceInterval(*fleetLoadBalance), kinesub.WithPollInterval(100*time.Millisecond))
		if err != nil {
			return err
		}
		subs = append(subs, sub)
		wg.Go(func() { // owned by this figure: waited for after Close
			for m := range sub.Messages() {
				_ = m.Ack(ctx)
			}
		})
	}
	k := *fleetLoadInstances
	even := func(count map[string]int) bool {
		lo, hi, total := len(shards), 0, 0
		for i := range k {
			c := count[fmt.Sprintf("l%d", i)]
			lo, hi, total = min(lo, c), max(hi, c), total+c
		}
		return total == len(shards) && hi-lo <= 1
	}
	for end := time.Now().Add(*fleetBound); ; time.Sleep(50 * time.Millisecond) {
		_, count, err := shardOwners(ctx, mem, stream, shards)
		if err != nil {
			return err
		}
		if even(count) {
			break
		}
		if time.Now().After(end) {
			return fmt.Errorf("load fleet not balanced by count in %v: %v", *fleetBound, count)
		}
	}
	// The hot shards: those of l0. They carry half the bytes.
	owners, _, err := shardOwners(ctx, mem, stream, shards)
	if err != nil {
		return err
	}
	hot := map[string]bool{}
	for id, o := range owners {
		if o == "l0" {
			hot[id] = true
		}
	}
	const cold = 200 // bytes a cold shard is sent per 100 ms
	hotSize := cold * (len(shards) - len(hot)) / len(hot)
	rate := func(id string) float64 {
		if hot[id] {
			return float64(hotSize) * 10
		}
		return cold * 10
	}
	var entries []types.PutRecordsRequestEntry
	for _, sh := range out.Shards {
		lo, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.StartingHashKey), 10)
		size := cold
		if hot[aws.ToString(sh.ShardId)] {
			size = hotSize
		}
		entries = append(entries, types.PutRecordsRequestEntry{PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(lo.String()),
			Data: make([]byte, size)})
	}
	wg.Go(func() { // owned by this figure: ends with rctx
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			for start := 0; start < len(entries); start += 500 {
				_, _ = kc.PutRecords(rctx, &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: entries[start:min(start+500, len(entries))]})
			}
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	ratio := func() (float64, error) {
		owners, _, err := shardOwners(ctx, mem, stream, shards)
		if err != nil {
			return 0, err
		}
		per := map[string]float64{}
		sum := 0.0
		for _, id := range shards {
			sum += rate(id)
			if o := owners[id]; o != "" {
				per[o] += rate(id)
			}
		}
		return slices.Max(append(slices.Collect(func(yield func(float64) bool) {
			for _, l := range per {
				if !yield(l) {
					return
				}
			}
		}), 0)) / (sum / float64(k)), nil
	}
	began := time.Now()
	first, _ := ratio()
	var at11, at12 time.Duration
	moves := map[string]int{}
	last := owners
	for at11 == 0 && time.Since(began) < 20**fleetLoadBalance {
		time.Sleep(20 * time.Millisecond)
		r, err := ratio()
		if err != nil {
			return err
		}
		now, _, _ := shardOwners(ctx, mem, stream, shards)
		for id, o := range now {
			if last[id] != "" && o != last[id] {
				moves[id]++
			}
			last[id] = o
		}
		if r <= 1.2 && at12 == 0 {
			at12 = time.Since(began)
		}
		if r <= 1.1 {
			at11 = time.Since(began)
		}
	}
	most := 0
	for _, n := range moves {
		most = max(most, n)
	}
	rounds := func(d time.Duration) string {
		if d == 0 {
			return fmt.Sprintf("not within %d rounds", 20)
		}
		return fmt.Sprintf("%.1f rounds (%v)", d.Seconds()/fleetLoadBalance.Seconds(), d.Round(10*time.Millisecond))
	}
	fmt.Printf("  balanced by load, %d shards over %d instances, the %d shards of one carrying half the bytes (%.2f× the mean), balance every %v:\n"+
		"    max ≤ 1.2× mean after %s; max ≤ 1.1× mean after %s (goal ≤ 3 rounds: %s); %d shards moved, none more than %d times\n",
		len(shards), k, len(hot), first, *fleetLoadBalance, rounds(at12), rounds(at11),
		verdict(at11 > 0 && at11 <= 3**fleetLoadBalance+*fleetTTL/2), len(moves), most)
	return nil
}
