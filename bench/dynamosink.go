package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gostream/kinesub/dynamosink"
	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// ---- dynamosink: effectively-once writes against a plain PutItem ----
//
// On dynalite, one writer: the time and client CPU per record of writing its effect (one
// item) through dynamosink (a TransactWriteItems of the item and its key's mark) against a plain
// PutItem of the same item, passes alternating, medians of their ratios. DynamoDB's own price
// follows from its billing: a transactional write costs 2 write units per item, so the sink
// writes 2 items at 2 units each where PutItem writes 1 at 1.

var (
	sinkFigs    = flag.Bool("dynamosink", true, "measure dynamosink's cost per record against a plain PutItem, on dynalite")
	sinkRecords = flag.Int("dynamosink-records", 2000, "records per dynamosink pass")
	sinkPairs   = flag.Int("dynamosink-pairs", 5, "(PutItem, dynamosink) pass pairs; the median ratio is reported")
)

func sinkFigures() error {
	fmt.Println("\n== dynamosink: effectively-once writes against a plain PutItem (dynalite, one writer) ==")
	if err := testenv.CheckLoopback(os.Getenv(testenv.DynamoDBEndpointVar)); err != nil {
		return fmt.Errorf("%s: %v; run `make bench`, which starts the local servers and sets it", testenv.DynamoDBEndpointVar, err)
	}
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(envOr("AWS_REGION", "us-east-1")))
	if err != nil {
		return err
	}
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
		cfg.Credentials = aws.AnonymousCredentials{}
	}
	db := dynamodb.NewFromConfig(cfg)
	var b [4]byte
	_, _ = rand.Read(b[:])
	effects, marks := "kinesub-bench-effects-"+hex.EncodeToString(b[:]), "kinesub-bench-marks-"+hex.EncodeToString(b[:])
	for _, t := range []string{effects, marks} {
		if err := dynamosink.CreateTable(ctx, db, t); err != nil { // both keyed by "key" (S)
			return err
		}
		defer func() {
			_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(t)})
		}()
	}
	sink, err := dynamosink.New(db, marks)
	if err != nil {
		return err
	}
	item := func(i int) map[string]ddbtypes.AttributeValue {
		return map[string]ddbtypes.AttributeValue{
			"key":  &ddbtypes.AttributeValueMemberS{Value: "k" + strconv.Itoa(i%100)},
			"data": &ddbtypes.AttributeValueMemberS{Value: fmt.Sprintf("record %d: %0100d", i, i)},
		}
	}
	n := *sinkRecords
	seq := 1000 // rises across passes, so that every sink write is a new record
	plainPass := func() error {
		for i := range n {
			if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(effects), Item: item(i)}); err != nil {
				return err
			}
		}
		return nil
	}
	sinkPass := func() error {
		for i := range n {
			seq++
			m := dynamosink.Mark{Key: "k" + strconv.Itoa(i%100), Shard: "shardId-000000000000", Sequence: strconv.Itoa(seq),
				Tenure: lease.Tenure{Owner: "bench", Counter: 1}}
			if err := sink.ApplyMark(ctx, m, ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{TableName: aws.String(effects), Item: item(i)}}); err != nil {
				return err
			}
		}
		return nil
	}
	measure := func(pass func() error) (wall, cpu time.Duration, err error) {
		c0, t0 := cpuTime(), time.Now()
		err = pass()
		return time.Since(t0) / time.Duration(n), (cpuTime() - c0) / time.Duration(n), err
	}
	var wallRatios, cpuRatios []float64
	for p := range *sinkPairs {
		pw, pc, err := measure(plainPass)
		if err != nil {
			return fmt.Errorf("PutItem pass: %w", err)
		}
		sw, sc, err := measure(sinkPass)
		if err != nil {
			return fmt.Errorf("dynamosink pass: %w", err)
		}
		wallRatios = append(wallRatios, float64(sw)/float64(pw))
		cpuRatios = append(cpuRatios, float64(sc)/float64(pc))
		fmt.Printf("  pair %d: per record PutItem %v (client CPU %v), dynamosink %v (client CPU %v)\n",
			p+1, pw.Round(time.Microsecond), pc.Round(time.Microsecond), sw.Round(time.Microsecond), sc.Round(time.Microsecond))
	}
	fmt.Printf("dynamosink / PutItem, %d records a pass, median of %d pairs: time per record %.2f×, client CPU per record %.2f×\n",
		n, *sinkPairs, median(wallRatios), median(cpuRatios))
	fmt.Println("DynamoDB write units per record (from its billing, not measured): PutItem 1, dynamosink 4 (2 items × 2 for a transaction): 4.00×")
	return nil
}
