package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/lease"
)

var (
	latency        = flag.Bool("latency", true, "measure publish→delivery latency and client CPU, enhanced fan-out against polling, on kinesistest in a child process")
	latencyRecords = flag.Int("latency-records", 400, "records per latency pass, published one at a time")
	latencyGap     = flag.Duration("latency-gap", 5*time.Millisecond, "time between two published records of a latency pass")
	latencyBurst   = flag.Int("latency-burst", 50, "records published together in the latency passes of the second workload, at the same rate (1: none)")
	latencyProfile = flag.String("latency-cpuprofile", "", "write CPU profiles of the first round's latency passes to this path with .fan-out, .poll-1s and .poll-200ms appended")
)

// latencyFigures measures, for the same records over the same shards, publish→delivery latency
// and the client's CPU time per record over enhanced fan-out, and polling with the default 1 s
// interval and with 200 ms. The kinesistest server and the publisher run in a child process
// (serverchild.go), so the CPU time measured here (getrusage of this process) is the client's
// alone: the subscriber's reading, decoding, delivering and acking, its lease and shard-sync
// work, and, for polling, the GetRecords calls it makes while a shard has nothing new (one per
// shard per poll interval), which are part of what polling costs.
//
// Two workloads of the same records per second: one record at a time, each of which fan-out
// receives in an event of its own, and bursts of records published together, which fan-out
// receives several to an event.
func latencyFigures() error {
	fmt.Println("\n== Publish → delivery latency and client CPU on kinesistest (child process): enhanced fan-out against polling ==")
	ctx := context.Background()
	child, err := startChildServer(false)
	if err != nil {
		return err
	}
	defer child.close()
	stream := fmt.Sprintf("kinesub-bench-latency-%d", time.Now().UnixNano())
	if _, err := createStream(ctx, child.client, stream, int32(*shardCount)); err != nil {
		return err
	}
	workloads := []latencyWorkload{{batch: 1, gap: *latencyGap}}
	if *latencyBurst > 1 {
		workloads = append(workloads, latencyWorkload{batch: *latencyBurst, gap: *latencyGap * time.Duration(*latencyBurst)})
	}
	for i, wl := range workloads {
		if err := wl.run(ctx, child, stream, i == 0); err != nil {
			return err
		}
	}
	return nil
}

// latencyWorkload publishes batch records together every gap.
type latencyWorkload struct {
	batch int
	gap   time.Duration
}

func (wl latencyWorkload) String() string {
	if wl.batch == 1 {
		return fmt.Sprintf("one record every %v", wl.gap)
	}
	return fmt.Sprintf("bursts of %d records every %v", wl.batch, wl.gap)
}

// run measures the workload's passes, alternating the modes in each round, and prints the
// medians; goals says whether the goals apply to it.
func (wl latencyWorkload) run(ctx context.Context, child *childServer, stream string, goals bool) error {
	fmt.Printf("-- %s, %d records a pass over %d shards, each acked on receipt\n", wl, *latencyRecords, *shardCount)
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
	var floors []float64
	for round := range *pairs {
		line := fmt.Sprintf("  round %d:", round+1)
		floor := wakeFloor(wl)
		floors = append(floors, floor)
		line += fmt.Sprintf(" | wake floor %.1f µs", floor/1e3)
		for i, m := range modes {
			prof := ""
			if *latencyProfile != "" && round == 0 {
				prof = fmt.Sprintf("%s.%d.%s", *latencyProfile, wl.batch, strings.ReplaceAll(m.name, " ", "-"))
			}
			lat, cpu, err := latencyPass(ctx, child, stream, wl, m.opts, prof)
			if err != nil {
				return fmt.Errorf("%s, %s pass %d: %w", wl, m.name, round+1, err)
			}
			p50, p99 := percentile(lat, 0.50), percentile(lat, 0.99)
			results[i].p50 = append(results[i].p50, p50)
			results[i].p99 = append(results[i].p99, p99)
			results[i].cpu = append(results[i].cpu, cpu)
			line += fmt.Sprintf(" | %s p50 %.1f ms p99 %.1f ms %.1f µs CPU", m.name, p50, p99, cpu/1e3)
		}
		fmt.Println(line)
	}
	fmt.Printf("  %d rounds, medians (CPU: this process only, per record):\n", *pairs)
	for i, m := range modes {
		fmt.Printf("  %-10s p50 %7.1f ms  p99 %7.1f ms  CPU/record %6.1f µs\n", m.name, median(results[i].p50), median(results[i].p99), median(results[i].cpu)/1e3)
	}
	speedup := median(results[1].p50) / median(results[0].p50)
	goal := ""
	if goals {
		goal = fmt.Sprintf("  goal ≥ 5: %s", verdict(speedup >= 5))
	}
	fmt.Printf("  wake floor             CPU/record %6.1f µs (no I/O: a goroutine woken as often as fan-out receives events)\n", median(floors)/1e3)
	var above []float64
	for r := range results[0].cpu {
		above = append(above, results[0].cpu[r]-floors[r])
	}
	fmt.Printf("  fan-out above the floor           %6.1f µs a record\n", median(above)/1e3)
	fmt.Printf("  p50 poll 1s ÷ fan-out  %6.1f%s\n", speedup, goal)
	for i := 1; i < len(modes); i++ {
		// The ratio of each round's passes, then their median: the passes of a round ran
		// back to back, under the same load from the machine's other jobs.
		var ratios []float64
		for r := range results[0].cpu {
			ratios = append(ratios, results[0].cpu[r]/results[i].cpu[r])
		}
		goal := ""
		if goals && i == 1 {
			goal = fmt.Sprintf("  goal ≤ 1: %s", verdict(median(ratios) <= 1))
		}
		fmt.Printf("  CPU/record fan-out ÷ %-10s %5.2f%s\n", modes[i].name, median(ratios), goal)
	}
	return nil
}

// latencyPass subscribes with opts, has the child publish the pass's records as wl says and
// returns each one's publish→delivery latency in milliseconds, and this process's CPU time per
// record in ns, from the first record's publishing to the last one's ack. A CPU profile of
// that span is written to profile, unless it is empty.
func latencyPass(ctx context.Context, child *childServer, stream string, wl latencyWorkload, opts []kinesub.Option, profile string) ([]float64, float64, error) {
	ctx, cancel := context.WithTimeout(ctx, passTimeout)
	defer cancel()
	opts = append([]kinesub.Option{kinesub.WithLeaseStore(lease.NewMemory()), kinesub.WithInitialPosition(kinesub.AtTimestamp(time.Now())),
		kinesub.WithShardSyncInterval(time.Second)}, opts...)
	sub, err := kinesub.Subscribe(ctx, child.client, stream, opts...)
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
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return nil, 0, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, 0, err
		}
		defer pprof.StopCPUProfile()
	}
	cpu0 := cpuTime()
	go func() { // owned by this pass, which waits for it below
		done <- child.publish(stream, n, wl.gap, *recordSize, wl.batch)
	}()
	lat := make([]float64, 0, n)
	for len(lat) < n {
		select {
		case m, ok := <-sub.Messages():
			if !ok {
				return nil, 0, fmt.Errorf("%d of %d records: the subscription ended: %w", len(lat), n, sub.Err())
			}
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

// wakeFloor returns the CPU time per record, in ns, of this process being woken as often as
// fan-out receives the workload's events, with no I/O at all: a timer every wl.gap wakes a
// goroutine that hands a value to another over a channel, for as many events as a pass has.
// Whatever a process does per event, it pays this at least: on a virtual machine the wake
// itself (timer, scheduler, threads leaving and entering idle) can cost far more than the work.
func wakeFloor(wl latencyWorkload) float64 {
	events := max(*latencyRecords/wl.batch, 1)
	ch := make(chan int)
	done := make(chan struct{})
	go func() { // owned by wakeFloor, which waits for it below
		for range ch {
		}
		close(done)
	}()
	cpu0 := cpuTime()
	t := time.NewTicker(wl.gap)
	for i := range events {
		<-t.C
		ch <- i
	}
	t.Stop()
	close(ch)
	<-done
	return float64(cpuTime()-cpu0) / float64(events*wl.batch)
}

func percentile(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(int(p*float64(len(s))), len(s)-1)]
}
