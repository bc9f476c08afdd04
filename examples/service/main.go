// Command service is the plain service loop: consume a stream with the shard leases in a
// DynamoDB table (so several instances share the shards), handle each record, acknowledge it,
// and shut down cleanly on SIGINT or SIGTERM (checkpoints written, leases released, so the
// other instances take the shards over within about a second).
//
//	go run ./examples/service -stream orders -table orders-leases
//
// It uses the standard AWS configuration (environment, shared config, instance role).
package main

import (
	"context"
	"flag"
	"log"
	"log/slog"
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

func main() {
	stream := flag.String("stream", "orders", "Kinesis stream to consume")
	table := flag.String("table", "orders-leases", "DynamoDB lease table (created if missing)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	leases := lease.NewDynamoDB(dynamodb.NewFromConfig(cfg), *table)
	if err := leases.EnsureTable(ctx); err != nil {
		log.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	sub, err := kinesub.Subscribe(context.Background(), kinesis.NewFromConfig(cfg), *stream,
		kinesub.WithLeaseStore(leases), kinesub.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		<-ctx.Done()
		closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := sub.Close(closeCtx); err != nil {
			logger.Error("close", "err", err)
		}
	}()
	go func() {
		for err := range sub.Errors() {
			logger.Warn("kinesub", "err", err)
		}
	}()
	for msg := range sub.Messages() {
		handle(msg)
		if err := msg.Ack(context.Background()); err != nil {
			logger.Error("ack", "err", err)
		}
	}
	if err := sub.Err(); err != nil {
		log.Fatal(err)
	}
}

func handle(msg *kinesub.Message) {
	log.Printf("%s %s %s: %s", msg.ShardID(), msg.SequenceNumber(), msg.PartitionKey(), msg.Data())
}
