package kinesub_test

import (
	"context"
	"log"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/lease"
)

// Replay the last hour of a stream from a running subscription, then serve the same seeker to
// operators on a loopback address.
func ExampleSeeker_Seek() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	leases := lease.NewDynamoDB(dynamodb.NewFromConfig(cfg), "orders-leases")
	sub, err := kinesub.Subscribe(ctx, kinesis.NewFromConfig(cfg), "orders", kinesub.WithLeaseStore(leases))
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close(ctx)

	// Every shard, including shards this subscriber only takes later, reopens at the first
	// record of the last hour. Records fetched before the seek are not delivered after it.
	if err := sub.Seeker().Seek(ctx, kinesub.AtTimestamp(time.Now().Add(-time.Hour))); err != nil {
		log.Fatal(err)
	}

	// One shard only, back to a record seen earlier: its Position names the shard and record.
	m := <-sub.Messages()
	mark := m.Position()
	_ = m.Ack(ctx)
	// … later, to read that shard again from that record on:
	if err := sub.Seeker().Seek(ctx, mark); err != nil {
		log.Print(err) // for example ErrShardNotOwned: another instance reads that shard now
	}

	// Or let an operator do it: curl -X POST --data horizon http://127.0.0.1:8080/seek
	http.Handle("/seek", kinesub.SeekHandler(sub.Seeker()))
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", nil))
}
