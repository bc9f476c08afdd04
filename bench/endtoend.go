package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/internal/heapwatch"
	"github.com/gostream/kinesub/lease"
)

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

// kinesaliteClient returns a client of the local Kinesis server (kinesalite) make bench starts.
func kinesaliteClient(ctx context.Context) (*kinesis.Client, error) {
	if err := needKinesis(); err != nil {
		return nil, err
	}
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(envOr("AWS_REGION", "us-east-1")))
	if err != nil {
		return nil, err
	}
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
		cfg.Credentials = aws.AnonymousCredentials{} // the local server accepts any request
	}
	return kinesis.NewFromConfig(cfg), nil
}

func endToEndFigures() error {
	fmt.Println("== End to end: local Kinesis server (kinesalite) ==")
	ctx := context.Background()
	client, err := kinesaliteClient(ctx)
	if err != nil {
		return err
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	stream := "kinesub-bench-" + hex.EncodeToString(b[:])
	shards, err := createStream(ctx, client, stream, int32(*shardCount))
	defer deleteStream(client, stream)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := publish(ctx, client, stream, *records, *recordSize, false); err != nil {
		return err
	}
	fmt.Printf("wrote %d records of %d bytes to %d shards with PutRecords calls of 500 in %.1fs (%.0f records/s)\n",
		*records, *recordSize, *shardCount, time.Since(start).Seconds(), float64(*records)/time.Since(start).Seconds())

	var profile *os.File
	if *cpuProfile != "" {
		if profile, err = os.Create(*cpuProfile); err != nil {
			return err
		}
		defer profile.Close()
	}
	rs, err := runRounds(ctx, client, stream, shards, *pairs, true, profile, nil, pollEvery)
	if err != nil {
		return err
	}
	fmt.Printf("%d rounds, passes alternating in each (raw, kinesub Messages(), All, Batches, harlow), medians.\n", *pairs)
	fmt.Printf("kinesub: WithStartAt(Horizon()), WithBatchSize(%d), poll %v, fresh lease.Memory, ack each record (Batches: one Ack a batch);\n", pageRecords, pollEvery)
	fmt.Printf("raw: one goroutine per shard, TRIM_HORIZON, Limit %d; harlow: github.com/harlow/kinesis-consumer %s, Scan, TRIM_HORIZON,\n", pageRecords, harlowVersion)
	fmt.Printf("max records %d, scan interval %v, its memory checkpoint store (a checkpoint a record)\n", pageRecords, pollEvery)
	rs.report(true)
	var writes []float64
	for _, s := range rs.subs["messages"] {
		writes = append(writes, float64(s.final)*10000/float64(s.records))
	}
	subsMsgs := rs.subs["messages"]

	every, err := kinesubPass(ctx, client, stream, *records, 0, "messages")
	if err != nil {
		return fmt.Errorf("every-advance pass: %w", err)
	}
	fmt.Printf("  checkpoint writes per 10,000 acks: coalesced (5s) %.2f, every advance %.0f (coalesced ÷ every advance %.1e); every-advance pass %0.f records/s, %.0f ns CPU/record (÷ coalesced: %.2f, %.2f)\n",
		median(writes), float64(every.final)*10000/float64(every.records), median(writes)/(float64(every.final)*10000/float64(every.records)),
		every.rate(), every.cpuPerRecord(), every.rate()/medianOf(subsMsgs, pass.rate), every.cpuPerRecord()/medianOf(subsMsgs, pass.cpuPerRecord))

	if err := heapPass(ctx, client, stream, *heapCap); err != nil {
		return fmt.Errorf("never-acking pass: %w", err)
	}
	return nil
}

// pageRecords is the most records one GetRecords call of a comparison pass asks for (the
// raw loop's Limit, kinesub's WithBatchSize, harlow's WithMaxRecords).
var pageRecords = 10000

// styles are the consumption styles every comparison round runs.
var styles = []string{"messages", "all", "batches"}

// rounds holds the passes of alternating comparison rounds over one stream.
type rounds struct {
	raws    []pass
	subs    map[string][]pass
	scans   []time.Duration // harlow's scan intervals, one pass each a round
	harlows [][]pass        // by scan interval
}

// runRounds runs n rounds over the stream, each of a raw pass (when raw is set), a kinesub
// pass per style and harlow passes, printing each round. A profile, when given, covers the
// first kinesub Messages() pass. before, when given, runs before each pass, unmeasured. harlow
// runs once a round with each scan interval.
func runRounds(ctx context.Context, client *kinesis.Client, stream string, shards []string, n int, raw bool, profile *os.File, before func(), scans ...time.Duration) (rounds, error) {
	rs := rounds{subs: map[string][]pass{}, scans: scans, harlows: make([][]pass, len(scans))}
	if before == nil {
		before = func() {}
	}
	for i := range n {
		line := fmt.Sprintf("  round %d:", i+1)
		if raw {
			before()
			r, err := rawPass(ctx, client, stream, shards, *records)
			if err != nil {
				return rs, fmt.Errorf("raw pass %d: %w", i+1, err)
			}
			rs.raws = append(rs.raws, r)
			line += fmt.Sprintf(" raw %6.0f/s %5.0f ns |", r.rate(), r.cpuPerRecord())
		}
		for _, style := range styles {
			before()
			if profile != nil && style == "messages" {
				if err := pprof.StartCPUProfile(profile); err != nil {
					return rs, err
				}
			}
			s, err := kinesubPass(ctx, client, stream, *records, 5*time.Second, style)
			if profile != nil && style == "messages" {
				pprof.StopCPUProfile()
				profile = nil // one pass is enough, and keeps the others unprofiled
			}
			if err != nil {
				return rs, fmt.Errorf("kinesub %s pass %d: %w", style, i+1, err)
			}
			rs.subs[style] = append(rs.subs[style], s)
			line += fmt.Sprintf(" %s %6.0f/s %5.0f ns |", style, s.rate(), s.cpuPerRecord())
		}
		for j, scan := range scans {
			before()
			p, err := harlowPass(ctx, client, stream, *records, scan)
			if err != nil {
				return rs, fmt.Errorf("harlow (scan %v) pass %d: %w", scan, i+1, err)
			}
			rs.harlows[j] = append(rs.harlows[j], p)
			line += fmt.Sprintf(" harlow %v %6.0f/s %5.0f ns |", scan, p.rate(), p.cpuPerRecord())
		}
		fmt.Println(strings.TrimSuffix(line, " |") + " (records/s, ns CPU/record)")
	}
	return rs, nil
}

// medianOf is the median of f over the passes.
func medianOf(ps []pass, f func(pass) float64) float64 {
	var xs []float64
	for _, p := range ps {
		xs = append(xs, f(p))
	}
	return median(xs)
}

// ratio is the median of the per-round ratios, so that both sides of each ran under the same load.
func ratio(ps, base []pass, f func(pass) float64) float64 {
	var xs []float64
	for i := range min(len(ps), len(base)) {
		xs = append(xs, f(ps[i])/f(base[i]))
	}
	return median(xs)
}

// report prints the medians and each style's ratios against the raw loop (when the rounds ran
// it) and harlow, with the goals. The raw loop's records/s is a goal only where the loop and
// kinesub keep to the same limits (rateGoal).
func (rs rounds) report(rateGoal bool) {
	if len(rs.raws) > 0 {
		fmt.Printf("  raw GetRecords loop      %8.0f records/s  %7.0f ns CPU/record\n", medianOf(rs.raws, pass.rate), medianOf(rs.raws, pass.cpuPerRecord))
	}
	for _, style := range styles {
		fmt.Printf("  kinesub %-9s        %8.0f records/s  %7.0f ns CPU/record\n", style, medianOf(rs.subs[style], pass.rate), medianOf(rs.subs[style], pass.cpuPerRecord))
	}
	for j, scan := range rs.scans {
		fmt.Printf("  harlow, scan %-9v    %8.0f records/s  %7.0f ns CPU/record\n", scan, medianOf(rs.harlows[j], pass.rate), medianOf(rs.harlows[j], pass.cpuPerRecord))
	}
	goals := map[string]float64{"messages": 1.10, "all": 1.10, "batches": 1.05}
	for _, style := range styles {
		line := fmt.Sprintf("  %-9s", style)
		if len(rs.raws) > 0 {
			rr, cr := ratio(rs.subs[style], rs.raws, pass.rate), ratio(rs.subs[style], rs.raws, pass.cpuPerRecord)
			rate := "no goal: the loop keeps to no limit"
			if rateGoal {
				rate = "goal ≥ 0.98: " + verdict(rr >= 0.98)
			}
			line += fmt.Sprintf(" ÷ raw: records/s %5.3f (%s), CPU/record %5.3f (goal ≤ %.2f: %s);",
				rr, rate, cr, goals[style], verdict(cr <= goals[style]))
		}
		for j, scan := range rs.scans {
			hr, hc := ratio(rs.subs[style], rs.harlows[j], pass.rate), ratio(rs.subs[style], rs.harlows[j], pass.cpuPerRecord)
			line += fmt.Sprintf(" ÷ harlow %v: records/s %5.2f, CPU/record %5.2f (goal > 1 and < 1: %s);", scan, hr, hc, verdict(hr > 1 && hc < 1))
		}
		fmt.Println(strings.TrimSuffix(line, ";"))
	}
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

// publish writes n records of size bytes from a few goroutines at once: with the Publisher,
// which keeps to the service's limits, when paced is set (for a server that enforces them);
// else with plain PutRecords calls of 500, as fast as the server takes them.
func publish(ctx context.Context, client *kinesis.Client, stream string, n, size int, paced bool) error {
	var pub *kinesub.Publisher
	if paced {
		var err error
		if pub, err = kinesub.NewPublisher(client, stream); err != nil {
			return err
		}
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
			if paced {
				errs[w] = pub.PublishBatch(pctx, recs)
				return
			}
			for len(recs) > 0 {
				chunk := recs[:min(500, len(recs))]
				entries := make([]types.PutRecordsRequestEntry, len(chunk))
				for i, r := range chunk {
					entries[i] = types.PutRecordsRequestEntry{PartitionKey: aws.String(r.PartitionKey), Data: r.Data}
				}
				out, err := client.PutRecords(pctx, &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: entries})
				if err == nil && aws.ToInt32(out.FailedRecordCount) > 0 {
					err = fmt.Errorf("%d records refused by a server that enforces no limits", aws.ToInt32(out.FailedRecordCount))
				}
				if err != nil {
					errs[w] = err
					return
				}
				recs = recs[len(chunk):]
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// rawPass reads n records with a hand-written loop: a goroutine per shard calling GetRecords
// as fast as it can, waiting only after an empty page.
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
				out, err := client.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(int32(pageRecords))})
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

func (c *countingStore) CheckpointOrdered(ctx context.Context, key string, h lease.Tenure, cp lease.Checkpoint, n int64) (bool, error) {
	c.checkpoints.Add(1)
	return c.Store.CheckpointOrdered(ctx, key, h, cp, n)
}

// kinesubPass subscribes from the oldest record, acks every message as it arrives and closes
// once n were received. The clock and the CPU count stop at the last ack.
func kinesubPass(ctx context.Context, client *kinesis.Client, stream string, n int, checkpointEvery time.Duration, style string) (pass, error) {
	runtime.GC()
	store := &countingStore{Store: lease.NewMemory()}
	start, cpu0 := time.Now(), cpuTime()
	sub, err := kinesub.Subscribe(ctx, client, stream,
		kinesub.WithStartAt(kinesub.Horizon()),
		kinesub.WithBatchSize(pageRecords),
		kinesub.WithPollInterval(pollEvery),
		kinesub.WithLeaseStore(store),
		kinesub.WithCheckpointInterval(checkpointEvery))
	if err != nil {
		return pass{}, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = sub.Close(cctx) // a no-op once the pass closed it
	}()
	pctx, cancel := context.WithTimeout(ctx, passTimeout)
	defer cancel()
	got := 0
	switch style {
	case "messages":
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
			case <-pctx.Done():
			}
			if pctx.Err() != nil {
				break
			}
		}
	case "all":
		for m, err := range sub.All(pctx) {
			if err == nil {
				err = m.Ack(ctx)
			}
			if err != nil {
				return pass{}, err
			}
			if got++; got == n {
				break
			}
		}
	case "batches":
		for b, err := range sub.Batches(pctx) {
			if err == nil {
				err = b.Ack(ctx)
			}
			if err != nil {
				return pass{}, err
			}
			if got += len(b.Messages()); got >= n {
				break
			}
		}
	}
	if got < n {
		return pass{}, fmt.Errorf("received %d of %d records in %v", got, n, passTimeout)
	}
	p := pass{wall: time.Since(start), cpu: cpuTime() - cpu0, records: got, writes: store.checkpoints.Load()}
	cctx, cancelClose := context.WithTimeout(ctx, 10*time.Second)
	defer cancelClose()
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
		kinesub.WithBatchSize(pageRecords),
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
		case m, ok := <-sub.Messages():
			if !ok {
				return fmt.Errorf("the subscription ended: %w", sub.Err())
			}
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
		// A shard lease of this subscriber's ("bench" and its incarnation), not its heartbeat row.
		if lease.KindOf(l.Key) == lease.KindShard && strings.HasPrefix(l.Owner, "bench#") && l.Held(time.Now()) {
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
