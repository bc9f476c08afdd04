// Command demo walks through a shard lease against the local Kinesis and DynamoDB servers:
// it creates a two-shard stream and a lease table, takes the lease on the first shard,
// publishes a record, checkpoints it, reads the lease back and releases it.
//
// Run it with `make demo`, which starts the servers and points the AWS SDK at them through
// AWS_ENDPOINT_URL_KINESIS and AWS_ENDPOINT_URL_DYNAMODB. It refuses to run against any
// endpoint that is not on loopback, so it never touches real AWS.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gostream/kinesub/lease"
)

const (
	stream      = "kinesub-demo"
	table       = "kinesub-demo-leases"
	leaseTTL    = 10 * time.Second
	callTimeout = 30 * time.Second
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	for _, v := range []string{"AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL_DYNAMODB"} {
		if err := checkLoopback(os.Getenv(v)); err != nil {
			return fmt.Errorf("%s: %v; run the demo with `make demo`, which starts local servers and sets it", v, err)
		}
	}
	var cfg aws.Config
	if err := call("load AWS config", func(ctx context.Context) (err error) {
		cfg, err = config.LoadDefaultConfig(ctx, config.WithRegion(envOr("AWS_REGION", "us-east-1")))
		return err
	}); err != nil {
		return err
	}
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
		cfg.Credentials = aws.AnonymousCredentials{} // the local servers accept any request
	}
	kc, dc := kinesis.NewFromConfig(cfg), dynamodb.NewFromConfig(cfg)

	err := call("create stream", func(ctx context.Context) error {
		_, err := kc.CreateStream(ctx, &kinesis.CreateStreamInput{
			StreamName: aws.String(stream), ShardCount: aws.Int32(2),
			StreamModeDetails: &types.StreamModeDetails{StreamMode: types.StreamModeProvisioned},
		})
		var inUse *types.ResourceInUseException
		if errors.As(err, &inUse) { // left from an earlier run
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	err = call("wait for stream", func(ctx context.Context) error {
		w := kinesis.NewStreamExistsWaiter(kc, func(o *kinesis.StreamExistsWaiterOptions) {
			o.MinDelay, o.MaxDelay = 50*time.Millisecond, time.Second
		})
		return w.Wait(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String(stream)}, callTimeout)
	})
	if err != nil {
		return err
	}
	fmt.Printf("stream %s is active\n", stream)

	var shards []types.Shard
	if err := call("list shards", func(ctx context.Context) error {
		out, err := kc.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
		if err == nil {
			shards = out.Shards
		}
		return err
	}); err != nil {
		return err
	}
	if len(shards) == 0 {
		return fmt.Errorf("stream %s has no shards", stream)
	}
	for _, s := range shards {
		fmt.Printf("  shard %s, hash keys %s..%s\n", aws.ToString(s.ShardId),
			aws.ToString(s.HashKeyRange.StartingHashKey), aws.ToString(s.HashKeyRange.EndingHashKey))
	}
	shard := shards[0]

	store := lease.NewDynamoDB(dc, table)
	if err := call("ensure lease table", store.EnsureTable); err != nil {
		return err
	}
	fmt.Printf("lease table %s is active\n", table)

	key := stream + "/" + aws.ToString(shard.ShardId)
	host, _ := os.Hostname()
	owner := fmt.Sprintf("demo-%s-%d", host, os.Getpid())
	var ok bool
	if err := call("acquire lease", func(ctx context.Context) (err error) {
		ok, err = store.Acquire(ctx, key, owner, leaseTTL)
		return err
	}); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("lease %s is held by another owner; it lapses within %v", key, leaseTTL)
	}
	fmt.Printf("acquired lease %s as %s for %v\n", key, owner, leaseTTL)

	var seq string
	if err := call("put record", func(ctx context.Context) error {
		out, err := kc.PutRecord(ctx, &kinesis.PutRecordInput{
			StreamName:   aws.String(stream),
			PartitionKey: aws.String("demo"),
			// Route the record to the leased shard, whatever its partition key hashes to.
			ExplicitHashKey: shard.HashKeyRange.StartingHashKey,
			Data:            []byte("hello from kinesub"),
		})
		if err == nil {
			seq = aws.ToString(out.SequenceNumber)
			fmt.Printf("put a record on %s: sequence %s\n", aws.ToString(out.ShardId), seq)
		}
		return err
	}); err != nil {
		return err
	}

	if err := call("checkpoint", func(ctx context.Context) (err error) {
		ok, err = store.Checkpoint(ctx, key, owner, seq)
		return err
	}); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("checkpoint of %s refused: the lease was taken over", key)
	}
	fmt.Printf("checkpointed %s at %s\n", key, seq)

	if err := printLease("read lease", store, key); err != nil {
		return err
	}
	if err := call("release lease", func(ctx context.Context) error {
		return store.Release(ctx, key, owner)
	}); err != nil {
		return err
	}
	fmt.Printf("released lease %s\n", key)
	return printLease("read lease after release", store, key)
}

func printLease(step string, store lease.Store, key string) error {
	return call(step, func(ctx context.Context) error {
		l, err := store.Read(ctx, key)
		if err != nil {
			return err
		}
		owner, expiry := l.Owner, "-"
		if owner == "" {
			owner = "(none)"
		}
		if !l.Expiry.IsZero() {
			expiry = l.Expiry.Format(time.RFC3339Nano)
		}
		fmt.Printf("%s: owner %s, expiry %s, counter %d, checkpoint %s\n", step, owner, expiry, l.Counter, l.Checkpoint)
		return nil
	})
}

// call runs one step with its own deadline, so a server that stops answering ends the demo.
func call(step string, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := f(ctx); err != nil {
		return fmt.Errorf("%s: %w", step, err)
	}
	return nil
}

func checkLoopback(raw string) error {
	if raw == "" {
		return errors.New("not set")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("%q is not an http(s) URL", raw)
	}
	if h := u.Hostname(); h == "localhost" {
		return nil
	} else if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not on loopback, and the demo only runs against local servers", raw)
	}
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
