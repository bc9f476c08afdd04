package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gostream/kinesub"
)

var (
	publishFigs    = flag.Bool("publish", true, "measure the Publisher on kinesistest enforcing the service's write limits (child process)")
	publishRecords = flag.Int("publish-records", 100_000, "records of the paced publishing pass")
	publishCalls   = flag.Int("publish-calls", 16, "concurrent PublishBatch calls of the publishing passes")
	publishAgg     = flag.Int("publish-agg-records", 250_000, "records of the passes with and without aggregation")
	publishCPU     = flag.Int("publish-cpu-records", 20_000, "records of each CPU pass (Publisher against a raw PutRecords loop)")
	publishProfile = flag.String("publish-cpuprofile", "", "write a CPU profile of the first Publisher CPU pass to this file")
	publishKeys    = 1024 // partition keys of the publishing passes: key-<i mod 1024>
)

// Write limits of a shard, as kinesistest.WithLimits enforces them.
const shardWriteRecords = 1000

// publishFigures measures the Publisher against the service's write limits: how close to the
// time the limits allow a burst from concurrent PublishBatch calls is written, how much faster
// aggregation writes small records, and the client's CPU per record beside a raw PutRecords
// loop. kinesistest runs in a child process, so the CPU is the publisher's alone.
func publishFigures() error {
	fmt.Println("\n== Publishing on kinesistest (child process) enforcing the service's write limits ==")
	ctx := context.Background()
	limited, err := startChildServer(true)
	if err != nil {
		return err
	}
	defer limited.close()
	counted, refused := countRefusals(limited.client)
	shards := *shardCount
	fmt.Printf("%d shards, each taking 1,000 records and 1 MiB a second (a second's worth at once); %d-byte records under %d partition keys,\n", shards, *recordSize, publishKeys)
	fmt.Printf("from %d concurrent PublishBatch calls; the Publisher's defaults (WithPublishTimeout 30s). Goals from one run.\n", *publishCalls)

	stream := fmt.Sprintf("kinesub-bench-pub-%d", time.Now().UnixNano())
	if _, err := createStream(ctx, limited.client, stream, int32(shards)); err != nil {
		return err
	}
	defer deleteStream(limited.client, stream)
	allowed := time.Duration(float64(*publishRecords) / float64(shardWriteRecords*shards) * float64(time.Second))
	refused.Store(0)
	p, err := publishPass(ctx, counted, stream, *publishRecords, *publishCalls, publishKeys)
	ratio := p.wall.Seconds() / allowed.Seconds()
	switch {
	case err != nil:
		fmt.Printf("  %d records: MISSED: not all written: %v\n", *publishRecords, err)
	default:
		why := ""
		if ratio > 1.3 {
			why = missedWhy(p, refused.Load())
		}
		fmt.Printf("  %d records all written in %.1f s, %.2f× the %.0f s the limits allow (goal ≤ 1.3: %s%s); %d refused by the service and resent\n",
			*publishRecords, p.wall.Seconds(), ratio, allowed.Seconds(), verdict(ratio <= 1.3), why, refused.Load())
	}

	var passes [2]pass
	var aggRefused int64
	failed := false
	for i, agg := range []bool{false, true} {
		s := fmt.Sprintf("kinesub-bench-agg-%v-%d", agg, time.Now().UnixNano())
		if _, err := createStream(ctx, limited.client, s, int32(shards)); err != nil {
			return err
		}
		refused.Store(0)
		pp, err := publishPass(ctx, counted, s, *publishAgg, *publishCalls, publishKeys, kinesub.WithPublishAggregation(agg))
		deleteStream(limited.client, s)
		passes[i], aggRefused = pp, refused.Load()
		if err != nil {
			fmt.Printf("  %d records, aggregation %v: not all written: %v\n", *publishAgg, agg, err)
			failed = true
			continue
		}
		mode := "a Kinesis record each"
		if agg {
			mode = "aggregated (KPL)    "
		}
		fmt.Printf("  %d records, %s: all written in %5.1f s (%6.0f records/s); %d Kinesis records refused and resent\n", *publishAgg, mode, pp.wall.Seconds(), pp.rate(), aggRefused)
	}
	speedup := passes[0].wall.Seconds() / passes[1].wall.Seconds()
	switch {
	case failed:
		fmt.Println("  aggregation speed-up (goal ≥ 10): MISSED: a pass did not write every record (above)")
	case speedup < 10:
		fmt.Printf("  aggregation writes %d records of %d B %.1f× faster (goal ≥ 10: MISSED%s)\n", *publishAgg, *recordSize, speedup, missedWhy(passes[1], aggRefused))
	default:
		fmt.Printf("  aggregation writes %d records of %d B %.1f× faster (goal ≥ 10: met)\n", *publishAgg, *recordSize, speedup)
	}
	return publishCPUFigures(ctx)
}

// missedWhy says what slowed a pass down.
func missedWhy(p pass, refused int64) string {
	if refused > 0 {
		return fmt.Sprintf(", because the service refused %d records, each booked again at its shard's pace", refused)
	}
	return fmt.Sprintf(", with nothing refused: the client kept up (%.1f s of CPU in %.1f s) or the machine did not", p.cpu.Seconds(), p.wall.Seconds())
}

// publishCPUFigures measures the client's CPU per record, the Publisher (without and with
// aggregation) against a raw loop of PutRecords calls of 500, rounds alternating, on a
// kinesistest child that enforces no limits (the loop keeps to none).
func publishCPUFigures(ctx context.Context) error {
	free, err := startChildServer(false)
	if err != nil {
		return err
	}
	defer free.close()
	n := *publishCPU
	modes := []string{"raw PutRecords loop", "Publisher", "Publisher, a key a record", "Publisher, aggregation"}
	res := make([][]pass, len(modes))
	const rounds = 3
	for r := range rounds {
		line := fmt.Sprintf("  round %d:", r+1)
		for m, mode := range modes {
			s := fmt.Sprintf("kinesub-bench-cpu-%d-%d", m, time.Now().UnixNano())
			if _, err := createStream(ctx, free.client, s, int32(*shardCount)); err != nil {
				return err
			}
			var p pass
			switch m {
			case 0:
				p, err = rawPublishPass(ctx, free.client, s, n, *publishCalls)
			default:
				var prof *os.File
				if *publishProfile != "" && r == 0 && m == 1 {
					if prof, err = os.Create(*publishProfile); err != nil {
						return err
					}
					if err := pprof.StartCPUProfile(prof); err != nil {
						return err
					}
				}
				keys := publishKeys
				if m == 2 {
					keys = n
				}
				p, err = publishPass(ctx, free.client, s, n, *publishCalls, keys, kinesub.WithPublishAggregation(m == 3))
				if prof != nil {
					pprof.StopCPUProfile()
					prof.Close()
				}
			}
			deleteStream(free.client, s)
			if err != nil {
				return fmt.Errorf("%s: %w", mode, err)
			}
			res[m] = append(res[m], p)
			line += fmt.Sprintf(" %s %5.2f µs |", mode, p.cpuPerRecord()/1000)
		}
		fmt.Println(strings.TrimSuffix(line, " |") + " (CPU per record)")
	}
	fmt.Printf("  client CPU per record, medians of %d rounds of %d records (kinesistest without limits, so the loop is never refused):\n", rounds, n)
	for m, mode := range modes {
		line := fmt.Sprintf("    %-24s %6.2f µs", mode, medianOf(res[m], pass.cpuPerRecord)/1000)
		if m > 0 {
			line += fmt.Sprintf("  (%.2f× the loop's)", ratio(res[m], res[0], pass.cpuPerRecord))
		}
		fmt.Println(line)
	}
	fmt.Printf("  (no goal. A key has one record in flight at a time, so a call carries at most as many records as its\n")
	fmt.Printf("  PublishBatch has keys ready: %d keys over %d calls make calls of a few dozen records, each costing the SDK's\n", publishKeys, *publishCalls)
	fmt.Println("  fixed cost of a request; with a key a record, or aggregated, calls are as full as the pace allows.)")
	return nil
}

// benchRecords returns n records of *recordSize bytes under keys partition keys (record i's
// is key-<i mod keys>), dealt to calls slices as record i goes to call i mod calls.
func benchRecords(n, calls, keys int) [][]kinesub.Record {
	out := make([][]kinesub.Record, calls)
	for i := range n {
		data := make([]byte, *recordSize)
		copy(data, strconv.Itoa(i))
		out[i%calls] = append(out[i%calls], kinesub.Record{PartitionKey: "key-" + strconv.Itoa(i%keys), Data: data})
	}
	return out
}

// publishPass writes n records under keys partition keys from calls concurrent PublishBatch
// calls of one Publisher.
func publishPass(ctx context.Context, client *kinesis.Client, stream string, n, calls, keys int, opts ...kinesub.PublisherOption) (pass, error) {
	pub, err := kinesub.NewPublisher(client, stream, opts...)
	if err != nil {
		return pass{}, err
	}
	return concurrentPass(ctx, benchRecords(n, calls, keys), pub.PublishBatch)
}

// concurrentPass runs write on each slice of recs in a goroutine of its own, timing them all.
func concurrentPass(ctx context.Context, recs [][]kinesub.Record, write func(context.Context, []kinesub.Record) error) (pass, error) {
	runtime.GC()
	errs := make([]error, len(recs))
	var wg sync.WaitGroup
	n := 0
	start, cpu0 := time.Now(), cpuTime()
	for c := range recs {
		n += len(recs[c])
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, passTimeout)
			defer cancel()
			errs[c] = write(pctx, recs[c])
		})
	}
	wg.Wait()
	return pass{wall: time.Since(start), cpu: cpuTime() - cpu0, records: n}, errors.Join(errs...)
}

// rawPublishPass writes n records from calls goroutines, each a loop of PutRecords calls of
// 500 records that resends what was refused.
func rawPublishPass(ctx context.Context, client *kinesis.Client, stream string, n, calls int) (pass, error) {
	return concurrentPass(ctx, benchRecords(n, calls, publishKeys), func(ctx context.Context, recs []kinesub.Record) error {
		var entries []types.PutRecordsRequestEntry
		for _, r := range recs {
			entries = append(entries, types.PutRecordsRequestEntry{PartitionKey: aws.String(r.PartitionKey), Data: r.Data})
		}
		for len(entries) > 0 {
			chunk := entries[:min(500, len(entries))]
			out, err := client.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: chunk})
			if err != nil {
				return err
			}
			var again []types.PutRecordsRequestEntry
			for i, r := range out.Records {
				if r.ErrorCode != nil {
					again = append(again, chunk[i])
				}
			}
			entries = append(again, entries[len(chunk):]...)
		}
		return nil
	})
}

// countRefusals returns a client like c whose PutRecords answers are counted: refused gets the
// records the service refused.
func countRefusals(c *kinesis.Client) (*kinesis.Client, *atomic.Int64) {
	var refused atomic.Int64
	base := http.DefaultTransport
	if hc, ok := c.Options().HTTPClient.(*http.Client); ok && hc.Transport != nil {
		base = hc.Transport
	}
	counted := kinesis.New(c.Options(), func(o *kinesis.Options) {
		o.HTTPClient = &http.Client{Transport: refusalCounter{base: base, refused: &refused}}
	})
	return counted, &refused
}

type refusalCounter struct {
	base    http.RoundTripper
	refused *atomic.Int64
}

func (rc refusalCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := rc.base.RoundTrip(r)
	if err != nil || !strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".PutRecords") || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var out struct{ FailedRecordCount int64 }
	if json.Unmarshal(body, &out) == nil {
		rc.refused.Add(out.FailedRecordCount)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}
