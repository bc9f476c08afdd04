package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// ---- Start-up of a large stream: time to every shard delivering, heap per held shard ----

var (
	startup          = flag.Bool("startup", false, "measure the time from Subscribe to every shard of a large stream delivering, and the heap per held shard")
	startupShards    = flag.Int("startup-shards", 1000, "shards of the start-up stream (kinesalite allows 1,000)")
	startupInstances = flag.String("startup-instances", "1,3", "subscriber counts to measure, one pass each, in one process")
	startupPoll      = flag.Duration("startup-poll", 5*time.Second, "poll interval of the start-up readers (shorter loads the emulator with more GetRecords)")
	startupTTL       = flag.Duration("startup-ttl", 10*time.Second, "lease TTL of the start-up subscribers")
)

// startupFigures creates one stream of startupShards shards with one record in each, then,
// for each instance count, starts that many subscribers from the oldest record on a new lease
// table and reports how long it took until every shard's lease was held and every shard had
// delivered its record, and the process's heap then, per held shard.
func startupFigures() error {
	fmt.Println("== Start-up of a large stream: Subscribe to every shard delivering (kinesalite, dynalite) ==")
	ctx := context.Background()
	created := time.Now()
	cfg, kc, stream, cleanup, err := localStream(ctx, "kinesub-startup-", int32(*startupShards))
	if err != nil {
		return err
	}
	defer cleanup()
	if err := oneRecordPerShard(ctx, kc, stream); err != nil {
		return err
	}
	fmt.Printf("%d shards (stream created and filled in %.1f s), one record each, poll every %v, lease TTL %v\n",
		*startupShards, time.Since(created).Seconds(), *startupPoll, *startupTTL)
	fmt.Printf("  %-10s %16s %20s %16s %16s\n", "instances", "all held (s)", "all delivering (s)", "heap/shard (KiB)", "goroutines/shard")
	for _, f := range strings.Split(*startupInstances, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-startup-instances: %q is not a positive count", f)
		}
		r, err := startupPass(ctx, cfg, kc, stream, n)
		if err != nil {
			return err
		}
		fmt.Printf("  %-10d %16.1f %20.1f %16.1f %16.1f\n", n, r.held.Seconds(), r.delivering.Seconds(), r.heapPerShard/1024, r.goroutinesPerShard)
	}
	fmt.Println()
	return nil
}

// oneRecordPerShard puts one record in every shard of stream, aimed at the shard's first hash
// key.
func oneRecordPerShard(ctx context.Context, kc *kinesis.Client, stream string) error {
	out, err := kc.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		return err
	}
	var entries []types.PutRecordsRequestEntry
	for _, sh := range out.Shards {
		entries = append(entries, types.PutRecordsRequestEntry{
			Data: []byte(aws.ToString(sh.ShardId)), PartitionKey: aws.String("k"),
			ExplicitHashKey: sh.HashKeyRange.StartingHashKey,
		})
	}
	for len(entries) > 0 {
		n := min(len(entries), 500)
		res, err := kc.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: entries[:n]})
		if err != nil {
			return err
		}
		if c := aws.ToInt32(res.FailedRecordCount); c > 0 {
			return fmt.Errorf("put records: %d failed", c)
		}
		entries = entries[n:]
	}
	return nil
}

type startupResult struct {
	held, delivering   time.Duration
	heapPerShard       float64 // bytes
	goroutinesPerShard float64
}

// startupPass runs instances subscribers on a new lease table until every shard has delivered
// its record.
func startupPass(ctx context.Context, cfg aws.Config, kc *kinesis.Client, stream string, instances int) (startupResult, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	table := "kinesub-startup-" + hex.EncodeToString(b[:])
	plain := dynamodb.NewFromConfig(cfg)
	admin := lease.NewDynamoDB(plain, table)
	if err := admin.EnsureTable(ctx); err != nil {
		return startupResult{}, err
	}
	defer func() {
		_, _ = plain.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	}()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap0, g0 := ms.HeapAlloc, runtime.NumGoroutine()

	var mu sync.Mutex
	seen := map[string]bool{}
	var subs []*kinesub.Subscriber
	var drained sync.WaitGroup
	defer func() {
		for _, s := range subs {
			cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_ = s.Close(cctx)
			cancel()
		}
		drained.Wait()
	}()
	began := time.Now()
	for i := range instances {
		s, err := kinesub.Subscribe(ctx, kc, stream, kinesub.WithLeaseStore(lease.NewDynamoDB(plain, table)),
			kinesub.WithOwner(fmt.Sprintf("i%d", i)), kinesub.WithLeaseTTL(*startupTTL),
			kinesub.WithPollInterval(*startupPoll), kinesub.WithInitialPosition(kinesub.Horizon()))
		if err != nil {
			return startupResult{}, err
		}
		subs = append(subs, s)
		drained.Go(func() { // owned by this pass, which waits for it after Close
			for m := range s.Messages() {
				mu.Lock()
				seen[m.ShardID()] = true
				mu.Unlock()
				_ = m.Ack(ctx)
			}
		})
	}
	var r startupResult
	deadline := time.Now().Add(15 * time.Minute)
	for r.held == 0 || r.delivering == 0 {
		if time.Now().After(deadline) {
			return r, fmt.Errorf("%d instances: not every shard held and delivering in 15 minutes", instances)
		}
		time.Sleep(250 * time.Millisecond)
		mu.Lock()
		delivering := len(seen)
		mu.Unlock()
		if delivering == *startupShards && r.delivering == 0 {
			r.delivering = time.Since(began)
		}
		if r.held == 0 {
			ls, err := admin.ListPrefix(ctx, stream+"/")
			if err != nil {
				return r, err
			}
			held := 0
			for _, l := range ls {
				if lease.KindOf(l.Key) == lease.KindShard && l.Held(time.Now()) {
					held++
				}
			}
			if held == *startupShards {
				r.held = time.Since(began)
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	r.heapPerShard = float64(int64(ms.HeapAlloc)-int64(heap0)) / float64(*startupShards)
	r.goroutinesPerShard = float64(runtime.NumGoroutine()-g0) / float64(*startupShards)
	return r, nil
}

// localStream checks that DynamoDB is the local server, then creates a stream of shards named
// prefix and a random suffix on the local Kinesis server; cleanup deletes it.
func localStream(ctx context.Context, prefix string, shards int32) (cfg aws.Config, kc *kinesis.Client, stream string, cleanup func(), err error) {
	if cfg, err = localConfig(ctx); err != nil {
		return cfg, nil, "", nil, err
	}
	kc = kinesis.NewFromConfig(cfg)
	var b [4]byte
	_, _ = rand.Read(b[:])
	stream = prefix + hex.EncodeToString(b[:])
	if _, err := createStream(ctx, kc, stream, shards); err != nil {
		return cfg, nil, "", nil, err
	}
	return cfg, kc, stream, func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = kc.DeleteStream(dctx, &kinesis.DeleteStreamInput{StreamName: aws.String(stream)})
	}, nil
}

// localConfig checks that DynamoDB is the local server, and loads the SDK's configuration for
// the local servers.
func localConfig(ctx context.Context) (aws.Config, error) {
	if err := testenv.CheckLoopback(os.Getenv(testenv.DynamoDBEndpointVar)); err != nil {
		return aws.Config{}, fmt.Errorf("%s: %v; run `make bench`, which starts the local servers and sets it", testenv.DynamoDBEndpointVar, err)
	}
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(envOr("AWS_REGION", "us-east-1")))
	if err != nil {
		return cfg, err
	}
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
		cfg.Credentials = aws.AnonymousCredentials{}
	}
	return cfg, nil
}
