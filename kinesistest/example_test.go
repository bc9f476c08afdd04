package kinesistest_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/kinesistest"
	"github.com/gostream/kinesub/lease"
)

// report is the code under test: it turns an order record into a line of a report.
func report(msg *kinesub.Message) string { return strings.ToUpper(string(msg.Data())) }

// A handler tested end to end without AWS, Docker or Node.js: the Kinesis server runs in the
// test process, and the subscriber keeps its leases in memory.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := kinesistest.NewServer()
	defer srv.Close()
	if err := srv.CreateStream(ctx, "orders", 1); err != nil {
		log.Fatal(err)
	}
	if _, err := srv.Put(ctx, "orders", "shop-1", []byte("apples"), []byte("pears"), []byte("plums")); err != nil {
		log.Fatal(err)
	}

	sub, err := kinesub.Subscribe(ctx, srv.Client(), "orders",
		kinesub.WithLeaseStore(lease.NewMemory()),
		kinesub.WithInitialPosition(kinesub.Horizon()), // read what was put before Subscribe
		kinesub.WithPollInterval(10*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close(ctx)
	for range 3 {
		msg, ok := <-sub.Messages()
		if !ok {
			log.Fatal(sub.Err()) // the subscription ended
		}
		fmt.Println(report(msg))
		if err := msg.Ack(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// APPLES
	// PEARS
	// PLUMS
}
