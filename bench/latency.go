package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/kinesistest"
	"github.com/gostream/kinesub/lease"
)

var (
	latency        = flag.Bool("latency", true, "measure publish→delivery latency, enhanced fan-out against polling, on kinesistest")
	latencyRecords = flag.Int("latency-records", 400, "records per latency pass, published one at a time")
	latencyGap     = flag.Duration("latency-gap", 5*time.Millisecond, "time between two published records of a latency pass")
)

// latencyFigures publishes records one at a time, each carrying its publish time, and measures
// when each is delivered: over enhanced fan-out, and polling with the default 1 s interval and
// with 200 ms. Everything runs in this process on kinesistest (kinesalite has no fan-out), so
// CPU per record includes the server's and the publisher's, the same for every mode.
func latencyFigures() error {
	fmt.Println("\n== Publish → delivery latency on kinesistest: enhanced fan-out against polling ==")
	ctx := context.Background()
	srv := kinesistest.NewServer()
	defer srv.Close()
	client := srv.Client()
	stream := fmt.Sprintf("kinesub-bench-latency-%d", time.Now().UnixNano())
	if _, err := createStream(ctx, client, stream, int32(*shardCount)); err != nil {
		return err
	}
	pub, err := kinesub.NewPublisher(client, stream)
	if err != nil {
		return err
	}
	modes := []struct {
		name string
		opts []kinesub.Option
	}{
		{"fan-out", []kinesub.Option{kinesub.WithEnhancedFanOut("bench")}},
		{"poll 1s", []kinesub.Option{kinesub.WithPollInterval(time.Second)}},
		{"poll 200ms", []kinesub.Option{kinesub.WithPollInterval(200 * time.Millisecond)}},
	}
	type result struct{ p50, p99, cpu []float64 }
	results := make([]result, len(modes))
	for round := range *pairs {
		line := fmt.Sprintf("  round %d:", round+1)
		for i, m := range modes {
			lat, cpu, err := latencyPass(ctx, client, pub, stream, m.opts)
			if err != nil {
				return fmt.Errorf("%s pass %d: %w", m.name, round+1, err)
			}
			p50, p99 := percentile(lat, 0.50), percentile(lat, 0.99)
			results[i].p50 = append(results[i].p50, p50)
			results[i].p99 = append(results[i].p99, p99)
			results[i].cpu = append(results[i].cpu, cpu)
			line += fmt.Sprintf(" | %s p50 %.1f ms p99 %.1f ms %.0f µs CPU", m.name, p50, p99, cpu/1e3)
		}
		fmt.Println(line)
	}
	fmt.Printf("%d rounds of %d records over %d shards, one every %v, medians:\n", *pairs, *latencyRecords, *shardCount, *latencyGap)
	for i, m := range modes {
		fmt.Printf("  %-10s p50 %7.1f ms  p99 %7.1f ms  CPU/record %6.0f µs\n", m.name, median(results[i].p50), median(results[i].p99), median(results[i].cpu)/1e3)
	}
	speedup := median(results[1].p50) / median(results[0].p50)
	cpuRatio := median(results[0].cpu) / median(results[1].cpu)
	fmt.Printf("  p50 poll 1s ÷ fan-out  %6.1f  goal ≥ 5: %s\n", speedup, verdict(speedup >= 5))
	fmt.Printf("  CPU/record fan-out ÷ poll 1s  %5.2f  goal ≤ 1: %s\n", cpuRatio, verdict(cpuRatio <= 1))
	return nil
}

// latencyPass subscribes with opts, publishes the pass's records one at a time and returns
// each one's publish→delivery latency in milliseconds, and the process's CPU per record in ns.
func latencyPass(ctx context.Context, client *kinesis.Client, pub *kinesub.Publisher, stream string, opts []kinesub.Option) ([]float64, float64, error) {
	ctx, cancel := context.WithTimeout(ctx, passTimeout)
	defer cancel()
	opts = append([]kinesub.Option{kinesub.WithLeaseStore(lease.NewMemory()), kinesub.WithInitialPosition(kinesub.AtTimestamp(time.Now())),
		kinesub.WithShardSyncInterval(time.Second)}, opts...)
	sub, err := kinesub.Subscribe(ctx, client, stream, opts...)
	if err != nil {
		return nil, 0, err
	}
	defer sub.Close(context.Background())
	// Warm up: every shard reads before the measured records are published.
	for {
		reading := 0
		for _, st := range sub.Shards() {
			if st.State == kinesub.ShardReading {
				reading++
			}
		}
		if reading == *shardCount {
			break
		}
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("shards not reading: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	n := *latencyRecords
	done := make(chan error, 1)
	cpu0 := cpuTime()
	go func() { // owned by this pass, which waits for it below
		payload := make([]byte, max(*recordSize, 8))
		for i := range n {
			binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
			if _, err := pub.Publish(ctx, strconv.Itoa(i), payload, nil); err != nil {
				done <- err
				return
			}
			time.Sleep(*latencyGap)
		}
		done <- nil
	}()
	lat := make([]float64, 0, n)
	for len(lat) < n {
		select {
		case m := <-sub.Messages():
			sent := time.Unix(0, int64(binary.BigEndian.Uint64(m.Data())))
			lat = append(lat, float64(time.Since(sent))/float64(time.Millisecond))
			_ = m.Ack(ctx)
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("%d of %d records: %w", len(lat), n, ctx.Err())
		}
	}
	cpu := float64(cpuTime()-cpu0) / float64(n)
	if err := <-done; err != nil {
		return nil, 0, err
	}
	return lat, cpu, nil
}

func percentile(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(int(p*float64(len(s))), len(s)-1)]
}
