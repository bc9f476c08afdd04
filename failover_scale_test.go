package kinesub

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/kinesistest"
	"github.com/gostream/kinesub/lease"
)

var (
	scaleShards    = flag.Int("scale.shards", 400, "TestFailoverAtScale: shards of the stream (make bench: 10,000)")
	scaleInstances = flag.Int("scale.instances", 16, "TestFailoverAtScale: instances sharing it")
)

// TestFailoverAtScale: a fleet of -scale.instances subscribers (16) shares a stream of
// -scale.shards shards (400 here, 10,000 in make bench) on the in-process kinesistest server
// and one in-memory lease store, at the defaults but for a lease TTL of 3 s. A quarter of the
// instances is cut off from the store, as by a network partition; their shards must have a new
// owner within TTL + 2 s at the 99th percentile and TTL + 3 s at most, the crash failover
// goals (docs/leases.md). It runs in a synctest bubble: the clock moves only while every
// goroutine waits, so what it measures is the protocol's own timing (ticks, waits, the writes
// in flight), not how fast the machine lists and plans the table. bench's fleet section
// measures the same on the wall clock, where a machine too small for the fleet adds its own
// delays.
func TestFailoverAtScale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const stream, ttl = "scale", 3 * time.Second
		ctx := context.Background()
		n, instances := *scaleShards, *scaleInstances
		srv, err := kinesistest.NewInProcess()
		require.NoError(t, err)
		require.NoError(t, srv.CreateStream(ctx, stream, n))
		cfg := srv.Config()
		cfg.Credentials = aws.AnonymousCredentials{}
		client := kinesis.NewFromConfig(cfg)
		mem := lease.NewMemory()
		stores := make([]*crashable, instances)
		subs := make([]*Subscriber, instances)
		owners := map[string]int{} // owner name → instance
		for i := range instances {
			stores[i] = &crashable{Store: mem}
			owner := fmt.Sprintf("i%02d", i)
			subs[i], err = Subscribe(ctx, client, stream, WithLeaseStore(stores[i]), WithOwner(owner),
				WithLeaseTTL(ttl), WithInitialPosition(Horizon()))
			require.NoError(t, err)
			owners[owner] = i
		}
		defer func() {
			for _, s := range subs {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_ = s.Close(cctx)
				cancel()
			}
		}()
		held := func() map[string]string { // shard → base owner name, of held leases
			rows, err := mem.ListPrefix(ctx, stream+"/")
			require.NoError(t, err)
			out := map[string]string{}
			for _, l := range rows {
				id := l.Key[len(stream)+1:]
				if lease.KindOf(l.Key) == lease.KindShard && l.Held(time.Now()) {
					out[id] = baseOwner(l.Owner)
				}
			}
			return out
		}
		// Every shard held, and every instance holding its share within one.
		start := time.Now()
		for {
			h := held()
			per := map[string]int{}
			for _, o := range h {
				per[o]++
			}
			lo, hi := n, 0
			for o := range owners {
				lo, hi = min(lo, per[o]), max(hi, per[o])
			}
			if len(h) == n && hi-lo <= 1 {
				break
			}
			require.Less(t, time.Since(start), 10*time.Minute, "not balanced: %d of %d held, %d to %d per instance", len(h), n, lo, hi)
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("%d shards, %d instances: balanced by count within ±1 %v after the first Subscribe", n, instances, time.Since(start).Round(time.Millisecond))

		cut := map[string]bool{}
		for i := range max(1, instances/4) {
			cut[fmt.Sprintf("i%02d", i)] = true
		}
		var orphans []string
		for id, o := range held() {
			if cut[o] {
				orphans = append(orphans, id)
			}
		}
		for o := range cut {
			stores[owners[o]].down.Store(true)
		}
		cutAt := time.Now()
		taken := map[string]time.Duration{}
		for len(taken) < len(orphans) {
			require.Less(t, time.Since(cutAt), time.Minute, "%d of %d shards not taken over", len(orphans)-len(taken), len(orphans))
			time.Sleep(10 * time.Millisecond)
			h := held()
			for _, id := range orphans {
				if _, ok := taken[id]; !ok && h[id] != "" && !cut[h[id]] {
					taken[id] = time.Since(cutAt)
				}
			}
		}
		var ds []time.Duration
		for _, d := range taken {
			ds = append(ds, d)
		}
		slices.Sort(ds)
		p50, p99, top := ds[len(ds)/2], ds[(len(ds)*99)/100], ds[len(ds)-1]
		t.Logf("cut %d of %d instances off the store: their %d shards taken over p50 %v, p99 %v, max %v (goals p99 ≤ %v, max ≤ %v)",
			len(cut), instances, len(orphans), p50, p99, top, ttl+2*time.Second, ttl+3*time.Second)
		require.LessOrEqual(t, p99, ttl+2*time.Second, "p99 failover")
		require.LessOrEqual(t, top, ttl+3*time.Second, "slowest failover")
	})
}
