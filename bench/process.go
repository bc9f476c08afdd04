package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/lease"
)

// ---- Process: concurrent handlers in order per key ----
//
// In process, the CPU per record of Process with a handler that does nothing, against All's
// (the root package's BenchmarkProcess and BenchmarkPull/all, alternating). End to end on
// kinesistest (child process), a handler that waits 10ms (a timer standing for I/O): Process
// with WithConcurrency(256) against an unordered pool of 256 goroutines fed by Messages() (the
// ceiling without ordering) and against a sequential Messages() loop, with the per-key order of
// what Process handled checked; then keys skewed, half the records on one key.

var (
	processFigs     = flag.Bool("process", true, "measure Process (in process, and end to end on kinesistest)")
	processRecords  = flag.Int("process-records", 20_000, "records of the Process end-to-end stream")
	processKeys     = flag.Int("process-keys", 1000, "partition keys of the Process end-to-end stream")
	processHandler  = flag.Duration("process-handler", 10*time.Millisecond, "what a handler waits per record in the Process end-to-end passes")
	processSeqCount = flag.Int("process-sequential", 1000, "records the sequential loop handles (it takes 10ms each)")
	processSkewed   = flag.Int("process-skewed", 2000, "records of the skewed pass, half of them on one key")
)

const processConcurrency = 256

func processFigures() error {
	fmt.Println("\n== Process: handlers at once, in order per key ==")
	if err := processCPU(); err != nil {
		return err
	}
	return processEndToEnd()
}

// processCPU runs BenchmarkPull/all and BenchmarkProcess alternately and prints the ratios of
// their CPU per record, pair by pair.
func processCPU() error {
	dir, err := os.MkdirTemp("", "kinesub-bench-process")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	bin := filepath.Join(dir, "kinesub.test")
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Dir, build.Stderr = root, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build the benchmarks: %w", err)
	}
	results := map[string][]benchResult{}
	count := fmt.Sprintf("%dx", *benchCount)
	for range *benchPairs {
		for _, pattern := range []string{"^BenchmarkPull$/^all$", "^BenchmarkProcess$/^concurrency=(16|256)$"} {
			if err := runBench(bin, pattern, count, results); err != nil {
				return err
			}
		}
	}
	all := results["BenchmarkPull/all"]
	fmt.Printf("in process: a handler that does nothing, 4 shards, 1,000 keys, pages of 10,000; %d alternating runs of %d records\n", *benchPairs, *benchCount)
	for _, conc := range []string{"16", "256"} {
		proc := results["BenchmarkProcess/concurrency="+conc]
		var ratios, cpus []float64
		for i := range min(len(all), len(proc)) {
			ratios = append(ratios, proc[i]["cpu-ns/record"]/all[i]["cpu-ns/record"])
			cpus = append(cpus, proc[i]["cpu-ns/record"])
		}
		line := fmt.Sprintf("  CPU per record, Process WithConcurrency(%s) ÷ All: %.2f× (%.0f ns ÷ %.0f ns), pairs %s",
			conc, median(ratios), median(cpus), median(column(all, "cpu-ns/record")), list(ratios))
		if conc == "16" {
			line += fmt.Sprintf("  goal ≤ 1.5×: %s", verdict(median(ratios) <= 1.5))
		}
		fmt.Println(line)
	}
	return nil
}

func column(rs []benchResult, unit string) []float64 {
	var xs []float64
	for _, r := range rs {
		xs = append(xs, r[unit])
	}
	return xs
}

func list(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, " ")
}

// processEndToEnd measures records/s with a 10ms handler on kinesistest in a child process.
func processEndToEnd() error {
	ctx := context.Background()
	child, err := startChildServer(false)
	if err != nil {
		return err
	}
	defer child.close()
	client := child.client
	stream := fmt.Sprintf("kinesub-bench-process-%d", time.Now().UnixNano())
	if _, err := createStream(ctx, client, stream, 4); err != nil {
		return err
	}
	defer deleteStream(client, stream)
	if err := publishKeyed(ctx, client, stream, *processRecords, *processKeys, false); err != nil {
		return err
	}
	n := *processRecords
	fmt.Printf("end to end on kinesistest (child process): %d records over %d keys on 4 shards, a handler waiting %v (a timer standing for I/O)\n",
		n, *processKeys, *processHandler)
	seq, err := handlePass(ctx, client, stream, min(*processSeqCount, n), "sequential")
	if err != nil {
		return err
	}
	fmt.Printf("  sequential Messages() loop: %.0f records/s (%d records)\n", seq.rate(), seq.records)
	var ratios []float64
	var procRates []float64
	var violations int64
	for round := range 3 {
		pool, err := handlePass(ctx, client, stream, n, "pool")
		if err != nil {
			return err
		}
		proc, err := handlePass(ctx, client, stream, n, "process")
		if err != nil {
			return err
		}
		violations += proc.violations
		ratios = append(ratios, proc.rate()/pool.rate())
		procRates = append(procRates, proc.rate())
		fmt.Printf("  round %d: unordered pool of %d goroutines fed by Messages() %.0f records/s | Process WithConcurrency(%d) %.0f records/s\n",
			round+1, processConcurrency, pool.rate(), processConcurrency, proc.rate())
	}
	fmt.Printf("  Process ÷ unordered pool: %.2f× (rounds %s)  goal ≥ 0.9×: %s\n", median(ratios), list(ratios), verdict(median(ratios) >= 0.9))
	fmt.Printf("  Process ÷ sequential loop: %.0f×  goal ≥ 50×: %s\n", median(procRates)/seq.rate(), verdict(median(procRates)/seq.rate() >= 50))
	fmt.Printf("  per-key order: %d violations (a record started before the one before it of its key had finished)  goal 0: %s\n", violations, verdict(violations == 0))

	skewed := stream + "-skewed"
	if _, err := createStream(ctx, client, skewed, 4); err != nil {
		return err
	}
	defer deleteStream(client, skewed)
	m := *processSkewed
	if err := publishKeyed(ctx, client, skewed, m, *processKeys, true); err != nil {
		return err
	}
	sk, err := handlePass(ctx, client, skewed, m, "process")
	if err != nil {
		return err
	}
	bound := float64(m) / (float64(m/2) * processHandler.Seconds())
	fmt.Printf("  skewed: %d records, half on one key: Process %.0f records/s (%.1fs); that key's %d records run one after another, %.1fs at %v each, so at most %.0f records/s; per-key order violations %d\n",
		m, sk.rate(), sk.wall.Seconds(), m/2, float64(m/2)*processHandler.Seconds(), *processHandler, bound, sk.violations)
	return nil
}

// publishKeyed publishes n records, record i under key i mod keys (with skewed, every other
// record under key "hot" instead), each carrying "<key>/<count of its key so far>".
func publishKeyed(ctx context.Context, client *kinesis.Client, stream string, n, keys int, skewed bool) error {
	pub, err := kinesub.NewPublisher(client, stream)
	if err != nil {
		return err
	}
	counts := map[string]int{}
	recs := make([]kinesub.Record, n)
	for i := range recs {
		k := "key-" + strconv.Itoa(i%keys)
		if skewed && i%2 == 0 {
			k = "hot"
		}
		recs[i] = kinesub.Record{PartitionKey: k, Data: []byte(k + "/" + strconv.Itoa(counts[k]))}
		counts[k]++
	}
	pctx, cancel := context.WithTimeout(ctx, passTimeout)
	defer cancel()
	return pub.PublishBatch(pctx, recs) // one call keeps each key's order
}

// handled is one end-to-end pass with a slow handler.
type handled struct {
	wall       time.Duration // from the first record received to the last handled
	records    int
	violations int64 // per-key order (Process only)
}

func (h handled) rate() float64 { return float64(h.records) / h.wall.Seconds() }

// handlePass handles n records from the stream's oldest with a handler waiting
// *processHandler: in a sequential Messages loop, in a pool of goroutines fed by Messages (no
// order), or with Process.
func handlePass(ctx context.Context, client *kinesis.Client, stream string, n int, style string) (handled, error) {
	sub, err := kinesub.Subscribe(ctx, client, stream,
		kinesub.WithLeaseStore(lease.NewMemory()),
		kinesub.WithStartAt(kinesub.Horizon()),
		kinesub.WithPollInterval(pollEvery))
	if err != nil {
		return handled{}, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = sub.Close(cctx)
	}()
	pctx, cancel := context.WithTimeout(ctx, passTimeout)
	defer cancel()
	work := func(ctx context.Context) {
		t := time.NewTimer(*processHandler)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	var first atomic.Int64 // when the first record was received, in Unix ns
	var done atomic.Int64
	var last atomic.Int64
	note := func() {
		first.CompareAndSwap(0, time.Now().UnixNano())
	}
	finish := func() {
		if done.Add(1) == int64(n) {
			last.Store(time.Now().UnixNano())
			cancel()
		}
	}
	var violations atomic.Int64
	switch style {
	case "sequential":
	sequential:
		for done.Load() < int64(n) {
			select {
			case m, ok := <-sub.Messages():
				if !ok {
					break sequential // the subscription ended: the count below says how far it got
				}
				note()
				work(pctx)
				_ = m.Ack(pctx)
				finish()
			case <-pctx.Done():
			}
			if pctx.Err() != nil {
				break
			}
		}
	case "pool":
		var wg sync.WaitGroup
		for range processConcurrency {
			wg.Add(1)
			go func() { // owned by this pass, which waits for it
				defer wg.Done()
				for {
					select {
					case m, ok := <-sub.Messages():
						if !ok {
							return // the subscription ended
						}
						note()
						work(pctx)
						_ = m.Ack(ctx)
						finish()
					case <-pctx.Done():
						return
					}
				}
			}()
		}
		wg.Wait()
	case "process":
		var mu sync.Mutex
		next := map[string]int{}
		running := map[string]bool{}
		err := sub.Process(pctx, func(hctx context.Context, m *kinesub.Message) error {
			note()
			key, c, _ := strings.Cut(string(m.Data()), "/")
			i, _ := strconv.Atoi(c)
			mu.Lock()
			if running[key] || i != next[key] {
				violations.Add(1)
			}
			running[key] = true
			mu.Unlock()
			work(hctx)
			mu.Lock()
			running[key] = false
			next[key] = i + 1
			mu.Unlock()
			finish()
			return nil
		}, kinesub.WithConcurrency(processConcurrency))
		if err != nil && pctx.Err() == nil {
			return handled{}, err // not the end of the pass: Process returns its ctx's cause then
		}
	}
	if got := done.Load(); got < int64(n) {
		return handled{}, fmt.Errorf("%s: handled %d of %d records in %v", style, got, n, passTimeout)
	}
	if ctx.Err() != nil {
		return handled{}, errors.New("cancelled")
	}
	return handled{wall: time.Duration(last.Load() - first.Load()), records: n, violations: violations.Load()}, nil
}
