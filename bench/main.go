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
//   - GetRecords records per second served by kinesistest against kinesalite; kinesub against
//     the raw loop and harlow on kinesistest, where the emulator's cost does not hide the
//     library's; and kinesub against harlow on kinesistest enforcing the service's throughput
//     limits, as real Kinesis does (kinesistest in a child process, so that only the client's
//     CPU is counted);
//   - publish→delivery latency (p50, p99) and client CPU per record over enhanced fan-out
//     against polling every 1 s and every 200 ms, on kinesistest run with the publisher in a
//     child process (this command run again), so that only the client's CPU is counted;
//   - lease-table DynamoDB calls, items read and read units per instance per minute at steady
//     state: listing the whole table every claim tick, against the change row with a filtered
//     Scan of the table, against the change row with the lease_stream index;
//   - with -startup, the time from Subscribe to every shard of a 1,000-shard stream held and
//     delivering, with 1 and 3 instances, and the heap per held shard;
//   - lease writes (leasewrites.go): DynamoDB writes per instance-minute with 64 and 1,000 idle
//     shards over 4 instances (on kinesistest in a child process, the table on dynalite through
//     the counting proxy) against the per-shard-renewal protocol's; the time from an instance's
//     crash until its shards are read again; and the rolling-deploy figures of cmd/chaos -deploy;
//   - publishing on kinesistest enforcing the service's write limits (a child process): a
//     burst from concurrent PublishBatch calls against the time the limits allow, aggregation
//     against none, and the publisher's CPU per record against a raw PutRecords loop;
//   - Process (process.go): CPU per record against All's with a handler that does nothing, and
//     records/s with a 10ms handler against an unordered pool and a sequential loop;
//   - dynamosink (dynamosink.go): time and client CPU per record of an effect written through
//     dynamosink against a plain PutItem, on dynalite.
//   - tracing left off (tracing.go): delivery and Process as shipped against the library built
//     with the tag kinesub_notrace, which compiles tracing's hooks out.
//
// It needs the local servers that `make bench` starts (AWS_ENDPOINT_URL_KINESIS and
// AWS_ENDPOINT_URL_DYNAMODB, checked to be on loopback, so it never touches real AWS). Run it
// with `make bench`; -only runs some sections (make bench BENCHFLAGS=-only=publish). A section
// that cannot run says why, and the others still run.
package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gostream/kinesub/internal/testenv"
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
	only        = flag.String("only", "", "run only these sections, comma-separated: inprocess, e2e, kinesistest, limits, latency, leasecost, leasewrites, startup, publish, process, fleet, dynamosink, tracing")
	pollEvery   = 20 * time.Millisecond
	passTimeout = 3 * time.Minute
)

func main() {
	if mode := os.Getenv(childEnv); mode == "server" || mode == "server-limits" {
		if err := serverChild(mode == "server-limits"); err != nil {
			fmt.Fprintln(os.Stderr, "bench child:", err)
			os.Exit(1)
		}
		return
	}
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// section is one part of the figures: a failure is reported and the next section runs.
type section struct {
	name string // for -only
	on   *bool
	run  func() error
}

var sections = []section{
	{"inprocess", inProcess, inProcessFigures},
	{"e2e", endToEnd, endToEndFigures},
	{"kinesistest", endToEnd, serverFigures},
	{"limits", endToEnd, limitFigures},
	{"latency", latency, latencyFigures},
	{"leasecost", leaseCost, leaseCostFigures},
	{"leasewrites", leaseWrites, leaseWritesFigures},
	{"startup", startup, startupFigures},
	{"publish", publishFigs, publishFigures},
	{"process", processFigs, processFigures},
	{"fleet", fleetOn, fleetFigures},
	{"dynamosink", sinkFigs, sinkFigures},
	{"tracing", tracingFigs, tracingFigures},
}

func run() error {
	if *only != "" {
		onlySet = map[string]bool{}
		for _, name := range strings.Split(*only, ",") {
			onlySet[strings.TrimSpace(name)] = true
		}
		unknown := maps.Clone(onlySet)
		for _, sec := range sections {
			delete(unknown, sec.name)
		}
		if len(unknown) > 0 {
			return fmt.Errorf("-only %q: unknown sections %v; they are inprocess, e2e, kinesistest, limits, latency, leasecost, leasewrites, startup, publish, process, fleet, dynamosink, tracing", *only, slices.Sorted(maps.Keys(unknown)))
		}
	}
	// An endpoint that is set must be local; the sections that need one check it is set.
	for _, v := range []string{testenv.KinesisEndpointVar, testenv.DynamoDBEndpointVar} {
		if e := os.Getenv(v); e != "" {
			if err := testenv.CheckLoopback(e); err != nil {
				return fmt.Errorf("%s: %v", v, err)
			}
		}
	}
	fmt.Println("kinesub benchmarks: every figure is a ratio against a baseline measured in the same run")
	fmt.Printf("machine: %d CPUs (GOMAXPROCS %d), %s, %s %s/%s\n\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), cpuModel(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	var failed []string
	for _, sec := range sections {
		if onlySet != nil && !onlySet[sec.name] || onlySet == nil && !*sec.on {
			continue
		}
		if err := sec.safeRun(); err != nil {
			// Say why, and go on: the other sections' figures still mean something.
			fmt.Printf("\n!! section %s could not run to its end: %v\n", sec.name, err)
			failed = append(failed, sec.name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("sections that could not run to their end: %s (see above)", strings.Join(failed, ", "))
	}
	return nil
}

// safeRun runs the section, turning a panic into its error.
func (sec section) safeRun() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return sec.run()
}

// onlySet holds the sections -only names, which run whatever their own flags say; nil runs
// every section whose flag is on.
var onlySet map[string]bool

// needKinesis checks that the local Kinesis server the section reads is configured.
func needKinesis() error {
	if err := testenv.CheckLoopback(os.Getenv(testenv.KinesisEndpointVar)); err != nil {
		return fmt.Errorf("%s: %v; run `make bench`, which starts the local servers and sets it", testenv.KinesisEndpointVar, err)
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

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rawPass reads every record with a plain GetRecords loop, one goroutine per shard.
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
