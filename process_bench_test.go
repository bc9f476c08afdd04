package kinesub

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/gostream/kinesub/lease"
)

// BenchmarkProcess receives b.N records from four shards as BenchmarkPull does, through Process
// with a handler that does nothing, over 1,000 partition keys: what Process's queues per key,
// its workers and its acks cost per record, to divide by BenchmarkPull/all's figures (`go run
// ./bench` prints the ratio). Checkpoints are coalesced (the default 5s interval).
func BenchmarkProcess(b *testing.B) {
	for _, conc := range []int{1, 2, 16, 256} {
		b.Run("concurrency="+strconv.Itoa(conc), func(b *testing.B) {
			f := newPageKinesis(1<<62, false)
			keys := make([]string, 1000)
			for i := range keys {
				keys[i] = "key-" + strconv.Itoa(i)
			}
			for i := range f.ring {
				f.ring[i].PartitionKey = &keys[i%len(keys)]
			}
			store := &countingStore{Store: lease.NewMemory()}
			sub := benchSubscribe(b, f, WithLeaseStore(store))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			res := make(chan error, 1)
			runtime.GC()
			m0, cpu0 := mallocs(), cpuTime()
			b.ResetTimer()
			f.start()
			go func() {
				// The handler does nothing at all: counting in it would make the workers contend
				// for the counter. The records handled are read from the shards' ack counts.
				res <- sub.Process(ctx, func(context.Context, *Message) error { return nil }, WithConcurrency(conc))
			}()
			for acked(sub) < int64(b.N) {
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			allocs, cpu := mallocs()-m0, cpuTime()-cpu0
			cancel()
			if err := <-res; !errors.Is(err, context.Canceled) {
				b.Fatal(err)
			}
			closeBench(b, sub, 10*time.Second)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/record")
			b.ReportMetric(float64(allocs)/float64(b.N), "allocs/record")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/record")
		})
	}
}

// acked returns the records acked so far on sub's shards.
func acked(sub *Subscriber) int64 {
	sub.metrics.mu.Lock()
	defer sub.metrics.mu.Unlock()
	var n int64
	for _, st := range sub.metrics.shards {
		n += st.acked.Load()
	}
	return n
}
