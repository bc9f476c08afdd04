package kinesub

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// Process against the shard lifecycle: seeks, lost and handed-back leases, Close, and Process's
// own end. These run in synctest bubbles, so "a handler is running now" and "nothing more
// starts" are states to wait for, not guesses.

// startProcess runs Process on sub until the returned stop is called, which returns its error
// (nil when it returned the cause its ctx was ended with).
func startProcess(sub *Subscriber, handle func(context.Context, *Message) error, opts ...ProcessOption) (stop func() error) {
	ctx, cancel := context.WithCancelCause(context.Background())
	res := make(chan error, 1)
	go func() { res <- sub.Process(ctx, handle, opts...) }()
	return func() error {
		cancel(errStopProcess)
		if err := <-res; err != errStopProcess {
			return err
		}
		return nil
	}
}

// TestProcessSeekFence: a Seek while handlers run cancels their contexts before it returns; no
// record fetched before the seek is started afterwards (one checked in that instant finds its
// context ended, and is neither acked nor retried); the records from the new position are
// handled in order per key.
func TestProcessSeekFence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, keys, target = 300, 30, 200
		f := newFakeStream("seek", 1)
		seqs := addKeyed(f, 0, n, keys, map[string]int{})
		sub := subscribeFake(t, f, fakeOpts(WithInitialPosition(Horizon()), WithBatchSize(50))...)
		shard := f.shards[0].id
		var sought atomic.Bool
		var lateStale atomic.Int64 // records fetched before the seek entered after it
		var mu sync.Mutex
		runningOld := 0 // handlers of records fetched before the seek still running
		var after []string
		handled := 0
		stop := startProcess(sub, func(ctx context.Context, m *Message) error {
			if sought.Load() && m.stale() {
				lateStale.Add(1)
				if ctx.Err() == nil {
					t.Errorf("%s, fetched before the seek, started after it with a live context", m.Data())
				}
			}
			old := !sought.Load()
			mu.Lock()
			if old {
				runningOld++
			}
			mu.Unlock()
			defer func() {
				mu.Lock()
				if old {
					runningOld--
				}
				mu.Unlock()
			}()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
			mu.Lock()
			defer mu.Unlock()
			handled++
			if sought.Load() && !m.stale() {
				after = append(after, string(m.Data()))
			}
			return nil
		}, WithConcurrency(8))
		for {
			mu.Lock()
			h := handled
			mu.Unlock()
			if h >= 40 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		sought.Store(true)
		require.NoError(t, sub.Seeker().Seek(context.Background(), AtSequence(shard, seqs[target])))
		synctest.Wait() // every handler whose context the seek ended has returned
		mu.Lock()
		require.Zero(t, runningOld, "handlers of the old position still run after the seek")
		mu.Unlock()
		for {
			mu.Lock()
			got := len(after)
			mu.Unlock()
			if got >= n-target {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		require.NoError(t, stop())
		// Only a worker that checked its record in the instant of the seek may enter it.
		require.LessOrEqual(t, lateStale.Load(), int64(8), "records fetched before the seek were started after it")
		// From the target on, per key in order, each once.
		next := map[string]int{}
		for i := range target {
			next["k"+strconv.Itoa(i%keys)]++
		}
		require.Len(t, after, n-target)
		for _, d := range after {
			k, c, _ := strings.Cut(d, "/")
			require.Equal(t, strconv.Itoa(next[k]), c, "key %s after the seek: %v", k, after)
			next[k]++
		}
	})
}

// TestProcessLeaseLossCancels: when the lease is taken over, the context of the handler running
// on that shard ends, the record is not retried, and nothing more starts from the shard.
func TestProcessLeaseLossCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("lost", 1)
		addKeyed(f, 0, 5, 1, map[string]int{})
		store := lease.NewMemory()
		ttl := 900 * time.Millisecond
		sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithInitialPosition(Horizon()), WithLeaseTTL(ttl))...)
		errs := processErrors(sub)
		var started []string
		var mu sync.Mutex
		var cancelled atomic.Int64
		running := make(chan struct{}, 1)
		stop := startProcess(sub, func(ctx context.Context, m *Message) error {
			mu.Lock()
			started = append(started, string(m.Data()))
			mu.Unlock()
			if string(m.Data()) == "k0/0" {
				return nil
			}
			running <- struct{}{}
			<-ctx.Done()
			cancelled.Add(1)
			return ctx.Err()
		})
		<-running // k0/1 runs
		stealAsPeer(t, store, f.stream, f.shards[0].id, "thief")
		start := time.Now()
		for cancelled.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		require.LessOrEqual(t, time.Since(start), ttl/3, "cancelled at the next renewal")
		time.Sleep(time.Minute) // long past any backoff
		synctest.Wait()
		require.NoError(t, stop())
		require.Equal(t, []string{"k0/0", "k0/1"}, started, "k0/1 neither retried nor followed")
		require.Empty(t, errs(), "a cancelled attempt of a shard that moved on is no failure")
		require.Equal(t, "thief", readLease(t, store, f.stream, f.shards[0].id).Owner)
	})
}

// TestProcessCloseDrain: Close lets the running handlers finish within its drain, and
// checkpoints exactly what was handled; what waited behind them is never started; a handler
// still running when the drain ends finds its context ended; Process returns ErrClosed.
func TestProcessCloseDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("drain", 1)
		// k0/0 k1/0 k2/0 k0/1 k1/1 k2/1 …
		seqs := addKeyed(f, 0, 9, 3, map[string]int{})
		store := lease.NewMemory()
		sub, err := subscribe(context.Background(), f, f.stream, fakeOpts(WithLeaseStore(store), WithInitialPosition(Horizon()))...)
		require.NoError(t, err)
		var mu sync.Mutex
		var started []string
		var slowDone, waitEnded time.Time
		closing := make(chan struct{})
		res := make(chan error, 1)
		go func() {
			res <- sub.Process(context.Background(), func(ctx context.Context, m *Message) error {
				mu.Lock()
				started = append(started, string(m.Data()))
				mu.Unlock()
				switch string(m.Data()) {
				case "k0/0": // finishes within the drain
					<-closing
					time.Sleep(300 * time.Millisecond)
					if ctx.Err() != nil {
						t.Errorf("context ended during the drain: %v", ctx.Err())
					}
					mu.Lock()
					slowDone = time.Now()
					mu.Unlock()
					return nil
				case "k1/0": // runs until its context ends
					<-ctx.Done()
					mu.Lock()
					waitEnded = time.Now()
					mu.Unlock()
					return ctx.Err()
				}
				return nil
			}, WithConcurrency(2))
		}()
		synctest.Wait() // k0/0 and k1/0 run; k2/0 waits for a slot, the rest behind their keys
		mu.Lock()
		require.ElementsMatch(t, []string{"k0/0", "k1/0"}, started)
		mu.Unlock()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		close(closing)
		require.NoError(t, sub.Close(ctx))
		require.ErrorIs(t, <-res, ErrClosed, "Process returns ErrClosed after Close")
		mu.Lock()
		defer mu.Unlock()
		require.ElementsMatch(t, []string{"k0/0", "k1/0"}, started, "nothing started once Close began")
		require.Equal(t, 300*time.Millisecond, slowDone.Sub(start))
		// Close's drain leaves the final writes the request timeout (1s) of its 3s.
		require.Equal(t, 2*time.Second, waitEnded.Sub(start))
		require.Equal(t, seqs[0], readLease(t, store, f.stream, f.shards[0].id).Checkpoint.Sequence, "k0/0 handled; k1/0 not")
	})
}

// TestProcessDrainFillsGapAfterLingerAck: the ack of a handler that ran on after its shard's
// lease was lost (it ignores its ctx) does not make a later drain forget what the shard's next
// holding acked. Here k0/0 lingers from a holding a thief took; the shard is taken again, and k1
// and k2 are handled to the end while k0's records wait behind the lingering k0/0. Close then
// finds the new k0/0 running and k0/1, k0/2 queued, below records acked: they fill the drain's
// gaps, so they run, and the last checkpoint passes every record. (The lingering ack used to
// reset the acked top the drain goes by, so they were given back and the next owner delivered
// the records acked after them again.)
func TestProcessDrainFillsGapAfterLingerAck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := newFakeStream("drain-linger", 1)
		shard := f.shards[0].id
		// k0/0 k1/0 k2/0 k0/1 k1/1 k2/1 k0/2 k1/2 k2/2
		seqs := addKeyed(f, 0, 9, 3, map[string]int{})
		store := lease.NewMemory()
		sub, err := subscribe(ctx, f, f.stream, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithInitialPosition(Horizon()),
			WithLeaseTTL(900*time.Millisecond))...)
		require.NoError(t, err)
		releaseOld, releaseNew := make(chan struct{}), make(chan struct{})
		var mu sync.Mutex
		var k00 int
		var started []string
		res := make(chan error, 1)
		go func() {
			res <- sub.Process(ctx, func(ctx context.Context, m *Message) error {
				mu.Lock()
				started = append(started, string(m.Data()))
				n := -1
				if string(m.Data()) == "k0/0" {
					n, k00 = k00, k00+1
				}
				mu.Unlock()
				switch n {
				case 0:
					<-releaseOld // ignores its ctx: runs on after the lease is lost
				case 1:
					<-releaseNew // finishes within the drain
				}
				return nil
			}, WithConcurrency(4))
		}()
		k0Runs := func() int { mu.Lock(); defer mu.Unlock(); return k00 }
		eventually(t, 5*time.Second, "k0/0 runs", func() bool { return k0Runs() == 1 })
		// A thief takes the shard, then lets it go: a takes it again, under a new holding.
		stop := stealAsPeer(t, store, f.stream, shard, "thief")
		eventually(t, 5*time.Second, "the lease lost", func() bool { return reading(sub) == 0 })
		stop()
		l := readLease(t, store, f.stream, shard)
		ok, err := store.Release(ctx, l.Key, l.Tenure())
		require.NoError(t, err)
		require.True(t, ok)
		eventually(t, 10*time.Second, "k1 and k2 handled again under the new holding", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(started) >= 13 && reading(sub) == 1
		})
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		close(releaseOld)
		eventually(t, 5*time.Second, "the new k0/0 runs", func() bool { return k0Runs() == 2 })
		closed := make(chan error, 1)
		go func() {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			closed <- sub.Close(cctx)
		}()
		synctest.Wait() // the drain began with k0/1 and k0/2 queued
		close(releaseNew)
		require.NoError(t, <-closed)
		require.ErrorIs(t, <-res, ErrClosed)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{"k0/1", "k0/2"}, started[len(started)-2:], "k0/1 and k0/2 fill the drain's gaps: %v", started)
		require.Equal(t, seqs[8], readLease(t, store, f.stream, shard).Checkpoint.Sequence,
			"the last checkpoint passes every record handled")
	})
}

// TestProcessCloseGivesBackRetries: a record waiting out its backoff when Close begins is given
// back at once, so Close's drain does not wait for it.
func TestProcessCloseGivesBackRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("drain-retry", 1)
		addKeyed(f, 0, 3, 1, map[string]int{})
		sub, err := subscribe(context.Background(), f, f.stream, fakeOpts(WithInitialPosition(Horizon()))...)
		require.NoError(t, err)
		var tries atomic.Int64
		stop := startProcess(sub, func(ctx context.Context, m *Message) error {
			tries.Add(1)
			return errors.New("not now")
		}, WithRetryBackoff(time.Minute, time.Hour))
		synctest.Wait()
		require.Equal(t, int64(1), tries.Load())
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, sub.Close(ctx))
		require.Less(t, time.Since(start), 10*time.Millisecond, "Close waited for a record not running")
		if err := stop(); err != nil { // Process may have seen Close or stop's cancel first
			require.ErrorIs(t, err, ErrClosed)
		}
		require.Equal(t, int64(1), tries.Load())
	})
}

// handingBack reports whether sub shows shard as handed back, draining.
func handingBack(sub *Subscriber, shard string) bool {
	for _, st := range sub.Shards() {
		if st.ShardID == shard && st.State == ShardHandingBack {
			return true
		}
	}
	return false
}

// TestProcessHandBack: when the shard is handed back for balance, the running handlers get the
// drain, and so do the records that wait below a record handled (a gap the last checkpoint
// could not pass): the lease is released with the checkpoint of everything handled as soon as
// they are done, or, for a handler that waits on its context, when the drain ends and cancels
// it (the records behind it are then given back).
func TestProcessHandBack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		finish bool // the running handler finishes, or waits on its context
		drain  time.Duration
	}{
		{"handler finishes", true, 100 * time.Millisecond},
		{"handler waits on its context", false, handBackDrain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeStream("handback", 2)
				var seqs [2][]string
				for i := range 2 {
					seqs[i] = addKeyed(f, i, 9, 3, map[string]int{})
				}
				store := lease.NewMemory()
				a := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithInitialPosition(Horizon()))...)
				eventually(t, 5*time.Second, "a reads both", func() bool { return reading(a) == 2 })
				var mu sync.Mutex
				started := map[string][]string{}
				var since, ended time.Time
				stop := startProcess(a, func(ctx context.Context, m *Message) error {
					mu.Lock()
					started[m.ShardID()] = append(started[m.ShardID()], string(m.Data()))
					mu.Unlock()
					if string(m.Data()) != "k0/0" {
						return nil
					}
					for !handingBack(a, m.ShardID()) {
						select {
						case <-ctx.Done():
							return ctx.Err() // the shard kept (Close)
						case <-time.After(time.Millisecond):
						}
					}
					mu.Lock()
					since = time.Now()
					mu.Unlock()
					if tc.finish {
						time.Sleep(tc.drain)
						mu.Lock()
						ended = time.Now()
						mu.Unlock()
						return nil
					}
					<-ctx.Done()
					mu.Lock()
					ended = time.Now()
					mu.Unlock()
					return ctx.Err()
				})
				defer func() { require.NoError(t, stop()) }()
				synctest.Wait()
				subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("b"))...)
				eventually(t, 10*time.Second, "a hands one back", func() bool { return len(owned(a)) == 1 })
				synctest.Wait() // the handler cancelled at the drain's end has returned
				mu.Lock()
				defer mu.Unlock()
				// since is noted within a millisecond of the hand-back's start.
				require.InDelta(t, tc.drain, ended.Sub(since), float64(time.Millisecond), "drained as long as the handler ran")
				var back int
				for i, sh := range f.shards {
					if owned(a)[0] != sh.id {
						back = i
					}
				}
				got := started[f.shards[back].id]
				others := []string{"k0/0", "k1/0", "k2/0", "k1/1", "k2/1", "k1/2", "k2/2"}
				// k0/1 and k0/2 fill the gaps below k1/2 and k2/2, handled: they run once k0/0
				// returns within the drain, and the lease is released with everything handled.
				// Had they been given back, the next owner would deliver k1/1… again.
				want := seqs[back][8]
				if tc.finish {
					require.ElementsMatch(t, append(others, "k0/1", "k0/2"), got, "k0's later records ran in the drain")
				} else {
					// The drain ends with k0/0 still running: k0/1 and k0/2 are given back, and
					// nothing after k0/0 is checkpointed.
					require.ElementsMatch(t, others, got, "k0's later records were given back, not started")
					want = lease.TrimHorizon // where the shard was opened
				}
				require.Equal(t, want, readLease(t, store, f.stream, f.shards[back].id).Checkpoint.Sequence)
			})
		})
	}
}

// TestProcessRewindsWhenCtxEnds: records Process took and had not handled when its ctx ended
// are delivered again to the next consumer, in order per key, before anything later; none is
// lost.
func TestProcessRewindsWhenCtxEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { checkRewind(t, nil) })
}

// TestProcessRewindThrottled: the same when GetShardIterator is throttled twice while Process
// moves its shard back: the move is local (the shard's generation ends at once) and the reader
// retries the position with backoff, so nothing taken and not handled is skipped.
func TestProcessRewindThrottled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rewinding atomic.Bool
		var throttled atomic.Int64
		checkRewind(t, func(f *fakeStream) {
			f.setHooks(nil, func(context.Context, *kinesis.GetShardIteratorInput) error {
				if rewinding.Load() && throttled.Add(1) <= 2 {
					return &types.ProvisionedThroughputExceededException{Message: aws.String("Rate exceeded for shard")}
				}
				return nil
			})
			rewinding.Store(true)
		})
		require.EqualValues(t, 3, throttled.Load(), "GetShardIterator calls after Process's ctx ended")
	})
}

// checkRewind stops Process after some records of 10 keys and checks that the next consumer
// receives each key from its first record not handled, in order, to the end. setup, if set,
// runs just before Process's ctx ends.
func checkRewind(t *testing.T, setup func(f *fakeStream)) {
	{
		const n, keys = 400, 10
		f := newFakeStream("rewind", 1)
		addKeyed(f, 0, n, keys, map[string]int{})
		sub := subscribeFake(t, f, fakeOpts(WithInitialPosition(Horizon()), WithBatchSize(100))...)
		log := newKeyLog(t)
		count := log.count
		if setup != nil {
			var once sync.Once
			count = func() int {
				c := log.count()
				if c >= 60 {
					once.Do(func() { setup(f) })
				}
				return c
			}
		}
		err := processUntil(t, sub, 60, count, func(ctx context.Context, m *Message) error {
			log.begin(m)
			select {
			case <-ctx.Done():
				log.end(m, false)
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
			log.end(m, true)
			return nil
		}, WithConcurrency(4))
		require.NoError(t, err)
		log.mu.Lock()
		next := map[string]int{} // per key, the first record not handled by Process
		for id, c := range log.next {
			next[strings.TrimPrefix(id, f.shards[0].id+"/")] = c
		}
		handled := log.handled
		log.mu.Unlock()
		require.Less(t, handled, n)
		first := map[string]bool{}
		done := 0 // keys read to their last record
		for m, err := range sub.All(context.Background()) {
			require.NoError(t, err)
			k, c, _ := strings.Cut(string(m.Data()), "/")
			i, _ := strconv.Atoi(c)
			if !first[k] {
				first[k] = true
				require.LessOrEqual(t, i, next[k], "key %s resumes after a gap", k)
			} else {
				require.Equal(t, next[k], i, "key %s out of order", k)
			}
			next[k] = i + 1
			require.NoError(t, m.Ack(context.Background()))
			if next[k] == n/keys {
				if done++; done == keys {
					break
				}
			}
		}
		for k, c := range next {
			require.Equal(t, n/keys, c, "key %s", k)
		}
	}
}

// TestProcessStuckKeyBoundsMemory: a key stuck on a record that never succeeds stops its shard
// at WithMaxInFlight: the records Process holds count, so the reader waits for room, and
// memory does not grow with the backlog.
func TestProcessStuckKeyBoundsMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const inflight = 50
		f := newFakeStream("bounded", 1)
		addKeyed(f, 0, 1000, 5, map[string]int{})
		sub := subscribeFake(t, f, fakeOpts(WithInitialPosition(Horizon()), WithMaxInFlight(inflight), WithBatchSize(20))...)
		var handled atomic.Int64
		stop := startProcess(sub, func(ctx context.Context, m *Message) error {
			if strings.HasPrefix(string(m.Data()), "k0/") {
				return errors.New("k0 is stuck")
			}
			handled.Add(1)
			return nil
		}, WithRetryBackoff(time.Millisecond, 10*time.Millisecond))
		time.Sleep(10 * time.Second)
		synctest.Wait()
		st := sub.Shards()[0]
		require.True(t, st.WaitingForAcks, "the reader waits for room: %+v", st)
		require.LessOrEqual(t, st.InFlight, inflight)
		require.Less(t, int(handled.Load()), inflight, "the shard stopped at its cap")
		require.NotNil(t, st.Failing)
		require.Equal(t, "k0", st.Failing.OrderKey)
		require.NoError(t, stop())
	})
}

// TestProcessOrdersUserRecordsByOwnKey: the user records of a KPL aggregate are ordered by their
// own partition keys, not the aggregate's: alice's two run one after the other, bob's at once
// with them.
func TestProcessOrdersUserRecordsByOwnKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("kpl", 1)
		f.add(0, time.Now(), string(aggregate([2]string{"alice", "a1"}, [2]string{"bob", "b1"}, [2]string{"alice", "a2"})))
		sub := subscribeFake(t, f, fakeOpts(WithInitialPosition(Horizon()))...)
		var mu sync.Mutex
		var order []string
		bobRan := make(chan struct{})
		var handled atomic.Int64
		err := processUntil(t, sub, 3, func() int { return int(handled.Load()) }, func(ctx context.Context, m *Message) error {
			mu.Lock()
			order = append(order, m.PartitionKey()+":"+string(m.Data()))
			mu.Unlock()
			switch string(m.Data()) {
			case "a1":
				<-bobRan // bob runs while a1 does
			case "b1":
				close(bobRan)
			}
			handled.Add(1)
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, []string{"alice:a1", "bob:b1", "alice:a2"}, order)
	})
}

// TestProcessStuckHandlerHoldsOnlyItsKey: a handler stuck on one record (until its ctx ends)
// holds back only its key: every record of the other keys is handled, even those a worker had
// taken with it in a run of quick handlers.
func TestProcessStuckHandlerHoldsOnlyItsKey(t *testing.T) {
	for _, conc := range []int{2, 4} {
		t.Run(strconv.Itoa(conc), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const keys, per = 400, 3
				f := newFakeStream("stuck", 1)
				addKeyed(f, 0, keys*per, keys, map[string]int{})
				sub := subscribeFake(t, f, fakeOpts(WithInitialPosition(Horizon()), WithBatchSize(500))...)
				var others atomic.Int64
				stop := startProcess(sub, func(ctx context.Context, m *Message) error {
					k, _, _ := strings.Cut(string(m.Data()), "/")
					if string(m.Data()) == "k7/0" {
						<-ctx.Done()
						return ctx.Err()
					}
					if k != "k7" {
						others.Add(1)
					}
					return nil
				}, WithConcurrency(conc))
				deadline := time.Now().Add(5 * time.Second)
				for others.Load() < (keys-1)*per && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond) // bubble time
				}
				require.EqualValues(t, (keys-1)*per, others.Load(), "records of other keys handled within 5s")
				require.NoError(t, stop())
			})
		})
	}
}

// linkedJobs counts the jobs p keeps linked in its key queues, given back or not.
func linkedJobs(p *processor) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.lanes {
		for _, q := range l.keys {
			for x := q.head; x != nil; x = x.next {
				n++
			}
		}
	}
	return n
}

// TestProcessMaxInFlightAcrossSeeks: a handler that ignores its ctx keeps running across six
// seeks; the records each seek gives back are let go, so Process holds no more than the cap
// (and the one running) whatever the number of generations.
func TestProcessMaxInFlightAcrossSeeks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const inflight = 50
		f := newFakeStream("bounded-seeks", 1)
		addKeyed(f, 0, 1000, 1, map[string]int{})
		sub := subscribeFake(t, f, fakeOpts(WithInitialPosition(Horizon()), WithMaxInFlight(inflight), WithBatchSize(20))...)
		release := make(chan struct{})
		var p *processor
		stop := startProcess(sub, func(ctx context.Context, m *Message) error {
			if string(m.Data()) == "k0/0" {
				<-release // ignores its ctx
			}
			return nil
		}, func(c *processConfig) { c.started = func(x *processor) { p = x } })
		time.Sleep(time.Second)
		synctest.Wait()
		for range 6 {
			require.NoError(t, sub.Seeker().Seek(context.Background(), Horizon()))
			time.Sleep(time.Second)
			synctest.Wait()
		}
		held := linkedJobs(p)
		close(release)
		require.NoError(t, stop())
		require.LessOrEqual(t, held, inflight+1, "records held after six seeks")
	})
}

// TestProcessHandlerCtxDeadline: when Process's ctx reaches its deadline, a running handler's
// ctx ends with context.DeadlineExceeded, as a context derived from Process's would.
func TestProcessHandlerCtxDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("deadline", 1)
		addKeyed(f, 0, 1, 1, map[string]int{})
		sub := subscribeFake(t, f, fakeOpts(WithInitialPosition(Horizon()))...)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var got error
		require.ErrorIs(t, sub.Process(ctx, func(hctx context.Context, m *Message) error {
			<-hctx.Done()
			got = hctx.Err()
			return got
		}), context.DeadlineExceeded)
		require.ErrorIs(t, got, context.DeadlineExceeded)
	})
}

// TestProcessShownBounded: a shard whose failing records all succeeded is no longer kept among
// those whose status Process clears when it returns.
func TestProcessShownBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("shown", 1)
		addKeyed(f, 0, 20, 5, map[string]int{})
		sub := subscribeFake(t, f, fakeOpts(WithInitialPosition(Horizon()))...)
		var p *processor
		var failed atomic.Bool
		var handled atomic.Int64
		stop := startProcess(sub, func(ctx context.Context, m *Message) error {
			if string(m.Data()) == "k0/0" && !failed.Swap(true) {
				return errors.New("once")
			}
			handled.Add(1)
			return nil
		}, WithRetryBackoff(time.Millisecond, 10*time.Millisecond), func(c *processConfig) { c.started = func(x *processor) { p = x } })
		time.Sleep(time.Second)
		synctest.Wait()
		require.EqualValues(t, 20, handled.Load())
		p.mu.Lock()
		shown := len(p.shown)
		p.mu.Unlock()
		require.NoError(t, stop())
		require.Zero(t, shown, "shards kept to clear once nothing fails")
	})
}
