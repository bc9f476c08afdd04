// Command dynamosink shows effectively-once effects: 300 deposits to 10 accounts are read with
// Subscriber.Process and each is added to its account's balance in DynamoDB through
// dynamosink, in one transaction with the account's high-water mark. Then the whole stream is
// read again from the start, as a consumer that crashed before any checkpoint would: every
// deposit is a replay, and no balance changes.
//
// The stream is served by kinesistest, the Kinesis server in this module; the tables go to the
// DynamoDB the SDK is configured for: run it against the local one, from the repository root,
//
//	scripts/emulators.sh up && eval "$(scripts/emulators.sh env)" && (cd examples && go run ./dynamosink)
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/dynamosink"
	"github.com/gostream/kinesub/kinesistest"
	"github.com/gostream/kinesub/lease"
)

const (
	deposits = 300
	accounts = 10
	stream   = "deposits"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dynamosink:", err)
		os.Exit(1)
	}
}

func run() error {
	// Ctrl-C (SIGINT) or SIGTERM stops it early: the tables are deleted and it exits 0.
	sig, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	if err := demonstrate(sig); err != nil {
		if sig.Err() != nil {
			fmt.Println("interrupted:", context.Cause(sig))
			return nil
		}
		return err
	}
	return nil
}

func demonstrate(sig context.Context) error {
	ctx, cancel := context.WithTimeout(sig, time.Minute)
	defer cancel()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	db := dynamodb.NewFromConfig(cfg)
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	marks, balances := "example-marks-"+suffix, "example-balances-"+suffix
	for _, t := range []string{marks, balances} { // the balances reuse the marks' schema: key (S)
		if err := dynamosink.CreateTable(ctx, db, t); err != nil {
			return err
		}
		defer db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(t)})
	}
	fmt.Printf("tables %s and %s ready\n", marks, balances)
	sink, err := dynamosink.New(db, marks)
	if err != nil {
		return err
	}

	srv := kinesistest.NewServer()
	defer srv.Close()
	if err := publish(ctx, srv.Client()); err != nil {
		return err
	}
	// deposit is a record's effect: its amount added to its account's balance.
	deposit := func(m *kinesub.Message) types.TransactWriteItem {
		return types.TransactWriteItem{Update: &types.Update{
			TableName:                 aws.String(balances),
			Key:                       map[string]types.AttributeValue{"key": &types.AttributeValueMemberS{Value: m.PartitionKey()}},
			UpdateExpression:          aws.String("ADD balance :amount"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":amount": &types.AttributeValueMemberN{Value: string(m.Data())}},
		}}
	}
	for _, pass := range []string{"first reading", "read again from the start"} {
		var applied, replays atomic.Int64
		err := consume(ctx, srv.Client(), func(ctx context.Context, m *kinesub.Message) error {
			err := sink.Apply(ctx, m, deposit(m))
			switch {
			case errors.Is(err, dynamosink.ErrReplay):
				replays.Add(1) // applied before: nothing written; ack
				return nil
			case err != nil:
				return err // Process tries it again
			}
			applied.Add(1)
			return nil
		})
		if err != nil {
			return err
		}
		total, err := sum(ctx, db, balances)
		if err != nil {
			return err
		}
		fmt.Printf("%s: %d deposits applied, %d replays; balances total %d\n", pass, applied.Load(), replays.Load(), total)
	}
	return nil
}

// consume reads the whole stream once with Process, leases in memory, and returns once every
// deposit was handled.
func consume(ctx context.Context, client *kinesis.Client, handle func(context.Context, *kinesub.Message) error) error {
	sub, err := kinesub.Subscribe(ctx, client, stream, kinesub.WithLeaseStore(lease.NewMemory()),
		kinesub.WithStartAt(kinesub.Horizon()), kinesub.WithPollInterval(50*time.Millisecond))
	if err != nil {
		return err
	}
	defer sub.Close(context.Background())
	pctx, stop := context.WithCancel(ctx)
	var handled atomic.Int64
	err = sub.Process(pctx, func(ctx context.Context, m *kinesub.Message) error {
		if err := handle(ctx, m); err != nil {
			return err
		}
		if handled.Add(1) == deposits {
			stop()
		}
		return nil
	}, kinesub.WithConcurrency(32))
	stop()
	if handled.Load() < deposits {
		return err // Process stopped before every deposit was handled: why
	}
	return sub.Close(ctx) // Process returned its ctx's cause, the stop above
}

// publish writes the deposits: amount i+1 to account i%accounts, so the balances total
// deposits*(deposits+1)/2.
func publish(ctx context.Context, client *kinesis.Client) error {
	if _, err := client.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(2)}); err != nil {
		return err
	}
	pub, err := kinesub.NewPublisher(client, stream)
	if err != nil {
		return err
	}
	recs := make([]kinesub.Record, deposits)
	for i := range recs {
		recs[i] = kinesub.Record{PartitionKey: "acct-" + strconv.Itoa(i%accounts), Data: []byte(strconv.Itoa(i + 1))}
	}
	return pub.PublishBatch(ctx, recs)
}

// sum returns the total of the balances.
func sum(ctx context.Context, db *dynamodb.Client, table string) (int, error) {
	out, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, err
	}
	total := 0
	for _, it := range out.Items {
		n, _ := it["balance"].(*types.AttributeValueMemberN)
		if n != nil {
			v, _ := strconv.Atoi(n.Value)
			total += v
		}
	}
	return total, nil
}
