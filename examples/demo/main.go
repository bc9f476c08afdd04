// Command demo walks through kinesub end to end against the local Kinesis and DynamoDB
// servers: it creates a two-shard stream and a lease table, publishes records with headers,
// consumes and acknowledges part of them, closes (checkpoints written, leases released),
// resumes with a second subscriber exactly after the last acknowledged record, and finally
// seeks back to the oldest record and shows the replay.
//
// Run it with `make demo`, which starts the servers and points the AWS SDK at them through
// AWS_ENDPOINT_URL_KINESIS and AWS_ENDPOINT_URL_DYNAMODB. It refuses to run against any
// endpoint that is not on loopback, so it never touches real AWS.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/lease"
)

const (
	records  = 20
	acked    = 12 // the first subscriber acknowledges this many, then closes
	deadline = 60 * time.Second
)

func main() {
	// Ctrl-C (SIGINT) or SIGTERM stops the demo where it is, cleanly: its subscribers end
	// (checkpoints written, leases released) before it exits 0.
	sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(sig)
	interrupted := sig.Err() != nil // before stop, which ends sig too
	stop()
	switch {
	case interrupted:
		fmt.Println("demo interrupted; its subscribers closed")
	case err != nil:
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(sig context.Context) error {
	for _, v := range []string{"AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL_DYNAMODB"} {
		if err := checkLoopback(os.Getenv(v)); err != nil {
			return fmt.Errorf("%s: %v; run the demo with `make demo`, which starts local servers and sets it", v, err)
		}
	}
	ctx, cancel := context.WithTimeout(sig, deadline)
	defer cancel()
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(envOr("AWS_REGION", "us-east-1")))
	if err != nil {
		return err
	}
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
		cfg.Credentials = aws.AnonymousCredentials{} // the local servers accept any request
	}
	kc, dc := kinesis.NewFromConfig(cfg), dynamodb.NewFromConfig(cfg)
	suffix := randomSuffix()
	stream, table := "kinesub-demo-"+suffix, "kinesub-demo-leases-"+suffix

	leases := lease.NewDynamoDB(dc, table)
	if err := leases.EnsureTable(ctx); err != nil {
		return err
	}
	fmt.Printf("lease table %s ready\n", table)
	opts := []kinesub.Option{
		kinesub.WithLeaseStore(leases),
		kinesub.WithCreateIfMissing(2),
		kinesub.WithPollInterval(100 * time.Millisecond),
		kinesub.WithShardSyncInterval(time.Second),
		kinesub.WithLeaseTTL(3 * time.Second),
	}

	// 1. Subscribe from the oldest record, then publish.
	sub, err := kinesub.Subscribe(ctx, kc, stream, append(opts, kinesub.WithOwner("demo-a"), kinesub.WithStartAt(kinesub.Horizon()))...)
	if err != nil {
		return err
	}
	defer closeSub(sub) // on an early return; Close returns the same result when called again
	fmt.Printf("stream %s created with 2 shards; subscriber demo-a reading from the horizon\n", stream)
	pub, err := kinesub.NewPublisher(kc, stream)
	if err != nil {
		return err
	}
	batch := make([]kinesub.Record, records)
	for i := range batch {
		batch[i] = kinesub.Record{
			PartitionKey: []string{"alice", "bob", "carol", "dave"}[i%4],
			Data:         fmt.Appendf(nil, "order %02d", i),
			Headers:      map[string]string{"trace-id": fmt.Sprintf("t-%02d", i), "kind": "order"},
		}
	}
	if err := pub.PublishBatch(ctx, batch); err != nil {
		return err
	}
	fmt.Printf("published %d records with headers over 4 partition keys (customers)\n", records)

	// 2. Consume and acknowledge some of them.
	fmt.Printf("demo-a consumes %d records and acknowledges them:\n", acked)
	var last = map[string]string{}
	for i := 0; i < acked; i++ {
		m, err := next(ctx, sub)
		if err != nil {
			return err
		}
		fmt.Printf("  %s  %-10s %s  headers=%v\n", m.ShardID(), m.PartitionKey(), m.Data(), m.Headers())
		if err := m.Ack(ctx); err != nil {
			return err
		}
		last[m.ShardID()] = m.SequenceNumber()
	}
	// 3. Close: the watermark of each shard is written, the leases are released.
	if err := sub.Close(ctx); err != nil {
		return err
	}
	fmt.Println("demo-a closed; the lease table now holds:")
	if err := printLeases(ctx, leases, stream); err != nil {
		return err
	}

	// 4. A second subscriber resumes after the checkpoints.
	sub2, err := kinesub.Subscribe(ctx, kc, stream, append(opts, kinesub.WithOwner("demo-b"))...)
	if err != nil {
		return err
	}
	defer closeSub(sub2)
	fmt.Printf("demo-b resumes after the checkpoints and gets the other %d:\n", records-acked)
	for i := 0; i < records-acked; i++ {
		m, err := next(ctx, sub2)
		if err != nil {
			return err
		}
		fmt.Printf("  %s  %-10s %s\n", m.ShardID(), m.PartitionKey(), m.Data())
		if err := m.Ack(ctx); err != nil {
			return err
		}
	}

	// 5. Seek the running subscription back to the horizon: everything is delivered again.
	if err := sub2.Seeker().Seek(ctx, kinesub.Horizon()); err != nil {
		return err
	}
	fmt.Println("demo-b sought back to the horizon; the replay:")
	perShard := map[string]int{}
	for i := 0; i < records; i++ {
		m, err := next(ctx, sub2)
		if err != nil {
			return err
		}
		perShard[m.ShardID()]++
		if err := m.Ack(ctx); err != nil {
			return err
		}
	}
	shards := make([]string, 0, len(perShard))
	for s := range perShard {
		shards = append(shards, s)
	}
	sort.Strings(shards)
	for _, s := range shards {
		fmt.Printf("  %s: %d records replayed\n", s, perShard[s])
	}
	if err := sub2.Close(ctx); err != nil {
		return err
	}
	fmt.Println("demo-b closed. Done: produce, consume, ack, resume and seek all worked.")
	return nil
}

// closeSub closes sub, waiting up to 10s for its checkpoints and lease releases.
func closeSub(sub *kinesub.Subscriber) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = sub.Close(ctx)
}

// next waits for one message.
func next(ctx context.Context, sub *kinesub.Subscriber) (*kinesub.Message, error) {
	select {
	case m, ok := <-sub.Messages():
		if !ok {
			return nil, fmt.Errorf("subscription ended: %v", sub.Err())
		}
		return m, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a record: %w", ctx.Err())
	}
}

func printLeases(ctx context.Context, store lease.Store, stream string) error {
	ls, err := store.List(ctx)
	if err != nil {
		return err
	}
	for _, l := range ls {
		// The stream's shard leases only, <stream>/<shard id>: skip other streams' rows and the
		// stream's bookkeeping rows (heartbeats, the change row, the lease protocol's marker).
		shard, ok := strings.CutPrefix(l.Key, stream+"/")
		if !ok || !strings.HasPrefix(shard, "shardId-") {
			continue
		}
		owner := l.Owner
		if owner == "" {
			owner = "(released)"
		}
		fmt.Printf("  %s  owner=%s  checkpoint=%s\n", l.Key, owner, l.Checkpoint.Sequence)
	}
	return nil
}

func randomSuffix() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func checkLoopback(raw string) error {
	if raw == "" {
		return fmt.Errorf("not set")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if h := u.Hostname(); h != "localhost" {
		if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
			return fmt.Errorf("%q is not on loopback", raw)
		}
	}
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
