package kinesub

// Benchmarks of the library's own cost, with a Kinesis client that serves records from memory
// at once. Figures are per record (one benchmark op is one record delivered and acked) so that
// they divide directly by BenchmarkChannelBaseline's; `go run ./bench` runs both and prints the
// ratio. They run without emulators.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/gostream/kinesub/internal/heapwatch"
	"github.com/gostream/kinesub/lease"
)

const (
	benchShards     = 4
	benchRecordSize = 100
	benchPage       = 10000 // records per GetRecords call, the service's maximum
)

// pageKinesis serves GetRecords pages of an open stream from memory, without delay.
//
// Shared pages (fresh false) hand out slices of one pre-built ring of records, so that a
// benchmark's allocations are the library's alone; the ring repeats its sequence numbers, so a
// reader that reopens after a sequence number would go back (benchmarks never reopen). Fresh
// pages allocate every record's data and sequence number on each call, as the SDK's decoder
// does, so that what a consumer holds on to costs what it costs with a real client.
//
// GetRecords blocks until start is called, so that setup (listing, leasing, opening iterators)
// stays out of the measurement.
type pageKinesis struct {
	perShard int  // records in each shard
	fresh    bool // allocate each record per call, as the SDK does
	ring     []types.Record
	shards   []types.Shard
	arrival  time.Time
	key      string

	startOnce sync.Once
	started   chan struct{}
	calls     atomic.Int64
}

func newPageKinesis(perShard int, fresh bool) *pageKinesis {
	f := &pageKinesis{
		perShard: perShard,
		fresh:    fresh,
		arrival:  time.Now(),
		key:      "key",
		started:  make(chan struct{}),
	}
	for i := range benchShards {
		f.shards = append(f.shards, types.Shard{
			ShardId:             aws.String(fmt.Sprintf("shardId-%012d", i)),
			SequenceNumberRange: &types.SequenceNumberRange{StartingSequenceNumber: aws.String(benchSequence(0))},
		})
	}
	if !fresh {
		data := make([]byte, benchRecordSize)
		for i := range data {
			data[i] = 'a' + byte(i%26)
		}
		f.ring = make([]types.Record, 2*benchPage)
		for i := range f.ring {
			f.ring[i] = types.Record{
				Data: data, PartitionKey: &f.key, SequenceNumber: aws.String(benchSequence(i)),
				ApproximateArrivalTimestamp: &f.arrival,
			}
		}
	}
	return f
}

// benchSequence returns a 56-digit sequence number, as long as the service's.
func benchSequence(i int) string { return fmt.Sprintf("%056d", i) }

func (f *pageKinesis) start() { f.startOnce.Do(func() { close(f.started) }) }

func (f *pageKinesis) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, _ ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	return &kinesis.DescribeStreamSummaryOutput{StreamDescriptionSummary: &types.StreamDescriptionSummary{
		StreamName: in.StreamName, StreamStatus: types.StreamStatusActive, OpenShardCount: aws.Int32(benchShards),
	}}, nil
}

func (f *pageKinesis) ListShards(ctx context.Context, in *kinesis.ListShardsInput, _ ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	return &kinesis.ListShardsOutput{Shards: f.shards}, nil
}

func (f *pageKinesis) shardIndex(id string) (int, error) {
	for i, sh := range f.shards {
		if *sh.ShardId == id {
			return i, nil
		}
	}
	return 0, &types.ResourceNotFoundException{Message: aws.String("no shard " + id)}
}

// Iterators are "<shard index>:<offset>".
func (f *pageKinesis) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, _ ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	sh, err := f.shardIndex(aws.ToString(in.ShardId))
	if err != nil {
		return nil, err
	}
	var off int
	switch in.ShardIteratorType {
	case types.ShardIteratorTypeTrimHorizon:
	case types.ShardIteratorTypeLatest:
		off = f.perShard
	case types.ShardIteratorTypeAtSequenceNumber, types.ShardIteratorTypeAfterSequenceNumber:
		n, err := strconv.ParseInt(aws.ToString(in.StartingSequenceNumber), 10, 64)
		if err != nil {
			return nil, &types.InvalidArgumentException{Message: aws.String(err.Error())}
		}
		off = int(n)
		if in.ShardIteratorType == types.ShardIteratorTypeAfterSequenceNumber {
			off++
		}
	default:
		return nil, &types.InvalidArgumentException{Message: aws.String("unsupported iterator type")}
	}
	return &kinesis.GetShardIteratorOutput{ShardIterator: aws.String(fmt.Sprintf("%d:%d", sh, min(off, f.perShard)))}, nil
}

func (f *pageKinesis) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	select {
	case <-f.started:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	f.calls.Add(1)
	shard, offset, ok := strings.Cut(aws.ToString(in.ShardIterator), ":")
	sh, err1 := strconv.Atoi(shard)
	off, err2 := strconv.Atoi(offset)
	if !ok || err1 != nil || err2 != nil {
		return nil, &types.InvalidArgumentException{Message: aws.String("bad iterator")}
	}
	n := min(int(aws.ToInt32(in.Limit)), f.perShard-off)
	var recs []types.Record
	if f.fresh {
		recs = make([]types.Record, n)
		for i := range recs {
			data := make([]byte, benchRecordSize)
			data[0] = byte(off + i)
			recs[i] = types.Record{
				Data: data, PartitionKey: &f.key, SequenceNumber: aws.String(benchSequence(off + i)),
				ApproximateArrivalTimestamp: &f.arrival,
			}
		}
	} else {
		at := off % len(f.ring)
		n = min(n, len(f.ring)-at)
		recs = f.ring[at : at+n]
	}
	return &kinesis.GetRecordsOutput{
		Records:            recs,
		NextShardIterator:  aws.String(fmt.Sprintf("%d:%d", sh, off+n)),
		MillisBehindLatest: aws.Int64(0),
	}, nil
}

func (f *pageKinesis) CreateStream(context.Context, *kinesis.CreateStreamInput, ...func(*kinesis.Options)) (*kinesis.CreateStreamOutput, error) {
	return nil, errors.New("pageKinesis: CreateStream is not supported")
}

func (f *pageKinesis) PutRecords(context.Context, *kinesis.PutRecordsInput, ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	return nil, errors.New("pageKinesis: PutRecords is not supported")
}

func (f *pageKinesis) PutRecord(context.Context, *kinesis.PutRecordInput, ...func(*kinesis.Options)) (*kinesis.PutRecordOutput, error) {
	return nil, errors.New("pageKinesis: PutRecord is not supported")
}

// benchSubscribe subscribes to f and returns once every shard's reader is waiting for f to
// start. The readers' service rate limits (5 calls and 2 MB per second per shard) are lifted:
// the fake imposes none, and a figure held to them would measure the limiter's sleeps rather
// than the library's cost.
func benchSubscribe(b testing.TB, f *pageKinesis, opts ...Option) *Subscriber {
	b.Helper()
	return benchSubscribeTo(b, f, opts...)
}

func closeBench(b *testing.B, sub *Subscriber, d time.Duration) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := sub.Close(ctx); err != nil {
		b.Fatal(err)
	}
}

// cpuTime returns the user and system CPU time used so far by the whole process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// mallocs returns the number of heap allocations made so far by the whole process.
func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// BenchmarkChannelBaseline is the floor BenchmarkDeliverAck is compared with: b.N pointers sent
// by one goroutine and received by another, through a channel as deep as the Subscriber's
// default buffer (buffered=1000), and through an unbuffered channel like Messages() (where
// every receive is a hand-off between goroutines).
func BenchmarkChannelBaseline(b *testing.B) {
	for _, depth := range []int{1000, 0} {
		b.Run(fmt.Sprintf("buffered=%d", depth), func(b *testing.B) {
			type item struct{ data []byte }
			it := &item{data: make([]byte, benchRecordSize)}
			ch := make(chan *item, depth)
			runtime.GC()
			m0, cpu0 := mallocs(), cpuTime()
			b.ResetTimer()
			go func() {
				for range b.N {
					ch <- it
				}
				close(ch)
			}()
			n := 0
			for m := range ch {
				if m != nil {
					n++
				}
			}
			b.StopTimer()
			cpu := cpuTime() - cpu0
			if n != b.N {
				b.Fatalf("received %d of %d", n, b.N)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/record")
			b.ReportMetric(float64(mallocs()-m0)/float64(b.N), "allocs/record")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/record")
		})
	}
}

// BenchmarkDeliverAck receives b.N records from four shards and acks each as it arrives, with
// checkpoints coalesced (the default 5s interval) or written on every advance of a watermark,
// and coalesced with metrics going to an OpenTelemetry SDK provider with a reader attached
// (the others use the global provider, a no-op).
func BenchmarkDeliverAck(b *testing.B) {
	for _, bc := range []struct {
		name     string
		interval time.Duration
		metered  bool
	}{
		{"coalesced", 5 * time.Second, false},
		{"every-advance", 0, false},
		{"coalesced-metered", 5 * time.Second, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			f := newPageKinesis(1<<62, false)
			store := &countingStore{Store: lease.NewMemory()}
			opts := []Option{WithLeaseStore(store), WithCheckpointInterval(bc.interval)}
			if bc.metered {
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				defer func() { _ = mp.Shutdown(context.Background()) }()
				opts = append(opts, WithMeterProvider(mp))
			}
			sub := benchSubscribe(b, f, opts...)
			ctx := context.Background()
			runtime.GC()
			m0, cpu0 := mallocs(), cpuTime()
			b.ResetTimer()
			f.start()
			for range b.N {
				m := <-sub.Messages()
				if err := m.Ack(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			allocs, cpu := mallocs()-m0, cpuTime()-cpu0
			during := store.checkpoints.Load()
			closeBench(b, sub, 10*time.Second)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/record")
			b.ReportMetric(float64(allocs)/float64(b.N), "allocs/record")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/record")
			// Writes include Close's final flush of each shard: what 10,000 acks cost the store.
			b.ReportMetric(float64(store.checkpoints.Load())*10000/float64(b.N), "writes/10k-acks")
			b.ReportMetric(float64(during)*10000/float64(b.N), "writes-before-close/10k-acks")
		})
	}
}

// pullBench receives and acks b.N records with All (style "all", each record acked) or
// Batches (each batch acked once; of the last, only the records b.N needs), and returns how
// many it received.
func pullBench(b *testing.B, ctx context.Context, sub *Subscriber, style string) int {
	n := 0
	if style == "all" {
		for m, err := range sub.All(ctx) {
			if err == nil {
				err = m.Ack(ctx)
			}
			if err != nil {
				b.Fatal(err)
			}
			if n++; n == b.N {
				break
			}
		}
		return n
	}
	for batch, err := range sub.Batches(ctx) {
		if err != nil {
			b.Fatal(err)
		}
		// The last batch may hold more than b.N needs: ack only those.
		ms := batch.Messages()
		if left := b.N - n; len(ms) > left {
			for _, m := range ms[:left] {
				if err := m.Ack(ctx); err != nil {
					b.Fatal(err)
				}
			}
			return b.N
		}
		if err := batch.Ack(ctx); err != nil {
			b.Fatal(err)
		}
		if n += len(ms); n == b.N {
			break
		}
	}
	return n
}

// BenchmarkPull receives b.N records from four shards as BenchmarkDeliverAck does, with the
// pull iterators: All acking each record, and Batches acking each batch once. Checkpoints are
// coalesced (the default 5s interval).
func BenchmarkPull(b *testing.B) {
	for _, style := range []string{"all", "batches"} {
		b.Run(style, func(b *testing.B) {
			f := newPageKinesis(1<<62, false)
			store := &countingStore{Store: lease.NewMemory()}
			sub := benchSubscribe(b, f, WithLeaseStore(store))
			ctx := context.Background()
			runtime.GC()
			m0, cpu0 := mallocs(), cpuTime()
			b.ResetTimer()
			f.start()
			n := pullBench(b, ctx, sub, style)
			b.StopTimer()
			allocs, cpu := mallocs()-m0, cpuTime()-cpu0
			if n != b.N {
				b.Fatalf("received %d of %d", n, b.N)
			}
			closeBench(b, sub, 10*time.Second)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/record")
			b.ReportMetric(float64(allocs)/float64(b.N), "allocs/record")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/record")
		})
	}
}

// BenchmarkPeakHeapNeverAck holds every delivered record of a 1,000,000-record backlog (four
// shards of 250,000) and never acks, with WithMaxInFlight(cap): the readers must stop at the
// cap, the heap must stay bounded near cap × shards × record size, and every lease must stay
// held meanwhile. One op is one whole run; run it with -benchtime=1x.
func BenchmarkPeakHeapNeverAck(b *testing.B) {
	for _, inflight := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("cap=%d", inflight), func(b *testing.B) {
			for range b.N {
				peakHeapNeverAck(b, inflight)
			}
		})
	}
}

func peakHeapNeverAck(b *testing.B, inflight int) {
	const (
		backlog = 1_000_000
		ttl     = 300 * time.Millisecond
		hold    = 10 * ttl // how long the stall is watched: many renewals
	)
	f := newPageKinesis(backlog/benchShards, true)
	store := lease.NewMemory()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse

	sub := benchSubscribe(b, f, WithLeaseStore(store), WithOwner("bench"), WithMaxInFlight(inflight),
		WithLeaseTTL(ttl), WithShardSyncInterval(100*time.Millisecond))
	var lost atomic.Int64
	errsDone := make(chan struct{})
	go func() {
		defer close(errsDone)
		for err := range sub.Errors() {
			if errors.Is(err, ErrLeaseLost) {
				lost.Add(1)
			}
		}
	}()
	watch := heapwatch.Start(5 * time.Millisecond)

	b.ResetTimer()
	f.start()
	var held []*Message
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
		if time.Since(stalledAt) >= hold {
			break
		}
	}
	b.StopTimer()
	peak := watch.Stop()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	live := ms.HeapInuse
	leases, err := store.List(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	heldNow := 0
	for _, l := range leases {
		if baseOwner(l.Owner) == "bench" && l.Held(time.Now()) && !strings.Contains(l.Key, "/~") { // not the heartbeat or change row
			heldNow++
		}
	}
	closeBench(b, sub, 100*time.Millisecond) // nothing will be acked: no drain to wait for
	<-errsDone

	bound := float64(inflight * benchShards * benchRecordSize)
	b.ReportMetric(float64(len(held)), "delivered")
	b.ReportMetric(float64(inflight*benchShards), "cap-records")
	b.ReportMetric(float64(backlog), "backlog")
	b.ReportMetric(float64(peak-base)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(live-base)/(1<<20), "live-heap-MiB")
	b.ReportMetric(bound/(1<<20), "bound-MiB")
	b.ReportMetric(float64(lost.Load()), "leases-lost")
	b.ReportMetric(float64(benchShards-heldNow), "leases-not-held")
	runtime.KeepAlive(held)
}
