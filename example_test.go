package kinesub_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/lease"
)

// A service consumes a stream with its leases in DynamoDB, so that several instances share
// the shards, and acknowledges each record once handled. Ctrl-C (SIGINT) or an orchestrator's
// SIGTERM ends it cleanly: checkpoints written, leases released, Messages closed.
func ExampleSubscribe() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	leases := lease.NewDynamoDB(dynamodb.NewFromConfig(cfg), "orders-leases")
	if err := leases.EnsureTable(ctx); err != nil {
		log.Fatal(err)
	}
	sub, err := kinesub.Subscribe(ctx, kinesis.NewFromConfig(cfg), "orders", kinesub.WithLeaseStore(leases))
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close(context.Background())
	go func() {
		for err := range sub.Errors() {
			log.Printf("kinesub: %v", err)
		}
	}()
	for msg := range sub.Messages() {
		fmt.Printf("%s %s: %s\n", msg.ShardID(), msg.PartitionKey(), msg.Data())
		if err := msg.Ack(ctx); err != nil {
			log.Print(err)
		}
	}
	if err := sub.Err(); err != nil && !(errors.Is(err, kinesub.ErrSubscriptionEnded) && ctx.Err() != nil) {
		log.Fatal(err)
	}
}

// Positions have a text form, for flags, configuration and admin endpoints.
func ExampleParsePosition() {
	for _, s := range []string{"horizon", "timestamp:2026-12-02T10:00:00Z", "sequence:shardId-000000000001:49590338271490256608559692538361571095921575989136588898", "yesterday"} {
		p, err := kinesub.ParsePosition(s)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(p)
	}
	fmt.Println(kinesub.AtTimestamp(time.Date(2026, 12, 2, 11, 0, 0, 0, time.FixedZone("CET", 3600))))
	// Output:
	// horizon
	// timestamp:2026-12-02T10:00:00Z
	// sequence:shardId-000000000001:49590338271490256608559692538361571095921575989136588898
	// error: kinesub: invalid position "yesterday": want horizon, latest, timestamp:<RFC 3339 time>, sequence:<shard id>:<sequence number> or after:<shard id>:<sequence number>
	// timestamp:2026-12-02T10:00:00Z
}

// Invalid options are rejected before any I/O, with the option's name and range.
func ExampleWithBatchSize() {
	_, err := kinesub.Subscribe(context.Background(), kinesis.New(kinesis.Options{}), "orders", kinesub.WithBatchSize(20000))
	fmt.Println(err)
	// Output:
	// kinesub: invalid option: WithBatchSize(20000): must be between 1 and 10000
}

// Publish records with headers; subscribers read them back with Message.Headers. The README
// shows this function's body from NewPublisher on.
func ExamplePublisher_Publish() {
	var client *kinesis.Client // kinesis.NewFromConfig(cfg)
	if client == nil {
		return
	}
	ctx := context.Background()
	pub, err := kinesub.NewPublisher(client, "orders")
	if err != nil {
		log.Fatal(err)
	}
	seq, err := pub.Publish(ctx, "order-42", []byte(`{"status":"paid"}`), map[string]string{"trace-id": "abc"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("written at", seq)
	// Many records: each shard is written at its pace, each partition key's records in order.
	err = pub.PublishBatch(ctx, []kinesub.Record{
		{PartitionKey: "order-42", Data: []byte(`{"status":"shipped"}`)},
		{PartitionKey: "order-43", Data: []byte(`{"status":"paid"}`)},
	})
	if err != nil {
		log.Fatal(err) // a *kinesub.PublishError lists the records not written
	}
}
