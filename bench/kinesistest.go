package main

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
)

// serviceSpacing is the time kinesub keeps between two GetRecords calls on a shard (5 a
// second), as harlow's scan interval in the passes that compare the two at the same pace.
const serviceSpacing = 200 * time.Millisecond

// serverFigures measures kinesistest against kinesalite with the same raw GetRecords loop over
// streams of the same shape, passes alternating; then kinesub against that loop and harlow on
// kinesistest, where the emulator's cost no longer hides the library's; then kinesub against
// harlow on kinesistest enforcing the service's throughput limits, as real Kinesis does.
// kinesistest runs in a child process (this command run again), so the CPU figures are the
// client's alone, as they are on kinesalite.
func serverFigures() error {
	fmt.Println("\n== kinesistest (child process) against kinesalite ==")
	ctx := context.Background()
	kinesalite, err := kinesaliteClient(ctx)
	if err != nil {
		return err
	}
	child, err := startChildServer(false)
	if err != nil {
		return err
	}
	defer child.close()
	local := child.client
	stream := fmt.Sprintf("kinesub-bench-kt-%d", time.Now().UnixNano())
	servers := []struct {
		name   string
		client *kinesis.Client
		shards []string
	}{{name: "kinesalite", client: kinesalite}, {name: "kinesistest", client: local}}
	for i := range servers {
		s := &servers[i]
		shards, err := benchStream(ctx, s.client, stream, false)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		defer deleteStream(s.client, stream)
		s.shards = shards
	}
	var ratios []float64
	var kl, kt []pass
	for i := range *pairs {
		a, err := rawPass(ctx, kinesalite, stream, servers[0].shards, *records)
		if err != nil {
			return fmt.Errorf("kinesalite raw pass %d: %w", i+1, err)
		}
		b, err := rawPass(ctx, local, stream, servers[1].shards, *records)
		if err != nil {
			return fmt.Errorf("kinesistest raw pass %d: %w", i+1, err)
		}
		kl, kt = append(kl, a), append(kt, b)
		ratios = append(ratios, b.rate()/a.rate())
		fmt.Printf("  pair %d: kinesalite %8.0f records/s | kinesistest %8.0f records/s\n", i+1, a.rate(), b.rate())
	}
	fmt.Printf("%d pairs, medians; the raw GetRecords loop of the end-to-end figures, %d × %d B records over %d shards\n", *pairs, *records, *recordSize, *shardCount)
	fmt.Printf("  GetRecords records/s kinesistest ÷ kinesalite  %6.1f (%.0f ÷ %.0f)  goal ≥ 10: %s\n",
		median(ratios), medianOf(kt, pass.rate), medianOf(kl, pass.rate), verdict(median(ratios) >= 10))

	fmt.Println("\n== End to end on kinesistest (child process, no throughput limits): the client's CPU alone ==")
	rs, err := runRounds(ctx, local, stream, servers[1].shards, *pairs, true, nil, nil, pollEvery, serviceSpacing)
	if err != nil {
		return fmt.Errorf("kinesistest: %w", err)
	}
	fmt.Printf("%d rounds, passes alternating in each as on kinesalite, with harlow twice: a call every %v, and every %v\n", *pairs, pollEvery, serviceSpacing)
	fmt.Println("as kinesub spaces its calls to keep to the service's 5 calls a second per shard. The raw loop keeps to no limit:")
	rs.report(false)
	return nil
}

// limitFigures compares kinesub with harlow on kinesistest enforcing the service's throughput
// limits, over a backlog long enough for the limits to set the pace.
func limitFigures() error {
	fmt.Println("\n== End to end on kinesistest (child process) enforcing the service's throughput limits ==")
	ctx := context.Background()
	stream := fmt.Sprintf("kinesub-bench-limits-%d", time.Now().UnixNano())
	limited, err := startChildServer(true)
	if err != nil {
		return err
	}
	defer limited.close()
	start := time.Now()
	shards, err := benchStream(ctx, limited.client, stream, true)
	if err != nil {
		return fmt.Errorf("kinesistest with limits: %w", err)
	}
	defer deleteStream(limited.client, stream)
	fmt.Printf("published %d records with the Publisher in %.1fs (the limits allow %.0fs: 1,000 records/s per shard)\n", *records, time.Since(start).Seconds(), float64(*records)/float64(1000**shardCount))
	// Pages of 1,000 records make the backlog 25 pages a shard, longer than the burst the
	// limits allow, so that they set the pace. Each pass starts with the shards' limits
	// unspent, as the first did: a pass that ended on a large read would otherwise throttle
	// the next one's first calls.
	pageRecords = 1000
	defer func() { pageRecords = 10000 }()
	refill := func() { time.Sleep(2 * time.Second) }
	n := min(*pairs, 3)
	rs, err := runRounds(ctx, limited.client, stream, shards, n, false, nil, refill, pollEvery, serviceSpacing)
	if err != nil {
		return fmt.Errorf("kinesistest with limits: %w", err)
	}
	fmt.Printf("%d rounds, passes alternating (kinesub Messages(), All, Batches, harlow every %v and every %v), medians,\n", n, pollEvery, serviceSpacing)
	fmt.Printf("pages of %d records (kinesub WithBatchSize, harlow WithMaxRecords). Per shard, 5 GetRecords calls in any second\n", pageRecords)
	fmt.Println("and 2 MB read a second, as on the service; a call over is refused with ProvisionedThroughputExceededException,")
	fmt.Println("which kinesub and harlow (through the SDK's retries and its own) retry. Every pass starts with the limits unspent:")
	rs.report(false)
	return nil
}

// benchStream creates the stream with *shardCount shards and publishes *records records of
// *recordSize bytes to it, with the Publisher when paced is set (see publish).
func benchStream(ctx context.Context, client *kinesis.Client, stream string, paced bool) ([]string, error) {
	shards, err := createStream(ctx, client, stream, int32(*shardCount))
	if err != nil {
		return nil, err
	}
	if err := publish(ctx, client, stream, *records, *recordSize, paced); err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	return shards, nil
}

// deleteStream deletes the stream, within 10 seconds, ignoring failure.
func deleteStream(client *kinesis.Client, stream string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = client.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String(stream), EnforceConsumerDeletion: aws.Bool(true)})
}
