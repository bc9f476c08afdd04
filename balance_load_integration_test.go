package kinesub

import (
	"context"
	"fmt"
	"math/big"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/kinesistest"
	"github.com/gostream/kinesub/lease"
)

// TestBalanceByLoad: 32 shards over 4 instances, balanced by count (8 each), then the 4 shards
// of one instance start to carry half the bytes (7 times a cold shard's). Balancing by load
// brings the most loaded instance within 1.2x the mean bytes a second within 3 balance rounds
// (and the claim round that takes the last hand-backs), with no shard moved more than twice,
// then or in the next two rounds. Rounds are counted on the instances, not timed.
func TestBalanceByLoad(t *testing.T) {
	srv := kinesistest.NewServer()
	t.Cleanup(srv.Close)
	c := srv.Client()
	name := testenv.Name(t)
	testenv.CreateStream(t, c, name, 32)
	store := lease.NewMemory()
	const period = 2 * time.Second
	opts := func(owner string) []Option {
		return []Option{WithLeaseStore(store), WithOwner(owner), WithPollInterval(50 * time.Millisecond),
			WithShardSyncInterval(200 * time.Millisecond), WithLeaseTTL(3 * time.Second),
			WithBalanceInterval(period), WithCheckpointInterval(100 * time.Millisecond), WithRequestTimeout(10 * time.Second)}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(cancel)
	var subs []*Subscriber
	for _, o := range []string{"a", "b", "c", "d"} {
		sub, err := Subscribe(ctx, c, name, opts(o)...)
		require.NoError(t, err)
		subs = append(subs, sub)
		wg.Add(1)
		go func() { // owned by the test, which waits for it (wg)
			defer wg.Done()
			for m := range sub.Messages() {
				_ = m.Ack(context.Background())
			}
		}()
		t.Cleanup(func() {
			cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer ccancel()
			_ = sub.Close(cctx)
		})
	}
	holders := func() map[string]string { // shard → owner
		ls, err := store.List(context.Background())
		require.NoError(t, err)
		out := map[string]string{}
		for _, l := range ls {
			if id, ok := strings.CutPrefix(l.Key, name+"/"); ok && strings.HasPrefix(id, "shardId-") && l.Owner != "" {
				out[id] = strings.SplitN(l.Owner, "#", 2)[0]
			}
		}
		return out
	}
	eventually(t, 30*time.Second, "8 shards each", func() bool {
		per := map[string]int{}
		for _, o := range holders() {
			per[o]++
		}
		return len(per) == 4 && per["a"] == 8 && per["b"] == 8 && per["c"] == 8 && per["d"] == 8
	})

	// The hot shards: those a holds.
	shards, err := c.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(name)})
	require.NoError(t, err)
	var ofA []string
	for id, o := range holders() {
		if o == "a" {
			ofA = append(ofA, id)
		}
	}
	sort.Strings(ofA)
	hot := map[string]bool{}
	for _, id := range ofA[:4] {
		hot[id] = true
	}
	rate := func(id string) float64 { // bytes a second published to shard id
		if hot[id] {
			return 7 * coldBytes
		}
		return coldBytes
	}
	wg.Add(1)
	go func() { // owned by the test, which waits for it (wg)
		defer wg.Done()
		publishSkewed(ctx, c, name, shards.Shards, hot)
	}()

	loads := func(h map[string]string) (max, mean float64) {
		per := map[string]float64{"a": 0, "b": 0, "c": 0, "d": 0}
		for id, o := range h {
			per[o] += rate(id)
		}
		sum := 0.0
		for _, l := range per {
			sum += l
			max = maxf(max, l)
		}
		return max, sum / 4
	}
	moves := map[string]int{}
	last := holders()
	watch := func() (max, mean float64) {
		h := holders()
		for id, o := range h {
			if last[id] != "" && last[id] != o {
				moves[id]++
			}
		}
		for id, o := range last {
			if h[id] == "" {
				h[id] = o // in flight: handed back, not taken yet
			}
		}
		last = h
		return loads(h)
	}
	// Rounds are counted, not timed, so that a busy machine that runs them late does not fail
	// the test: every instance has run at least n balance rounds since rounds(0) was taken.
	rounds := func(n int64) func() bool {
		base := make([]int64, len(subs))
		for i, sub := range subs {
			base[i] = sub.coord.balanced.Load()
		}
		return func() bool {
			for i, sub := range subs {
				if sub.coord.balanced.Load()-base[i] < n {
					return false
				}
			}
			return true
		}
	}
	start := time.Now()
	max, mean := watch()
	t.Logf("by count: max %.0f B/s, mean %.0f B/s (%.2fx)", max, mean, max/mean)
	// Three balance rounds, after the loads are first noted (a heartbeat, TTL/3) and measured
	// over a window (TTL/3 to 2 TTL/3), and one more, within which the last round's hand-backs
	// are taken (a claim round).
	done := rounds(4)
	for {
		max, mean = watch()
		if max <= 1.2*mean {
			break
		}
		require.False(t, done(), "after %v: max %.0f B/s, mean %.0f B/s (%.2fx), holders %v",
			time.Since(start), max, mean, max/mean, last)
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("by load after %v (%.1f balance rounds): max %.2fx the mean", time.Since(start), float64(time.Since(start))/float64(period), max/mean)
	// Two more rounds, for moves back and forth.
	worst := max / mean
	for more := rounds(2); !more(); time.Sleep(20 * time.Millisecond) {
		max, mean = watch()
		worst = maxf(worst, max/mean)
	}
	t.Logf("the next two rounds: at worst %.2fx the mean", worst)
	var moved []string
	for id, n := range moves {
		require.LessOrEqual(t, n, 2, "shard %s moved %d times", id, n)
		moved = append(moved, fmt.Sprintf("%s:%d", id, n))
	}
	sort.Strings(moved)
	t.Logf("moves: %v", moved)
}

// coldBytes is what a cold shard of TestBalanceByLoad carries a second.
const coldBytes = 2000

func maxf(a, b float64) float64 {
	if a > b {
		return a
	}
	return b
}

// publishSkewed puts, every 200 ms until ctx ends, a record of a fifth of coldBytes into every
// shard, 7 times that size into the hot ones, each aimed at its shard by an explicit hash key.
func publishSkewed(ctx context.Context, c *kinesis.Client, name string, shards []types.Shard, hot map[string]bool) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		var entries []types.PutRecordsRequestEntry
		for _, sh := range shards {
			lo, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.StartingHashKey), 10)
			size := coldBytes / 5
			if hot[aws.ToString(sh.ShardId)] {
				size *= 7
			}
			entries = append(entries, types.PutRecordsRequestEntry{PartitionKey: aws.String("k"),
				ExplicitHashKey: aws.String(lo.String()), Data: make([]byte, size)})
		}
		if _, err := c.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(name), Records: entries}); err != nil && ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
