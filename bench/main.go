// Command bench measures kinesub's speed and memory as ratios against baselines measured in the
// same run, so that the figures mean something on a busy or slow machine:
//
//   - in process, with a Kinesis client that serves pre-built pages from memory: deliver + ack
//     per record against a bare channel send/receive, and allocations per record (the
//     root package's go benchmarks, which this command builds and runs);
//   - end to end on the local Kinesis server (kinesalite): records per second and client CPU per
//     record against a hand-written GetRecords loop over the same shards, passes alternating;
//   - checkpoint writes per 10,000 acks, coalesced against written on every advance;
//   - peak heap with a consumer that never acks, against WithMaxInFlight × record size;
//   - GetRecords records per second served by kinesistest (in process) against kinesalite, and
//     kinesub against the raw loop on kinesistest, where the emulator's cost does not hide
//     the library's.
//
// It needs the local servers that `make bench` starts (AWS_ENDPOINT_URL_KINESIS, checked to
// be on loopback, so it never touches real AWS). Run it with `make bench`.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/internal/heapwatch"
	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

var (
	records     = flag.Int("records", 100_000, "records in the end-to-end stream")
	recordSize  = flag.Int("size", 100, "payload bytes per record")
	shardCount  = flag.Int("shards", 4, "shards of the end-to-end stream")
	pairs       = flag.Int("pairs", 5, "end-to-end (raw, kinesub) pass pairs; the median is reported")
	benchPairs  = flag.Int("bench-pairs", 5, "in-process (channel, kinesub) benchmark pairs")
	benchCount  = flag.Int("bench-records", 1_000_000, "records per in-process benchmark run")
	heapCap     = flag.Int("heap-cap", 2500, "WithMaxInFlight of the end-to-end never-acking pass")
	inProcess   = flag.Bool("inprocess", true, "run the in-process go benchmarks")
	endToEnd    = flag.Bool("e2e", true, "run the end-to-end passes on the local Kinesis server")
	cpuProfile  = flag.String("cpuprofile", "", "write a CPU profile of the end-to-end kinesub passes to this file")
	pollEvery   = 20 * time.Millisecond
	passTimeout = 3 * time.Minute
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	if *endToEnd {
		if err := testenv.CheckLoopback(os.Getenv(testenv.KinesisEndpointVar)); err != nil {
			return fmt.Errorf("%s: %v; run `make bench`, which starts the local servers and sets it", testenv.KinesisEndpointVar, err)
		}
	}
	// Nothing here uses DynamoDB, but an endpoint that is set must be local too.
	if v := os.Getenv(testenv.DynamoDBEndpointVar); v != "" {
		if err := testenv.CheckLoopback(v); err != nil {
			return fmt.Errorf("%s: %v", testenv.DynamoDBEndpointVar, err)
		}
	}
	fmt.Println("kinesub benchmarks: every figure is a ratio against a baseline measured in the same run")
	fmt.Printf("machine: %d CPUs (GOMAXPROCS %d), %s, %s %s/%s\n\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), cpuModel(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if *inProcess {
		if err := inProcessFigures(); err != nil {
			return err
		}
	}
	if *endToEnd {
		if err := endToEndFigures(); err != nil {
			return err
		}
	}
	return nil
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// ---- In process: the root package's benchmarks ----

// benchResult is one line of go test -bench output: metric unit → value.
type benchResult map[string]float64

func inProcessFigures() error {
	fmt.Println("== In process: fake Kinesis client serving pre-built pages from memory (go test -bench) ==")
	dir, err := os.MkdirTemp("", "kinesub-bench")
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
	count := fmt.Sprintf("%dx", *benchCount)
	results := map[string][]benchResult{}
	for range *benchPairs {
		for _, pattern := range []string{"^BenchmarkChannelBaseline$", "^BenchmarkDeliverAck$"} {
			if err := runBench(bin, pattern, count, results); err != nil {
				return err
			}
		}
	}
	if err := runBench(bin, "^BenchmarkPeakHeapNeverAck$", "1x", results); err != nil {
		return err
	}

	med := func(name, unit string) float64 {
		var xs []float64
		for _, r := range results[name] {
			xs = append(xs, r[unit])
		}
		return median(xs)
	}
	// Per-pair ratios, so that both sides of each ratio ran under the same load.
	ratio := func(name, base string) float64 {
		var xs []float64
		for i := range min(len(results[name]), len(results[base])) {
			xs = append(xs, results[name][i]["ns/record"]/results[base][i]["ns/record"])
		}
		return median(xs)
	}
	buf, unbuf := "BenchmarkChannelBaseline/buffered=1000", "BenchmarkChannelBaseline/buffered=0"
	co, ea := "BenchmarkDeliverAck/coalesced", "BenchmarkDeliverAck/every-advance"
	fmt.Printf("%d records per run, %d alternating runs each, medians; 4 shards, pages of 10,000, records of 100 bytes\n", *benchCount, *benchPairs)
	for _, row := range []struct{ label, name string }{
		{"baseline: channel send/receive, buffered 1000   ", buf},
		{"baseline: channel send/receive, unbuffered      ", unbuf},
		{"kinesub deliver + ack, checkpoints coalesced    ", co},
		{"kinesub deliver + ack, checkpoint every advance ", ea},
	} {
		fmt.Printf("  %s %7.1f ns/record %7.1f ns CPU/record %8.4f allocs/record\n",
			row.label, med(row.name, "ns/record"), med(row.name, "cpu-ns/record"), med(row.name, "allocs/record"))
	}
	fmt.Printf("  deliver + ack ÷ unbuffered channel (Messages() is unbuffered)  %5.2f×  goal ≤ 2×: %s\n", ratio(co, unbuf), verdict(ratio(co, unbuf) <= 2))
	fmt.Printf("  deliver + ack ÷ buffered channel                               %5.2f×\n", ratio(co, buf))
	cw, ew := med(co, "writes/10k-acks"), med(ea, "writes/10k-acks")
	fmt.Printf("  checkpoint writes per 10,000 acks: coalesced (5s) %.3f (only Close's final flush, one per shard), every advance %.0f: coalesced ÷ every advance %.1e\n",
		cw, ew, cw/ew)
	fmt.Println("  never-acking consumer, 1,000,000-record backlog on 4 shards (served in process: publishing")
	fmt.Println("  1,000,000 records to kinesalite alone would take over a minute; see the end-to-end pass for a real client):")
	for _, name := range []string{"BenchmarkPeakHeapNeverAck/cap=1000", "BenchmarkPeakHeapNeverAck/cap=10000"} {
		rs := results[name]
		if len(rs) == 0 {
			return fmt.Errorf("no result for %s", name)
		}
		r := rs[0]
		fmt.Printf("    WithMaxInFlight(%s): %.0f delivered (cap × shards %.0f); peak heap %.1f MiB, live %.1f MiB, cap × shards × 100 B = %.2f MiB: peak ÷ that %.1f×, live %.0f B per held record; leases lost %.0f, not held at the end %.0f\n",
			strings.TrimPrefix(name, "BenchmarkPeakHeapNeverAck/cap="), r["delivered"], r["cap-records"],
			r["peak-heap-MiB"], r["live-heap-MiB"], r["bound-MiB"], r["peak-heap-MiB"]/r["bound-MiB"],
			r["live-heap-MiB"]*(1<<20)/max(r["delivered"], 1), r["leases-lost"], r["leases-not-held"])
	}
	fmt.Println()
	return nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the kinesub module: run from its directory")
	}
	return filepath.Dir(gomod), nil
}

// runBench runs the benchmarks matching pattern and appends each result line to results.
func runBench(bin, pattern, benchtime string, results map[string][]benchResult) error {
	cmd := exec.Command(bin, "-test.run", "^$", "-test.bench", pattern, "-test.benchtime", benchtime)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("benchmarks %s: %w\n%s%s", pattern, err, out, stderr.Bytes())
	}
	found := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i] // the GOMAXPROCS suffix
		}
		r := benchResult{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return fmt.Errorf("benchmark line %q: %w", sc.Text(), err)
			}
			r[f[i+1]] = v
		}
		results[name] = append(results[name], r)
		found = true
	}
	if !found {
		return fmt.Errorf("benchmarks %s printed no results:\n%s", pattern, out)
	}
	return nil
}

// ---- End to end on the local Kinesis server ----

type pass struct {
	wall    time.Duration
	cpu     time.Duration // user + system CPU of this process
	records int
	writes  int64 // checkpoint writes while consuming
	final   int64 // checkpoint writes including Close
}

func (p pass) rate() float64         { return float64(p.records) / p.wall.Seconds() }
func (p pass) cpuPerRecord() float64 { return float64(p.cpu.Nanoseconds()) / float64(p.records) }

func endToEndFigures() error {
	fmt.Println("== End to end: local Kinesis server (kinesalite) ==")
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(envOr("AWS_REGION", "us-east-1")))
	if err != nil {
		return err
	}
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
		cfg.Credentials = aws.AnonymousCredentials{} // the local server accepts any request
	}
	client := kinesis.NewFromConfig(cfg)
	var b [4]byte
	_, _ = rand.Read(b[:])
	stream := "kinesub-bench-" + hex.EncodeToString(b[:])
	shards, err := createStream(ctx, client, stream, int32(*shardCount))
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = client.DeleteStream(dctx, &kinesis.DeleteStreamInput{StreamName: aws.String(stream), EnforceConsumerDeletion: aws.Bool(true)})
	}()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := publish(ctx, client, stream, *records, *recordSize); err != nil {
		return err
	}
	fmt.Printf("published %d records of %d bytes to %d shards with the Publisher in %.1fs (%.0f records/s)\n",
		*records, *recordSize, *shardCount, time.Since(start).Seconds(), float64(*records)/time.Since(start).Seconds())

	var profile *os.File
	if *cpuProfile != "" {
		if profile, err = os.Create(*cpuProfile); err != nil {
			return err
		}
		defer profile.Close()
	}
	var raws, subs []pass
	for i := range *pairs {
		r, err := rawPass(ctx, client, stream, shards, *records)
		if err != nil {
			return fmt.Errorf("raw pass %d: %w", i+1, err)
		}
		if profile != nil {
			if err := pprof.StartCPUProfile(profile); err != nil {
				return err
			}
		}
		s, err := kinesubPass(ctx, client, stream, *records, 5*time.Second)
		if profile != nil {
			pprof.StopCPUProfile()
			profile = nil // one pass is enough, and keeps the others unprofiled
		}
		if err != nil {
			return fmt.Errorf("kinesub pass %d: %w", i+1, err)
		}
		raws, subs = append(raws, r), append(subs, s)
		fmt.Printf("  pair %d: raw %6.0f records/s %6.0f ns CPU/record | kinesub %6.0f records/s %6.0f ns CPU/record, %d checkpoint writes (%d with Close)\n",
			i+1, r.rate(), r.cpuPerRecord(), s.rate(), s.cpuPerRecord(), s.writes, s.final)
	}
	var rateRatios, cpuRatios, writes []float64
	for i := range raws {
		rateRatios = append(rateRatios, subs[i].rate()/raws[i].rate())
		cpuRatios = append(cpuRatios, subs[i].cpuPerRecord()/raws[i].cpuPerRecord())
		writes = append(writes, float64(subs[i].final)*10000/float64(subs[i].records))
	}
	med := func(ps []pass, f func(pass) float64) float64 {
		var xs []float64
		for _, p := range ps {
			xs = append(xs, f(p))
		}
		return median(xs)
	}
	fmt.Printf("%d pairs, medians; kinesub: WithStartAt(Horizon()), WithBatchSize(10000), poll %v, ack each, fresh lease.Memory; raw: one goroutine per shard, TRIM_HORIZON, Limit 10000\n", *pairs, pollEvery)
	fmt.Printf("  raw GetRecords loop      %8.0f records/s  %7.0f ns CPU/record\n", med(raws, pass.rate), med(raws, pass.cpuPerRecord))
	fmt.Printf("  kinesub                  %8.0f records/s  %7.0f ns CPU/record\n", med(subs, pass.rate), med(subs, pass.cpuPerRecord))
	fmt.Printf("  records/s  kinesub ÷ raw   %5.3f  goal ≥ 0.98: %s\n", median(rateRatios), verdict(median(rateRatios) >= 0.98))
	fmt.Printf("  CPU/record kinesub ÷ raw   %5.3f  goal ≤ 1.10: %s\n", median(cpuRatios), verdict(median(cpuRatios) <= 1.10))

	every, err := kinesubPass(ctx, client, stream, *records, 0)
	if err != nil {
		return fmt.Errorf("every-advance pass: %w", err)
	}
	fmt.Printf("  checkpoint writes per 10,000 acks: coalesced (5s) %.2f, every advance %.0f (coalesced ÷ every advance %.1e); every-advance pass %0.f records/s, %.0f ns CPU/record (÷ coalesced: %.2f, %.2f)\n",
		median(writes), float64(every.final)*10000/float64(every.records), median(writes)/(float64(every.final)*10000/float64(every.records)),
		every.rate(), every.cpuPerRecord(), every.rate()/med(subs, pass.rate), every.cpuPerRecord()/med(subs, pass.cpuPerRecord))

	if err := heapPass(ctx, client, stream, *heapCap); err != nil {
		return fmt.Errorf("never-acking pass: %w", err)
	}
	return serverFigures(client)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func createStream(ctx context.Context, client *kinesis.Client, stream string, shards int32) ([]string, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := client.CreateStream(cctx, &kinesis.CreateStreamInput{
		StreamName: aws.String(stream), ShardCount: aws.Int32(shards),
		StreamModeDetails: &types.StreamModeDetails{StreamMode: types.StreamModeProvisioned},
	}); err != nil {
		return nil, fmt.Errorf("create stream: %w", err)
	}
	w := kinesis.NewStreamExistsWaiter(client, func(o *kinesis.StreamExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 20*time.Millisecond, 200*time.Millisecond
	})
	if err := w.Wait(cctx, &kinesis.DescribeStreamInput{StreamName: aws.String(stream)}, 30*time.Second); err != nil {
		return nil, fmt.Errorf("wait for stream: %w", err)
	}
	out, err := client.ListShards(cctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		return nil, fmt.Errorf("list shards: %w", err)
	}
	var ids []string
	for _, sh := range out.Shards {
		ids = append(ids, aws.ToString(sh.ShardId))
	}
	return ids, nil
}

// publish writes n records of size bytes with the Publisher, from a few goroutines at once.
func publish(ctx context.Context, client *kinesis.Client, stream string, n, size int) error {
	pub, err := kinesub.NewPublisher(client, stream)
	if err != nil {
		return err
	}
	const writers = 4
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var recs []kinesub.Record
			for i := w; i < n; i += writers {
				data := make([]byte, size)
				copy(data, strconv.Itoa(i))
				recs = append(recs, kinesub.Record{PartitionKey: "key-" + strconv.Itoa(i%1024), Data: data})
			}
			pctx, cancel := context.WithTimeout(ctx, passTimeout)
			defer cancel()
			errs[w] = pub.PublishBatch(pctx, recs)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rawPass reads every record with a plain GetRecords loop, one goroutine per shard.
func rawPass(ctx context.Context, client *kinesis.Client, stream string, shards []string, n int) (pass, error) {
	runtime.GC()
	ctx, cancel := context.WithTimeout(ctx, passTimeout)
	defer cancel()
	var total atomic.Int64
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), cpuTime()
	for i, shard := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			it, err := client.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{
				StreamName: aws.String(stream), ShardId: aws.String(shard), ShardIteratorType: types.ShardIteratorTypeTrimHorizon,
			})
			if err != nil {
				errs[i] = err
				return
			}
			iter := it.ShardIterator
			for total.Load() < int64(n) && iter != nil {
				out, err := client.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(10000)})
				if err != nil {
					errs[i] = err
					return
				}
				total.Add(int64(len(out.Records)))
				iter = out.NextShardIterator
				if len(out.Records) == 0 {
					time.Sleep(pollEvery)
				}
			}
		}()
	}
	wg.Wait()
	p := pass{wall: time.Since(start), cpu: cpuTime() - cpu0, records: int(total.Load())}
	if err := errors.Join(errs...); err != nil {
		return p, err
	}
	if p.records != n {
		return p, fmt.Errorf("read %d records, want %d", p.records, n)
	}
	return p, nil
}

// countingStore counts the checkpoint writes that reach a lease store.
type countingStore struct {
	lease.Store
	checkpoints atomic.Int64
}

func (c *countingStore) Checkpoint(ctx context.Context, key, owner, seq string) (bool, error) {
	c.checkpoints.Add(1)
	return c.Store.Checkpoint(ctx, key, owner, seq)
}

// kinesubPass subscribes from the oldest record, acks every message as it arrives and closes
// once n were received. The clock and the CPU count stop at the last ack.
func kinesubPass(ctx context.Context, client *kinesis.Client, stream string, n int, checkpointEvery time.Duration) (pass, error) {
	runtime.GC()
	store := &countingStore{Store: lease.NewMemory()}
	start, cpu0 := time.Now(), cpuTime()
	sub, err := kinesub.Subscribe(ctx, client, stream,
		kinesub.WithStartAt(kinesub.Horizon()),
		kinesub.WithBatchSize(10000),
		kinesub.WithPollInterval(pollEvery),
		kinesub.WithLeaseStore(store),
		kinesub.WithCheckpointInterval(checkpointEvery))
	if err != nil {
		return pass{}, err
	}
	timeout := time.After(passTimeout)
	got := 0
	for got < n {
		select {
		case m, ok := <-sub.Messages():
			if !ok {
				return pass{}, fmt.Errorf("messages closed after %d: %v", got, sub.Err())
			}
			if err := m.Ack(ctx); err != nil {
				return pass{}, err
			}
			got++
		case <-timeout:
			return pass{}, fmt.Errorf("received %d of %d records in %v", got, n, passTimeout)
		}
	}
	p := pass{wall: time.Since(start), cpu: cpuTime() - cpu0, records: got, writes: store.checkpoints.Load()}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sub.Close(cctx); err != nil {
		return p, err
	}
	p.final = store.checkpoints.Load()
	return p, nil
}

// heapPass holds every message it receives and never acks, with WithMaxInFlight(inflight),
// sampling the heap, until nothing more arrives for many lease renewals.
func heapPass(ctx context.Context, client *kinesis.Client, stream string, inflight int) error {
	const (
		ttl  = 300 * time.Millisecond
		hold = 10 * ttl
	)
	store := lease.NewMemory()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	sub, err := kinesub.Subscribe(ctx, client, stream,
		kinesub.WithStartAt(kinesub.Horizon()),
		kinesub.WithBatchSize(10000),
		kinesub.WithPollInterval(pollEvery),
		kinesub.WithLeaseStore(store),
		kinesub.WithOwner("bench"),
		kinesub.WithLeaseTTL(ttl),
		kinesub.WithMaxInFlight(inflight))
	if err != nil {
		return err
	}
	var lost atomic.Int64
	errsDone := make(chan struct{})
	go func() {
		defer close(errsDone)
		for err := range sub.Errors() {
			if errors.Is(err, kinesub.ErrLeaseLost) {
				lost.Add(1)
			}
		}
	}()
	watch := heapwatch.Start(5 * time.Millisecond)
	var held []*kinesub.Message
	var stalledAt time.Time
	for {
		select {
		case m := <-sub.Messages():
			held = append(held, m)
			stalledAt = time.Time{}
			continue
		case <-time.After(50 * time.Millisecond):
		}
		if stalledAt.IsZero() {
			stalledAt = time.Now()
		}
		if time.Since(stalledAt) >= hold && len(held) > 0 {
			break
		}
	}
	peak := watch.Stop()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	live := ms.HeapInuse
	leases, err := store.List(ctx)
	if err != nil {
		return err
	}
	notHeld := *shardCount
	for _, l := range leases {
		if l.Owner == "bench" && l.Held(time.Now()) {
			notHeld--
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond) // nothing will be acked
	defer cancel()
	_ = sub.Close(cctx)
	<-errsDone
	bound := float64(inflight * *shardCount * *recordSize)
	mib := func(b uint64) float64 { return float64(int64(b-base)) / (1 << 20) }
	fmt.Printf("  never-acking consumer, %d-record backlog on %d shards:\n", *records, *shardCount)
	fmt.Printf("    WithMaxInFlight(%d): %d delivered (cap × shards %d); peak heap %.1f MiB, live %.1f MiB, cap × shards × %d B = %.2f MiB: peak ÷ that %.1f×, live %.0f B per held record; leases lost %d, not held at the end %d\n",
		inflight, len(held), inflight**shardCount, mib(peak), mib(live), *recordSize, bound/(1<<20), mib(peak)*(1<<20)/bound,
		mib(live)*(1<<20)/float64(max(len(held), 1)), lost.Load(), notHeld)
	runtime.KeepAlive(held)
	return nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
