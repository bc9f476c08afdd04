package kinesistest_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/kinesistest"
	"github.com/gostream/kinesub/lease"
)

// handle is the code under test: it turns an order record into a line of a report.
func handle(m *kinesub.Message) string { return strings.ToUpper(string(m.Data())) }

// A handler tested end to end without AWS, Node.js or the network: the server runs in the test
// process, and the subscriber keeps its leases in memory.
func Example() {
	srv := kinesistest.NewServer()
	defer srv.Close()
	client := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if _, err := client.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)}); err != nil {
		log.Fatal(err)
	}
	for _, order := range []string{"apples", "pears", "plums"} {
		if _, err := client.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"), Data: []byte(order), PartitionKey: aws.String("shop-1")}); err != nil {
			log.Fatal(err)
		}
	}

	sub, err := kinesub.Subscribe(ctx, client, "orders",
		kinesub.WithLeaseStore(lease.NewMemory()),
		kinesub.WithInitialPosition(kinesub.Horizon()),
		kinesub.WithPollInterval(10*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close(context.Background())
	for i := 0; i < 3; i++ {
		m := <-sub.Messages()
		fmt.Println(handle(m))
		if err := m.Ack(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// APPLES
	// PEARS
	// PLUMS
}
