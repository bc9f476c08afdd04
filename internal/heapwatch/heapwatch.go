// Package heapwatch samples the Go heap in the background and reports its peak, for the
// memory figures of kinesub's benchmarks.
package heapwatch

import (
	"runtime"
	"time"
)

// Watch samples HeapInuse until Stop.
type Watch struct {
	stop chan struct{}
	done chan struct{}
	peak uint64 // written by the sampler, read after done
}

// Start samples the heap every interval until Stop.
func Start(every time.Duration) *Watch {
	w := &Watch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(every)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			w.peak = max(w.peak, ms.HeapInuse)
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// Stop ends the sampling and returns the highest HeapInuse seen, in bytes.
func (w *Watch) Stop() uint64 {
	close(w.stop)
	<-w.done
	return w.peak
}
