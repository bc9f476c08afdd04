package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/smithy-go/middleware"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/internal/faultproxy"
	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// ---- Lease-table cost at steady state ----

var (
	leaseCost      = flag.Bool("leasecost", true, "measure the lease table's DynamoDB reads at steady state")
	leaseShards    = flag.Int("lease-shards", 64, "shards of the lease-cost stream")
	leaseInstances = flag.Int("lease-instances", 3, "subscribers sharing the lease-cost stream")
	leaseOthers    = flag.Int("lease-others", 128, "rows of other streams in the lease-cost table")
	leaseTTL       = flag.Duration("lease-ttl", 10*time.Second, "lease TTL of the lease-cost subscribers, the default (balance: 2 × TTL)")
	leaseWindow    = flag.Duration("lease-window", 40*time.Second, "steady-state window the lease-cost pass counts: two balance rounds")
	leasePoll      = flag.Duration("lease-poll", time.Second, "poll interval of the lease-cost readers (longer spares the emulator with many shards)")
)

// ddbCount counts one client's DynamoDB calls, the items they read and the read capacity they
// consumed, as the server reports it (the counter asks every read for it). Items read are what
// DynamoDB reads, and bills: every item a Scan scans, also those its filter drops
// (ScannedCount), every item a BatchGetItem or GetItem returns; the index entries a Query reads
// are counted apart.
type ddbCount struct {
	mu        sync.Mutex
	calls     map[string]int
	items     int
	indexKeys int
	rcu       float64
}

func (c *ddbCount) reset() {
	c.mu.Lock()
	c.calls, c.items, c.indexKeys, c.rcu = map[string]int{}, 0, 0, 0
	c.mu.Unlock()
}

// option is the client option that counts this client's calls.
func (c *ddbCount) option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("leasecost", func(ctx context.Context,
			in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			switch p := in.Parameters.(type) {
			case *dynamodb.ScanInput:
				p.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityTotal
			case *dynamodb.GetItemInput:
				p.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityTotal
			case *dynamodb.QueryInput:
				p.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityTotal
			case *dynamodb.BatchGetItemInput:
				p.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityTotal
			}
			out, md, err := next.HandleInitialize(ctx, in)
			op := strings.TrimSuffix(strings.TrimPrefix(fmt.Sprintf("%T", in.Parameters), "*dynamodb."), "Input")
			c.mu.Lock()
			defer c.mu.Unlock()
			c.calls[op]++
			var ccs []ddbtypes.ConsumedCapacity
			switch r := out.Result.(type) {
			case *dynamodb.ScanOutput:
				c.items += int(r.ScannedCount)
				if r.ConsumedCapacity != nil {
					ccs = append(ccs, *r.ConsumedCapacity)
				}
			case *dynamodb.QueryOutput:
				c.indexKeys += int(r.ScannedCount)
				if r.ConsumedCapacity != nil {
					ccs = append(ccs, *r.ConsumedCapacity)
				}
			case *dynamodb.BatchGetItemOutput:
				for _, items := range r.Responses {
					c.items += len(items)
				}
				ccs = r.ConsumedCapacity
			case *dynamodb.GetItemOutput:
				if r.Item != nil {
					c.items++
				}
				if r.ConsumedCapacity != nil {
					ccs = append(ccs, *r.ConsumedCapacity)
				}
			}
			for _, cc := range ccs {
				c.rcu += aws.ToFloat64(cc.CapacityUnits)
			}
			return out, md, err
		}), middleware.Before)
	})
}

// hidePrefix is the store without its prefix listing: its ListPrefix lists the whole table and
// keeps the stream's rows, so a subscriber reads every row of the table every claim tick, as
// every subscriber did before the change row.
type hidePrefix struct{ lease.Store }

func (h hidePrefix) ListPrefix(ctx context.Context, prefix string) ([]lease.Lease, error) {
	all, err := h.Store.List(ctx)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, l := range all {
		if strings.HasPrefix(l.Key, prefix) {
			out = append(out, l)
		}
	}
	return out, nil
}

// Designs the lease-cost passes compare, in the order they are printed.
const (
	everyTick = iota // the whole table listed every claim tick
	scanned          // the change row read each second; the stream listed by a filtered Scan
	indexed          // the change row read each second; the stream listed through the index when cheaper
	designs
)

var designNames = [designs]string{"every tick", "change row+scan", "change row+index"}

// leaseCostFigures runs instances subscribers on one stream of shards, with other streams' rows
// in the same table, and counts each one's DynamoDB calls at steady state, for each design:
// reading the whole table every claim tick (a store without ListPrefix); the change row read
// each second and the stream listed by a filtered Scan (a table without the index, as before
// it); the change row read each second and the stream listed through the index when that costs
// fewer read units than a Scan.
func leaseCostFigures() error {
	fmt.Println("== Lease table: DynamoDB reads per instance per minute at steady state (dynalite) ==")
	ctx := context.Background()
	cfg, kc, stream, cleanup, err := localStream(ctx, "kinesub-leasecost-", int32(*leaseShards))
	if err != nil {
		return err
	}
	defer cleanup()
	fmt.Printf("%d instances × %d shards, %d rows of other streams in the table, lease TTL %v (balance %v), %v measured\n",
		*leaseInstances, *leaseShards, *leaseOthers, *leaseTTL, 2**leaseTTL, *leaseWindow)
	var res [designs]map[string]float64
	for d := range designs {
		if res[d], err = leaseCostPass(ctx, cfg, kc, stream, d); err != nil {
			return err
		}
	}
	keys := map[string]bool{}
	for _, r := range res {
		for k := range r {
			keys[k] = true
		}
	}
	var names []string
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Printf("  %-28s", "per instance per minute")
	for _, n := range designNames {
		fmt.Printf(" %17s", n)
	}
	fmt.Println()
	for _, k := range names {
		fmt.Printf("  %-28s", k)
		for d := range designs {
			fmt.Printf(" %17.1f", res[d][k])
		}
		fmt.Println()
	}
	for _, k := range []string{"items read", "read units"} {
		if a := res[indexed][k]; a > 0 {
			fmt.Printf("  %s: %.1f× fewer than every tick, %.1f× fewer than change row+scan\n", k,
				res[everyTick][k]/a, res[scanned][k]/a)
		}
	}
	fmt.Println()
	return nil
}

// leaseCostPass runs one pass on a new table and returns the mean per-instance figures per
// minute.
func leaseCostPass(ctx context.Context, cfg aws.Config, kc *kinesis.Client, stream string, design int) (map[string]float64, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	table := "kinesub-leasecost-" + hex.EncodeToString(b[:])
	plain := dynamodb.NewFromConfig(cfg)
	admin := lease.NewDynamoDB(plain, table)
	if design == indexed {
		if err := admin.EnsureTable(ctx); err != nil {
			return nil, err
		}
	} else if err := createOldTable(ctx, plain, table); err != nil {
		return nil, err
	}
	defer func() {
		_, _ = plain.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	}()
	if err := fillOthers(ctx, admin, *leaseOthers); err != nil {
		return nil, err
	}
	// The subscribers reach DynamoDB through the fault proxy, faulting nothing: it counts the
	// requests that reach the server, a check on the client-side counts.
	proxy, err := faultproxy.New(os.Getenv(testenv.DynamoDBEndpointVar), faultproxy.Plan{})
	if err != nil {
		return nil, err
	}
	defer func() { _ = proxy.Close() }()
	counts := make([]*ddbCount, *leaseInstances)
	var subs []*kinesub.Subscriber
	defer func() {
		for _, s := range subs {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = s.Close(cctx)
			cancel()
		}
	}()
	began := time.Now()
	var allHeld time.Duration // from the first Subscribe to every shard held
	for i := range counts {
		counts[i] = &ddbCount{}
		counts[i].reset()
		ds := lease.NewDynamoDB(dynamodb.NewFromConfig(cfg, counts[i].option, func(o *dynamodb.Options) {
			o.BaseEndpoint = aws.String(proxy.URL())
		}), table)
		var store lease.Store = ds
		switch design {
		case everyTick:
			store = hidePrefix{ds}
		}
		s, err := kinesub.Subscribe(ctx, kc, stream, kinesub.WithLeaseStore(store), kinesub.WithOwner(fmt.Sprintf("i%d", i)),
			kinesub.WithLeaseTTL(*leaseTTL), kinesub.WithPollInterval(*leasePoll))
		if err != nil {
			return nil, err
		}
		subs = append(subs, s)
		go func() { // owned by this pass: Messages closes at Close
			for range s.Messages() {
			}
		}()
	}
	// Steady: every shard held, the shares even, for two balance intervals (2 × TTL each).
	fair := (*leaseShards + *leaseInstances - 1) / *leaseInstances
	deadline := time.Now().Add(3 * time.Minute)
	var since time.Time // since when the split has been even
	for ; since.IsZero() || time.Since(since) < 4**leaseTTL; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no steady split of %d shards in 3 minutes", *leaseShards)
		}
		per := make(map[string]int)
		held := 0
		ls, err := admin.ListPrefix(ctx, stream+"/")
		if err != nil {
			return nil, err
		}
		for _, l := range ls {
			// Shard leases only: not the heartbeat rows, nor the protocol's mark (held with an
			// expiry decades off under a name of its own), nor the change row.
			if lease.KindOf(l.Key) == lease.KindShard && l.Held(time.Now()) {
				per[l.Owner]++
				held++
			}
		}
		if held == *leaseShards && allHeld == 0 {
			allHeld = time.Since(began)
		}
		even := held == *leaseShards && len(per) == *leaseInstances
		for _, n := range per {
			even = even && n >= fair-1 && n <= fair
		}
		if !even {
			since = time.Time{}
		} else if since.IsZero() {
			since = time.Now()
		}
	}
	for _, c := range counts {
		c.reset()
	}
	forwarded := proxy.Stats()[faultproxy.StatForwarded]
	start := time.Now()
	time.Sleep(*leaseWindow)
	perMin := time.Minute.Seconds() / time.Since(start).Seconds() / float64(len(counts))
	out := map[string]float64{"seconds to all held (once)": allHeld.Seconds(),
		"requests at the proxy": float64(proxy.Stats()[faultproxy.StatForwarded]-forwarded) * perMin}
	for _, c := range counts {
		c.mu.Lock()
		for op, n := range c.calls {
			out["calls "+op] += float64(n) * perMin
			out["calls (all)"] += float64(n) * perMin
		}
		out["items read"] += float64(c.items) * perMin
		out["index keys read"] += float64(c.indexKeys) * perMin
		out["read units"] += c.rcu * perMin
		c.mu.Unlock()
	}
	return out, nil
}

// createOldTable creates a lease table as versions before the index did: the key alone.
func createOldTable(ctx context.Context, client *dynamodb.Client, table string) error {
	if _, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("lease_key"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("lease_key"), KeyType: ddbtypes.KeyTypeHash}},
		BillingMode:          ddbtypes.BillingModePayPerRequest,
	}); err != nil {
		return err
	}
	w := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 20*time.Millisecond, 200*time.Millisecond
	})
	return w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, 30*time.Second)
}

// fillOthers writes n rows of two other streams sharing the table, as their subscribers would
// leave them: held, with a checkpoint. Eight writers at a time.
func fillOthers(ctx context.Context, admin *lease.DynamoDB, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() { // owned by fillOthers, which waits for it
			for i := w; i < n; i += 8 {
				key := fmt.Sprintf("other-%d/shardId-%012d", i%2, i)
				if _, err := admin.Acquire(ctx, key, "elsewhere", time.Hour); err != nil {
					errs <- err
					return
				}
				// A fresh key: the Acquire made it, at counter 1.
				held := lease.Tenure{Owner: "elsewhere", Counter: 1}
				if _, err := admin.Checkpoint(ctx, key, held, lease.Checkpoint{Sequence: "49590338271490256608559692538361571095921575989136588898"}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}
