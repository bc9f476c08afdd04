package kinesub

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/gostream/kinesub/lease"
)

// addNumbered adds n records "0" … "n-1" to shard i of f.
func addNumbered(f *fakeStream, i, from, n int) {
	p := make([]string, n)
	for j := range p {
		p[j] = strconv.Itoa(from + j)
	}
	f.add(i, time.Now(), p...)
}

func number(t *testing.T, m *Message) int {
	n, err := strconv.Atoi(string(m.Data()))
	require.NoError(t, err)
	return n
}

// TestAllBreakAndResume: leaving an All loop early loses and repeats nothing; the next All, and
// then Messages, go on in order with what the previous left.
func TestAllBreakAndResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("resume", 1)
		addNumbered(f, 0, 0, 3000)
		sub := subscribeFake(t, f, fakeOpts(WithInitialPosition(Horizon()), WithBatchSize(300))...)
		ctx := context.Background()
		next := 0
		for m, err := range sub.All(ctx) {
			require.NoError(t, err)
			require.Equal(t, next, number(t, m))
			require.NoError(t, m.Ack(ctx))
			if next++; next == 1000 {
				break
			}
		}
		for m, err := range sub.All(ctx) {
			require.NoError(t, err)
			require.Equal(t, next, number(t, m))
			require.NoError(t, m.Ack(ctx))
			if next++; next == 2000 {
				break
			}
		}
		for next < 3000 {
			m := <-sub.Messages()
			require.Equal(t, next, number(t, m))
			require.NoError(t, m.Ack(ctx))
			next++
		}
		for _, err := range sub.All(ctx) {
			require.ErrorIs(t, err, ErrConsumerBusy, "the channel consumes for good once Messages was called")
		}
	})
}

// TestBatchesOneShardEach: batches never mix shards, keep each shard's order, and Batch.Ack
// checkpoints all of a batch: a later subscription sharing the store reads nothing again.
func TestBatchesOneShardEach(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("batches", 3)
		for i := range 3 {
			addNumbered(f, i, 0, 500)
		}
		store := lease.NewMemory()
		sub, err := subscribe(context.Background(), f, "batches", fakeOpts(WithLeaseStore(store), WithInitialPosition(Horizon()), WithBatchSize(64))...)
		require.NoError(t, err)
		ctx := context.Background()
		next := map[string]int{}
		total := 0
		for b, err := range sub.Batches(ctx) {
			require.NoError(t, err)
			require.NotEmpty(t, b.Messages())
			for _, m := range b.Messages() {
				require.Equal(t, b.ShardID(), m.ShardID(), "a batch mixes shards")
				require.Equal(t, next[m.ShardID()], number(t, m))
				next[m.ShardID()]++
			}
			require.NoError(t, b.Ack(ctx))
			require.NoError(t, b.Ack(ctx), "acking again changes nothing")
			if total += len(b.Messages()); total == 1500 {
				break
			}
		}
		require.NoError(t, sub.Close(ctx))
		for _, st := range []string{"shardId-000000000000", "shardId-000000000001", "shardId-000000000002"} {
			require.Equal(t, "500", readLease(t, store, "batches", st).Checkpoint.Sequence)
		}
		again := subscribeFake(t, f, fakeOpts(WithLeaseStore(store))...)
		addNumbered(f, 1, 500, 1)
		m := <-again.Messages()
		require.Equal(t, "500", string(m.Data()), "only the record published after the acks")
	})
}

// TestAllSeekFence: a consumer pulling with All, slower than the reader (so pages wait for it),
// while Seek runs in another goroutine: once Seek has returned, every record pulled comes from
// the new position, in order. The reader's rate limits are lifted, so that the pipeline is full
// at every seek.
func TestAllSeekFence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const stride, seeks, after = 1000, 40, 20
		f := newFakeStream("fence", 1)
		addNumbered(f, 0, 0, stride*(seeks+1))
		sub := subscribeFake(t, f, fakeOpts(WithInitialPosition(Horizon()), WithBatchSize(16), WithBufferPages(2),
			WithMaxInFlight(64), unlimitedPoller(f))...)
		shard := f.shards[0].id
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var started atomic.Int64  // seeks started so far
		var returned atomic.Int64 // seeks returned so far; seek i moves to record i*stride
		var checked atomic.Int64  // records pulled and checked since the last seek returned
		var pulled atomic.Int64
		failed := make(chan string, 1)
		done := make(chan struct{})
		defer func() { cancel(); <-done }()
		go func() {
			defer close(done)
			seen, expect, last := int64(0), -1, -1
			for ctx.Err() == nil {
				// Read before the pull: what it yields must honour every seek returned by now.
				ret := returned.Load()
				m, ok := pullOne(ctx, sub)
				if !ok {
					return
				}
				got := number(t, m)
				_ = m.Ack(ctx)
				pulled.Add(1)
				if ret != seen {
					// Records of the new position may have been pulled while the seek ran;
					// records of the old one are all below its target.
					seen, expect = ret, int(ret*stride)
					if last >= expect {
						expect = last + 1
					}
				}
				last = got
				if seen > 0 && started.Load() == ret { // no seek ran during the pull
					if got != expect {
						failed <- "record " + strconv.Itoa(got) + " pulled after seek " + strconv.Itoa(int(seen)) +
							" returned, want " + strconv.Itoa(expect)
						return
					}
					expect++
					checked.Add(1)
				}
				time.Sleep(time.Millisecond)
			}
		}()
		for pulled.Load() == 0 { // the shard is read
			time.Sleep(time.Millisecond)
		}
		for i := 1; i <= seeks; i++ {
			p := i * stride
			checked.Store(0)
			started.Store(int64(i))
			require.NoError(t, sub.Seeker().Seek(context.Background(), AtSequence(shard, strconv.Itoa(p+1))))
			returned.Store(int64(i))
			for checked.Load() < after {
				select {
				case msg := <-failed:
					t.Fatalf("%s", msg)
				case <-time.After(time.Millisecond):
				}
			}
		}
	})
}

// pullOne pulls one record with All, leaving the rest queued for the next pull.
func pullOne(ctx context.Context, sub *Subscriber) (*Message, bool) {
	for m, err := range sub.All(ctx) {
		if err != nil {
			return nil, false
		}
		return m, true
	}
	return nil, false
}

// unlimitedPoller lifts the poller's per-shard rate limits, which would otherwise make a test's
// reader far slower than its consumer.
func unlimitedPoller(f *fakeStream) Option {
	return func(c *config) {
		c.source = func(id string) shardSource {
			p := newPoller(f, nil, streamRef{name: f.stream}, id, c.requestTimeout, c.pollInterval, c.pollInterval)
			p.calls.SetLimit(rate.Inf)
			p.bytes.SetLimit(rate.Inf)
			return p
		}
	}
}

// TestOneConsumerAtATime: a second concurrent All or Batches loop gets ErrConsumerBusy at once
// rather than a share of the stream; cancelling ctx ends a loop; Close ends one; nothing leaks.
func TestOneConsumerAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("busy", 1)
		addNumbered(f, 0, 0, 10)
		sub, err := subscribe(context.Background(), f, "busy", fakeOpts(WithInitialPosition(Horizon()))...)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		n := 0
		for m, err := range sub.All(ctx) {
			require.NoError(t, err)
			require.NoError(t, m.Ack(ctx))
			if n++; n == 1 {
				for _, err := range sub.All(ctx) {
					require.ErrorIs(t, err, ErrConsumerBusy)
				}
				for _, err := range sub.Batches(ctx) {
					require.ErrorIs(t, err, ErrConsumerBusy)
				}
			}
			if n == 10 {
				cancel() // the loop ends at the next pull, with nothing more to yield
			}
		}
		require.Equal(t, 10, n)

		ended := make(chan struct{})
		go func() {
			defer close(ended)
			for _, err := range sub.Batches(context.Background()) {
				require.NoError(t, err)
			}
		}()
		synctest.Wait()
		require.NoError(t, sub.Close(context.Background()))
		<-ended
		_, ok := <-sub.Messages()
		require.False(t, ok, "Messages is closed after Close, though never used")
	})
}

// TestAllYieldsFatalError: a subscription that ends with a fatal error (the stream was deleted)
// ends an All loop with that error, once.
func TestAllYieldsFatalError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("fatal", 1)
		sub := subscribeFake(t, f, fakeOpts(WithInitialPosition(Horizon()))...)
		addNumbered(f, 0, 0, 1)
		var errs []error
		for m, err := range sub.All(context.Background()) {
			if err != nil {
				errs = append(errs, err)
				continue
			}
			require.NoError(t, m.Ack(context.Background()))
			f.mu.Lock()
			f.stream = "gone" // every call now answers ResourceNotFound
			f.mu.Unlock()
		}
		require.Len(t, errs, 1)
		require.ErrorIs(t, errs[0], ErrStreamNotFound)
	})
}
