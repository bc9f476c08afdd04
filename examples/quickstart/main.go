// Command quickstart is the smallest kinesub consumer: it reads the stream "orders", keeping
// its leases and checkpoints in the DynamoDB table "orders-leases" (created when missing),
// prints each record and acknowledges it. Run as many instances as you like against the same
// table: they share the stream's shards. Ctrl-C (SIGINT) or SIGTERM stops it cleanly.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/lease"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	leases := lease.NewDynamoDB(dynamodb.NewFromConfig(cfg), "orders-leases")
	if err := leases.EnsureTable(ctx); err != nil {
		exit(ctx, err)
	}
	sub, err := kinesub.Subscribe(ctx, kinesis.NewFromConfig(cfg), "orders", kinesub.WithLeaseStore(leases))
	if err != nil {
		exit(ctx, err)
	}
	defer sub.Close(context.Background())
	// The loop ends when ctx is cancelled (Ctrl-C, or SIGTERM from an orchestrator): the
	// subscription then writes its checkpoints, releases its leases and closes Messages.
	for msg := range sub.Messages() {
		fmt.Printf("%s %s\n", msg.PartitionKey(), msg.Data())
		if err := msg.Ack(ctx); err != nil {
			log.Print(err)
		}
	}
	// A signal ends the subscription through ctx, cleanly: Messages closed once leases were released.
	if err := sub.Err(); err != nil && !(errors.Is(err, kinesub.ErrSubscriptionEnded) && ctx.Err() != nil) {
		log.Fatal(err)
	}
}

// exit ends the program on err, with status 0 when a signal ended ctx first: the user stopped it.
func exit(ctx context.Context, err error) {
	if ctx.Err() != nil {
		os.Exit(0)
	}
	log.Fatal(err)
}
