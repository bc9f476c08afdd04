package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/internal/faultproxy"
	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// ---- Lease writes at scale, failover after a crash, rolling deploys ----

var (
	leaseWrites          = flag.Bool("leasewrites", true, "measure the lease table's writes per instance at steady state, failover after a crash, and rolling deploys")
	leaseWritesShards    = flag.String("leasewrites-shards", "64,1000", "shard counts of the idle streams whose lease writes are counted, one pass each (empty: none)")
	leaseWritesInstances = flag.Int("leasewrites-instances", 4, "subscribers sharing each stream")
	leaseWritesWindow    = flag.Duration("leasewrites-window", 30*time.Second, "steady-state window the writes are counted over (9 renewal periods at the default 10s TTL)")
	leaseWritesPoll      = flag.Duration("leasewrites-poll", 5*time.Second, "poll interval of the idle readers (spares the Kinesis server; lease writes do not depend on it)")
	leaseWritesKills     = flag.Int("leasewrites-kills", 20, "crashes of one instance, each measured until its shards are read again (0: none)")
	leaseWritesKillTTL   = flag.Duration("leasewrites-kill-ttl", 3*time.Second, "lease TTL of the crash passes (the goal scales with it: TTL + one balance interval, 2 × TTL)")
	leaseWritesDeploys   = flag.Int("leasewrites-deploys", 3, "rolling deploys of cmd/chaos -deploy (3 consumer processes, 8 shards; 0: none)")
	leaseWritesDelay     = flag.Duration("leasewrites-deploy-delay", 0, "cmd/chaos -start-delay: from a consumer's exit until its replacement starts")
)

// writesBefore holds the writes per instance-minute that this section measured on the
// per-shard-renewal protocol (every shard lease renewed on its own every TTL/3, beside one
// heartbeat row per instance), 4 instances and the default 10s TTL, with the library as of
// commit 28dfc33: the baseline of the goal "10× fewer writes". They are 18 renewals a minute
// per held shard plus 18 heartbeats: (n/4 + 1) × 18.
var writesBefore = map[int]float64{64: 306, 1000: 4518}

// leaseWritesFigures counts the lease table's writes per instance-minute on idle streams,
// measures how long a crashed instance's shards stay unread, and runs rolling deploys.
func leaseWritesFigures() error {
	fmt.Println("== Lease table writes per instance-minute, failover after a crash, rolling deploys (kinesistest child, dynalite) ==")
	ctx := context.Background()
	cfg, err := localConfig(ctx)
	if err != nil {
		return err
	}
	var counts []int
	for f := range strings.SplitSeq(*leaseWritesShards, ",") {
		if strings.TrimSpace(f) == "" {
			continue // -leasewrites-shards= counts no writes
		}
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-leasewrites-shards: %q is not a positive count", f)
		}
		counts = append(counts, n)
	}
	var child *childServer
	if len(counts) > 0 || *leaseWritesKills > 0 {
		if child, err = startChildServer(false); err != nil {
			return err
		}
		defer child.close()
	}
	if len(counts) > 0 {
		fmt.Printf("%d instances, default lease TTL (10s) and balance interval (20s), idle shards polled every %v; writes are\n",
			*leaseWritesInstances, *leaseWritesPoll)
		fmt.Printf("UpdateItem, PutItem and DeleteItem calls, counted per instance over %v once every shard has been held evenly for\n", *leaseWritesWindow)
		fmt.Println("two renewal periods; reads as in the lease-cost section. The subscribers reach dynalite through the counting proxy.")
	}
	var failed []string
	for _, n := range counts {
		r, err := leaseWritesPass(ctx, cfg, child.client, n)
		if err != nil {
			return fmt.Errorf("%d shards: %w", n, err)
		}
		fmt.Printf("  %d shards (%d an instance): %.0f writes a minute per instance (%s)\n", n, n / *leaseWritesInstances, r.writes, r.breakdown(true))
		fmt.Printf("    reads: %.0f calls (%s), %.0f items, %.1f read units a minute per instance; every call at the proxy: %.0f (client count %.0f)\n",
			r.reads, r.breakdown(false), r.items, r.rcu, r.proxied, r.calls)
		before, ok := writesBefore[n]
		if !ok || before == 0 {
			fmt.Printf("    no figure of the per-shard-renewal protocol for %d shards to compare with\n", n)
		} else {
			ok := r.writes*10 <= before
			fmt.Printf("    before, on the per-shard-renewal protocol (measured at 28dfc33): %.0f; %.1f× fewer now; goal ≥ 10× fewer: %s\n",
				before, before/r.writes, verdict(ok))
			if !ok {
				failed = append(failed, fmt.Sprintf("writes at %d shards", n))
			}
		}
		if n == 1000 {
			ok := r.writes < 1000
			fmt.Printf("    goal at 1,000 shards: fewer than 1,000 writes a minute per instance: %s\n", verdict(ok))
			if !ok {
				failed = append(failed, "writes under 1,000 a minute at 1,000 shards")
			}
		}
	}

	if *leaseWritesKills > 0 {
		if err := crashFigures(ctx, cfg, child.client); err != nil {
			return fmt.Errorf("crashes: %w", err)
		}
	}
	if *leaseWritesDeploys > 0 {
		if err := deployFigures(ctx); err != nil {
			return fmt.Errorf("rolling deploys: %w", err)
		}
	}
	if len(failed) > 0 {
		fmt.Printf("  goals missed: %s\n", strings.Join(failed, "; "))
	}
	fmt.Println()
	return nil
}

// writesResult is one pass's figures per instance-minute.
type writesResult struct {
	writes, reads, calls, items, rcu, proxied float64
	ops                                       map[string]float64
}

// breakdown lists the calls per minute of each operation that writes (writes) or reads.
func (r writesResult) breakdown(writes bool) string {
	var parts []string
	for _, op := range slices.Sorted(func(yield func(string) bool) {
		for op := range r.ops {
			if isWrite(op) == writes && !yield(op) {
				return
			}
		}
	}) {
		parts = append(parts, fmt.Sprintf("%s %.0f", op, r.ops[op]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// isWrite reports whether a DynamoDB operation writes items.
func isWrite(op string) bool {
	switch op {
	case "UpdateItem", "PutItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems":
		return true
	}
	return false
}

// leaseWritesPass runs the instances on an idle stream of shards on the child's server and a
// new lease table, and counts their DynamoDB calls over the window once the split is steady.
func leaseWritesPass(ctx context.Context, cfg aws.Config, kc *kinesis.Client, shards int) (writesResult, error) {
	var res writesResult
	stream := "kinesub-leasewrites-" + randomSuffix()
	if _, err := createStream(ctx, kc, stream, int32(shards)); err != nil {
		return res, err
	}
	defer deleteStream(kc, stream)
	table, admin, dropTable, err := newLeaseTable(ctx, cfg, "kinesub-leasewrites-")
	if err != nil {
		return res, err
	}
	defer dropTable()
	proxy, err := faultproxy.New(os.Getenv(testenv.DynamoDBEndpointVar), faultproxy.Plan{})
	if err != nil {
		return res, err
	}
	defer func() { _ = proxy.Close() }()

	g := newGroup(stream)
	defer g.closeAll()
	counts := make([]*ddbCount, *leaseWritesInstances)
	for i := range counts {
		counts[i] = &ddbCount{}
		counts[i].reset()
		client := dynamodb.NewFromConfig(cfg, counts[i].option, func(o *dynamodb.Options) {
			o.BaseEndpoint = aws.String(proxy.URL())
		})
		if err := g.add(ctx, fmt.Sprintf("w%d", i), lease.NewDynamoDB(client, table), kc, nil,
			kinesub.WithPollInterval(*leaseWritesPoll)); err != nil {
			return res, err
		}
	}
	// Steady: every shard held evenly for two renewal periods, so that no take or hand-back
	// of the start is still under way.
	const ttl = 10 * time.Second // the default
	if err := g.waitEven(ctx, admin, shards, 2*ttl/3, 5*time.Minute); err != nil {
		return res, err
	}
	for _, c := range counts {
		c.reset()
	}
	forwarded := proxy.Stats()[faultproxy.StatForwarded]
	start := time.Now()
	if err := sleepCtx(ctx, *leaseWritesWindow); err != nil {
		return res, err
	}
	perMin := time.Minute.Seconds() / time.Since(start).Seconds() / float64(len(counts))
	res.proxied = float64(proxy.Stats()[faultproxy.StatForwarded]-forwarded) * perMin
	res.ops = map[string]float64{}
	for _, c := range counts {
		c.mu.Lock()
		for op, n := range c.calls {
			v := float64(n) * perMin
			res.ops[op] += v
			res.calls += v
			if isWrite(op) {
				res.writes += v
			} else {
				res.reads += v
			}
		}
		res.items += float64(c.items) * perMin
		res.rcu += c.rcu * perMin
		c.mu.Unlock()
	}
	return res, nil
}

// crashFigures crashes one of the instances at a time, as a process dies: its lease store and
// Kinesis calls all fail from then on (renewing nothing, releasing nothing), and measures how
// long until every shard it held has delivered a record published right after the crash, read
// by another instance. A new instance then takes the dead one's place, and the next crash
// waits until the split is even again.
func crashFigures(ctx context.Context, cfg aws.Config, kc *kinesis.Client) error {
	const shards = 64
	ttl := *leaseWritesKillTTL
	stream := "kinesub-leasewrites-crash-" + randomSuffix()
	if _, err := createStream(ctx, kc, stream, shards); err != nil {
		return err
	}
	defer deleteStream(kc, stream)
	hashKeys, err := startingHashKeys(ctx, kc, stream)
	if err != nil {
		return err
	}
	table, admin, dropTable, err := newLeaseTable(ctx, cfg, "kinesub-leasewrites-crash-")
	if err != nil {
		return err
	}
	defer dropTable()

	g := newGroup(stream)
	defer g.closeAll()
	opts := []kinesub.Option{kinesub.WithLeaseTTL(ttl), kinesub.WithPollInterval(time.Second),
		kinesub.WithInitialPosition(kinesub.Horizon())}
	addInstance := func(owner string) error {
		cut := &atomic.Bool{}
		client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.HTTPClient = cutClient{base: o.HTTPClient, cut: cut} })
		kcut := kinesis.New(kc.Options(), func(o *kinesis.Options) { o.HTTPClient = cutClient{base: o.HTTPClient, cut: cut} })
		return g.add(ctx, owner, lease.NewDynamoDB(client, table), kcut, cut, opts...)
	}
	for i := range *leaseWritesInstances {
		if err := addInstance(fmt.Sprintf("k%d.0", i)); err != nil {
			return err
		}
	}
	rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 0))
	var perKill, perShard []time.Duration
	for k := range *leaseWritesKills {
		if err := g.waitEven(ctx, admin, shards, 0, 3*time.Minute); err != nil {
			return fmt.Errorf("before crash %d: %w", k+1, err)
		}
		victim := g.live()[rng.IntN(len(g.live()))]
		held, err := heldBy(ctx, admin, stream, victim.owner)
		if err != nil {
			return err
		}
		marker := fmt.Sprintf("crash-%d", k)
		g.expect(marker, victim)
		g.crash(victim)
		crashed := time.Now()
		var entries []ktypes.PutRecordsRequestEntry
		for _, id := range held {
			entries = append(entries, ktypes.PutRecordsRequestEntry{Data: []byte(marker), PartitionKey: aws.String(id), ExplicitHashKey: aws.String(hashKeys[id])})
		}
		if len(entries) > 0 {
			out, err := kc.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: entries})
			if err != nil {
				return err
			}
			if n := aws.ToInt32(out.FailedRecordCount); n > 0 {
				return fmt.Errorf("put records: %d failed", n)
			}
		}
		last, err := g.waitRead(ctx, marker, held, crashed, 10*ttl+time.Minute)
		if err != nil {
			return fmt.Errorf("crash %d of %s: %w", k+1, victim.owner, err)
		}
		perShard = append(perShard, last...)
		perKill = append(perKill, slices.Max(append(last, 0)))
		g.retire(victim)
		if err := addInstance(fmt.Sprintf("k%s.%d", victim.slot(), k+1)); err != nil {
			return err
		}
	}
	goal := ttl + 2*ttl
	p99 := quantileDur(perKill, 0.99)
	fmt.Printf("  crash failover: %d crashes of one of %d instances on %d shards, lease TTL %v (balance interval %v): time from the\n",
		len(perKill), *leaseWritesInstances, shards, ttl, 2*ttl)
	fmt.Println("    crash (lease store and Kinesis calls cut, nothing released) until every shard it held is read again by another instance")
	fmt.Printf("    per crash: p50 %v, p99 %v, max %v (per shard: p50 %v, p99 %v over %d); goal p99 ≤ TTL + balance interval (%v): %s\n",
		msDur(quantileDur(perKill, 0.5)), msDur(p99), msDur(slices.Max(append(perKill, 0))),
		msDur(quantileDur(perShard, 0.5)), msDur(quantileDur(perShard, 0.99)), len(perShard), goal, verdict(p99 <= goal))
	return nil
}

// deployFigures runs cmd/chaos -deploy in the library's module and prints its figures.
func deployFigures(ctx context.Context) error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root := filepath.Dir(wd)
	if _, err := os.Stat(filepath.Join(root, "cmd", "chaos", "deploy.go")); err != nil {
		return fmt.Errorf("cmd/chaos not found beside %s: run from bench/, as make bench does (%v)", wd, err)
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	args := []string{"run", "./cmd/chaos", "-deploy", "-deploys", strconv.Itoa(*leaseWritesDeploys),
		"-start-delay", leaseWritesDelay.String(), "-json", "-v=false"}
	cmd := exec.CommandContext(ctx, gobin, args...)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var rep struct {
		Published, Delivered, Lost, Duplicated int
		Violations                             []string
		Deploy                                 *struct {
			Deploys, Restarts, Handoffs, Unmoved                    int
			Gaps, Stops                                             []time.Duration
			AckedRedelivered, AckedCheckpointed, UnackedRedelivered int
		}
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || rep.Deploy == nil {
		return fmt.Errorf("go %s: %v; no report (%v): %s", strings.Join(args, " "), runErr, err, lastLines(stderr.String(), 10))
	}
	d := rep.Deploy
	p99 := quantileDur(d.Gaps, 0.99)
	fmt.Printf("  rolling deploys (go %s): 3 consumer processes on 8 shards, records at 500/s, lease TTL 10s,\n", strings.Join(args, " "))
	when := "once it has exited"
	if *leaseWritesDelay > 0 {
		when = fmt.Sprintf("%v after it exited", *leaseWritesDelay)
	}
	fmt.Printf("    checkpoints every 5s; each consumer in turn gets SIGTERM (Close, exit), a new process starts %s\n", when)
	fmt.Printf("    gap from an owner's last record read to the next owner's first, per shard and deploy: p50 %v, p99 %v, max %v\n",
		msDur(quantileDur(d.Gaps, 0.5)), msDur(p99), msDur(slices.Max(append(d.Gaps, 0))))
	fmt.Printf("      over %d shard-deploys (%d handoffs; %d deploys, %d restarts, SIGTERM to exit p50 %v); goal p99 ≤ 1s: %s\n",
		len(d.Gaps), d.Handoffs, d.Deploys, d.Restarts, msDur(quantileDur(d.Stops, 0.5)), verdict(len(d.Gaps) > 0 && p99 <= time.Second))
	fmt.Printf("    %d records published, %d lost; goal 0 lost: %s\n", rep.Published, rep.Lost, verdict(rep.Lost == 0))
	fmt.Printf("    delivered again after a handoff: %d acked before it (%d checkpointed before the owner began to stop), %d never acked;\n",
		d.AckedRedelivered, d.AckedCheckpointed, d.UnackedRedelivered)
	fmt.Printf("      goal 0 acked: %s\n", verdict(d.AckedRedelivered == 0))
	if len(rep.Violations) > 0 {
		fmt.Printf("    %d violations reported by cmd/chaos, the first: %s\n", len(rep.Violations), rep.Violations[0])
	}
	return nil
}

// group is the subscribers of one pass, each draining its Messages (acking everything) and
// noting when a record with an expected marker was delivered.
type group struct {
	stream string

	mu        sync.Mutex
	instances []*instance
	marker    string
	excluded  *instance
	firstRead map[string]time.Time // shard → first delivery of the marker by another instance
}

// instance is one subscriber of a group.
type instance struct {
	owner   string
	sub     *kinesub.Subscriber
	cut     *atomic.Bool // nil: cannot crash
	drained sync.WaitGroup
	closed  chan error // Close's result, once crashed
	dead    bool       // crashed; guarded by the group's mu
}

func newGroup(stream string) *group {
	return &group{stream: stream, firstRead: map[string]time.Time{}}
}

// add subscribes one more instance with store and client.
func (g *group) add(ctx context.Context, owner string, store lease.Store, kc *kinesis.Client, cut *atomic.Bool, opts ...kinesub.Option) error {
	sub, err := kinesub.Subscribe(ctx, kc, g.stream, append([]kinesub.Option{kinesub.WithLeaseStore(store), kinesub.WithOwner(owner)}, opts...)...)
	if err != nil {
		return err
	}
	in := &instance{owner: owner, sub: sub, cut: cut}
	in.drained.Go(func() { // owned by the instance: waited for after Close
		for m := range sub.Messages() {
			g.delivered(in, m)
			_ = m.Ack(ctx)
		}
	})
	g.mu.Lock()
	g.instances = append(g.instances, in)
	g.mu.Unlock()
	return nil
}

func (g *group) delivered(in *instance, m *kinesub.Message) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.marker == "" || in == g.excluded || string(m.Data()) != g.marker {
		return
	}
	if _, ok := g.firstRead[m.ShardID()]; !ok {
		g.firstRead[m.ShardID()] = time.Now()
	}
}

// expect makes deliveries of marker by any instance but excluded count from now on.
func (g *group) expect(marker string, excluded *instance) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.marker, g.excluded, g.firstRead = marker, excluded, map[string]time.Time{}
}

// waitRead waits until every shard of shards has delivered the marker, and returns for each
// the time from since.
func (g *group) waitRead(ctx context.Context, marker string, shards []string, since time.Time, bound time.Duration) ([]time.Duration, error) {
	deadline := time.Now().Add(bound)
	for {
		g.mu.Lock()
		var waits []time.Duration
		var unread []string
		for _, id := range shards {
			if t, ok := g.firstRead[id]; ok {
				waits = append(waits, t.Sub(since))
			} else {
				unread = append(unread, id)
			}
		}
		g.mu.Unlock()
		if len(unread) == 0 {
			return waits, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s not read again within %v: %s", marker, bound, strings.Join(unread, ", "))
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// live returns the instances not crashed.
func (g *group) live() []*instance {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*instance
	for _, in := range g.instances {
		if !in.dead {
			out = append(out, in)
		}
	}
	return out
}

// crash cuts every call of the instance, as when its process dies, then closes it in the
// background: its Close can write nothing, so its leases are left to expire.
func (g *group) crash(in *instance) {
	in.cut.Store(true)
	g.mu.Lock()
	in.dead = true
	g.mu.Unlock()
	in.closed = make(chan error, 1)
	go func() { // owned by the group: retire or closeAll waits for closed
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		in.closed <- in.sub.Close(ctx)
	}()
}

// slot is the instance's number in its owner name "k<slot>.<generation>".
func (in *instance) slot() string {
	s, _, _ := strings.Cut(strings.TrimPrefix(in.owner, "k"), ".")
	return s
}

// retire waits for a crashed instance's Close and drain, and forgets it.
func (g *group) retire(in *instance) {
	<-in.closed // its error: the writes it could not make
	in.drained.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.instances = slices.DeleteFunc(g.instances, func(x *instance) bool { return x == in })
}

// closeAll closes every instance still in the group and waits for each.
func (g *group) closeAll() {
	g.mu.Lock()
	ins := slices.Clone(g.instances)
	g.mu.Unlock()
	var wg sync.WaitGroup
	for _, in := range ins {
		wg.Go(func() { // owned by closeAll
			if in.closed != nil {
				<-in.closed
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_ = in.sub.Close(ctx)
				cancel()
			}
			in.drained.Wait()
		})
	}
	wg.Wait()
}

// waitEven waits until the live instances have held every shard evenly (⌊n/k⌋ or ⌈n/k⌉ each)
// for at least steady.
func (g *group) waitEven(ctx context.Context, admin *lease.DynamoDB, shards int, steady, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	var since time.Time
	for {
		why, err := g.uneven(ctx, admin, shards)
		if err != nil {
			return err
		}
		switch {
		case why != "":
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		}
		if !since.IsZero() && time.Since(since) >= steady {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no even split of %d shards within %v: %s", shards, bound, why)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// uneven says why the live instances do not hold every shard evenly, "" when they do.
func (g *group) uneven(ctx context.Context, admin *lease.DynamoDB, shards int) (string, error) {
	ls, err := admin.ListPrefix(ctx, g.stream+"/")
	if err != nil {
		return "", err
	}
	per := map[string]int{}
	for _, in := range g.live() {
		per[in.owner] = 0
	}
	held := 0
	now := time.Now()
	for _, l := range ls {
		if lease.KindOf(l.Key) != lease.KindShard || !l.Held(now) {
			continue
		}
		if _, ok := per[ownerName(l.Owner)]; ok {
			per[ownerName(l.Owner)]++
			held++
		}
	}
	if held != shards {
		return fmt.Sprintf("%d of %d shards held by live instances", held, shards), nil
	}
	lo, hi := shards/len(per), (shards+len(per)-1)/len(per)
	for owner, n := range per {
		if n < lo || n > hi {
			return fmt.Sprintf("%s holds %d shards, not %d to %d", owner, n, lo, hi), nil
		}
	}
	return "", nil
}

// ownerName returns the WithOwner name of the subscriber that wrote owner into a lease: kinesub
// appends "#" and an incarnation to it.
func ownerName(owner string) string {
	if i := strings.LastIndexByte(owner, '#'); i >= 0 {
		return owner[:i]
	}
	return owner
}

// heldBy returns the shards whose lease owner holds.
func heldBy(ctx context.Context, admin *lease.DynamoDB, stream, owner string) ([]string, error) {
	ls, err := admin.ListPrefix(ctx, stream+"/")
	if err != nil {
		return nil, err
	}
	var ids []string
	now := time.Now()
	for _, l := range ls {
		if lease.KindOf(l.Key) == lease.KindShard && ownerName(l.Owner) == owner && l.Held(now) {
			ids = append(ids, strings.TrimPrefix(l.Key, stream+"/"))
		}
	}
	return ids, nil
}

// startingHashKeys returns each shard's first hash key, which puts a record in that shard.
func startingHashKeys(ctx context.Context, kc *kinesis.Client, stream string) (map[string]string, error) {
	keys := map[string]string{}
	in := &kinesis.ListShardsInput{StreamName: aws.String(stream)}
	for {
		out, err := kc.ListShards(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, sh := range out.Shards {
			keys[aws.ToString(sh.ShardId)] = aws.ToString(sh.HashKeyRange.StartingHashKey)
		}
		if out.NextToken == nil {
			return keys, nil
		}
		in = &kinesis.ListShardsInput{NextToken: out.NextToken} // a token goes alone
	}
}

// newLeaseTable creates a lease table (with the index) on the local DynamoDB server; drop
// deletes it.
func newLeaseTable(ctx context.Context, cfg aws.Config, prefix string) (string, *lease.DynamoDB, func(), error) {
	table := prefix + randomSuffix()
	plain := dynamodb.NewFromConfig(cfg)
	admin := lease.NewDynamoDB(plain, table)
	if err := admin.EnsureTable(ctx); err != nil {
		return "", nil, nil, err
	}
	return table, admin, func() {
		_, _ = plain.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	}, nil
}

// cutClient is an HTTP client whose every request fails once cut is set: a process that died.
type cutClient struct {
	base interface {
		Do(*http.Request) (*http.Response, error)
	}
	cut *atomic.Bool
}

var errCrashed = errors.New("bench: instance crashed")

func (c cutClient) Do(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errCrashed
	}
	return c.base.Do(r)
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// quantileDur returns the q quantile of ds by nearest rank, 0 for none.
func quantileDur(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(float64(len(s))*q)) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func msDur(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
