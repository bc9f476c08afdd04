package kinesub

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// addKeyed appends n records to shard i of f, spread over keys partition keys "k0"… in turn,
// each carrying "<key>/<count of its key so far>" (counts is updated), and returns their
// sequence numbers.
func addKeyed(f *fakeStream, i, n, keys int, counts map[string]int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	sh := f.shards[i]
	seqs := make([]string, n)
	for j := range n {
		k := "k" + strconv.Itoa(j%keys)
		seq := strconv.Itoa(len(sh.records) + 1)
		sh.records = append(sh.records, types.Record{
			Data: []byte(k + "/" + strconv.Itoa(counts[k])), PartitionKey: aws.String(k),
			SequenceNumber: aws.String(seq), ApproximateArrivalTimestamp: aws.Time(time.Now()),
		})
		counts[k]++
		seqs[j] = seq
	}
	return seqs
}

// keyLog checks what a Process handler sees: per shard and key, payloads "<key>/<n>" handled in
// order, one at a time, and how many handlers ran at once. It is safe for concurrent use.
type keyLog struct {
	t        *testing.T
	byKey    bool // keys across shards (a reshard moves a key to a child), not per shard
	mu       sync.Mutex
	next     map[string]int  // shard/key → next count expected
	running  map[string]bool // shard/key → a handler of it runs
	now, max int             // handlers running, and the most at once
	handled  int
}

func newKeyLog(t *testing.T) *keyLog {
	return &keyLog{t: t, next: map[string]int{}, running: map[string]bool{}}
}

// begin notes that a handler of m starts; it fails the test when another of m's key runs, or
// when m is not the key's next record.
func (k *keyLog) begin(m *Message) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key, n, _ := strings.Cut(string(m.Data()), "/")
	id := k.id(m, key)
	if k.running[id] {
		k.t.Errorf("key %s: %s started while an earlier record of the key runs", id, m.Data())
	}
	k.running[id] = true
	if c, _ := strconv.Atoi(n); c != k.next[id] {
		k.t.Errorf("key %s: %s started, expected record %d", id, m.Data(), k.next[id])
	}
	k.now++
	k.max = max(k.max, k.now)
}

// end notes that a handler of m returned; done says it succeeded.
func (k *keyLog) end(m *Message, done bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key, _, _ := strings.Cut(string(m.Data()), "/")
	id := k.id(m, key)
	k.running[id] = false
	k.now--
	if done {
		k.next[id]++
		k.handled++
	}
}

func (k *keyLog) id(m *Message, key string) string {
	if k.byKey {
		return key
	}
	return m.ShardID() + "/" + key
}

func (k *keyLog) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.handled
}

// errStopProcess ends the ctx of a test's Process call; Process returns it, and the helpers
// that run Process (processUntil, startProcess) report nil for it.
var errStopProcess = errors.New("the test stops Process")

// processUntil runs Process on sub in a goroutine until n records were handled (as counted by
// handled), then ends it, and returns its error (nil when it returned the cause its ctx was
// ended with).
func processUntil(t *testing.T, sub *Subscriber, n int, handled func() int, handle func(context.Context, *Message) error, opts ...ProcessOption) error {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	res := make(chan error, 1)
	go func() { res <- sub.Process(ctx, handle, opts...) }()
	deadline := time.Now().Add(time.Hour) // in a synctest bubble, an hour of its time
	for handled() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records handled after an hour", handled(), n)
		}
		select {
		case err := <-res:
			t.Fatalf("Process returned after %d of %d records: %v", handled(), n, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel(errStopProcess)
	if err := <-res; err != errStopProcess {
		return err
	}
	return nil
}

// TestProcessOrderPerKey: handlers with random latencies on three shards of 40 keys: per shard
// and key, records are handled one at a time and in order; different keys run at once, up to
// WithConcurrency and never more; every record is acked, so the checkpoints reach each shard's
// last record.
func TestProcessOrderPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const shards, perShard, keys, conc = 3, 600, 40, 24
		rnd := seeded(t)
		f := newFakeStream("order", shards)
		counts := map[string]int{}
		last := make([]string, shards)
		for i := range shards {
			seqs := addKeyed(f, i, perShard, keys, counts)
			last[i] = seqs[len(seqs)-1]
			clear(counts) // keys are per shard
		}
		store := lease.NewMemory()
		sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithInitialPosition(Horizon()), WithBatchSize(100))...)
		log := newKeyLog(t)
		err := processUntil(t, sub, shards*perShard, log.count, func(ctx context.Context, m *Message) error {
			log.begin(m)
			time.Sleep(time.Duration(rnd.IntN(20)) * time.Millisecond)
			log.end(m, true)
			return nil
		}, WithConcurrency(conc))
		require.NoError(t, err)
		require.LessOrEqual(t, log.max, conc)
		require.Greater(t, log.max, conc/2, "keys ran at once")
		require.NoError(t, sub.Close(context.Background()))
		for i, sh := range f.shards {
			require.Equal(t, last[i], readLease(t, store, f.stream, sh.id).Checkpoint.Sequence)
		}
	})
}

// reported is a *ProcessError reported on Errors, with its shard.
type reported struct {
	shard string
	*ProcessError
}

// processErrors collects the *ProcessError reports on sub's Errors until the returned stop is
// called, which returns them in order.
func processErrors(sub *Subscriber) (stop func() []reported) {
	var mu sync.Mutex
	var got []reported
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case err, ok := <-sub.Errors():
				if !ok {
					return
				}
				var se *ShardError
				var pe *ProcessError
				if errors.As(err, &se) && se.Op == OpProcess && errors.As(err, &pe) {
					mu.Lock()
					got = append(got, reported{se.Shard, pe})
					mu.Unlock()
				}
			case <-quit:
				return
			}
		}
	}()
	return func() []reported {
		close(quit)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return got
	}
}

// TestProcessRetriesKeepOrder: failed attempts are retried in process, after a backoff, and the
// records of their key wait behind them while the other keys go on: key k0's first record fails
// three times, and every other key is done before it succeeds; then k0 goes on in order. Each
// failed attempt is reported with its record and attempt number.
func TestProcessRetriesKeepOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("retries", 1)
		seqs := addKeyed(f, 0, 200, 5, map[string]int{})
		store := lease.NewMemory()
		sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithInitialPosition(Horizon()))...)
		errs := processErrors(sub)
		log := newKeyLog(t)
		var mu sync.Mutex
		tries := map[string]int{}
		othersDone := -1 // records of other keys handled when k0/0 succeeded
		err := processUntil(t, sub, 200, log.count, func(ctx context.Context, m *Message) error {
			log.begin(m)
			mu.Lock()
			tries[string(m.Data())]++
			n := tries[string(m.Data())]
			mu.Unlock()
			fail := false
			switch d := string(m.Data()); {
			case d == "k0/0":
				fail = n <= 3
				if !fail {
					othersDone = log.count()
				}
			}
			log.end(m, !fail)
			if fail {
				return fmt.Errorf("try %d of %s failed", n, m.Data())
			}
			return nil
		}, WithConcurrency(8), WithRetryBackoff(time.Second, 10*time.Second))
		require.NoError(t, err)
		require.Equal(t, 160, othersDone, "every record of the other keys was handled while k0/0 waited")
		perr := errs()
		var k0 []int
		for _, e := range perr {
			if e.SequenceNumber == seqs[0] {
				k0 = append(k0, e.Attempt)
				require.ErrorContains(t, e, "of k0/0 failed")
				require.False(t, e.DeadLetter)
			}
		}
		require.Equal(t, []int{1, 2, 3}, k0)
		require.NoError(t, sub.Close(context.Background()))
		require.Equal(t, seqs[len(seqs)-1], readLease(t, store, f.stream, f.shards[0].id).Checkpoint.Sequence)
	})
}

// TestProcessRandomFailuresKeepOrder: records failing at random, some several times, on two
// shards of 30 keys: every key's records are still handled in order, one at a time, and a
// failed attempt is reported once (Errors drops the oldest when its reader lags, so not all).
func TestProcessRandomFailuresKeepOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rnd := seeded(t)
		f := newFakeStream("random", 2)
		for i := range 2 {
			addKeyed(f, i, 300, 30, map[string]int{})
		}
		sub := subscribeFake(t, f, fakeOpts(WithInitialPosition(Horizon()), WithBatchSize(64))...)
		errs := processErrors(sub)
		log := newKeyLog(t)
		var failures atomic.Int64
		err := processUntil(t, sub, 600, log.count, func(ctx context.Context, m *Message) error {
			log.begin(m)
			time.Sleep(time.Duration(rnd.IntN(5)) * time.Millisecond)
			if rnd.IntN(4) == 0 {
				failures.Add(1)
				log.end(m, false)
				return errors.New("transient")
			}
			log.end(m, true)
			return nil
		}, WithConcurrency(16), WithRetryBackoff(time.Millisecond, 50*time.Millisecond))
		require.NoError(t, err)
		require.Greater(t, failures.Load(), int64(100))
		seen := map[string]bool{}
		for _, e := range errs() {
			id := fmt.Sprintf("%s/%s/%d", e.shard, e.SequenceNumber, e.Attempt)
			require.False(t, seen[id], "attempt reported twice: %v", e)
			seen[id] = true
		}
		require.NotEmpty(t, seen)
	})
}

// TestProcessDeadLetter: a record that fails WithMaxAttempts times goes to the dead-letter
// function exactly once (once more only when that fails), with the last error; it then counts
// as handled, and its key goes on.
func TestProcessDeadLetter(t *testing.T) {
	for _, dlFails := range []int{0, 1} {
		t.Run(fmt.Sprintf("dead letter fails %d times", dlFails), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeStream("dead", 1)
				seqs := addKeyed(f, 0, 40, 4, map[string]int{})
				store := lease.NewMemory()
				sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithInitialPosition(Horizon()))...)
				errs := processErrors(sub)
				log := newKeyLog(t)
				var mu sync.Mutex
				var dead []string
				poison := errors.New("poison")
				dl := func(ctx context.Context, m *Message, err error) error {
					mu.Lock()
					defer mu.Unlock()
					if !errors.Is(err, poison) {
						t.Errorf("dead letter of %s with %v, not the handler's error", m.Data(), err)
					}
					dead = append(dead, string(m.Data()))
					if len(dead) <= dlFails {
						return errors.New("dead-letter queue unavailable")
					}
					log.begin(m)
					log.end(m, true)
					return nil
				}
				err := processUntil(t, sub, 40, log.count, func(ctx context.Context, m *Message) error {
					log.begin(m)
					if string(m.Data()) == "k1/2" {
						log.end(m, false)
						return poison
					}
					log.end(m, true)
					return nil
				}, WithMaxAttempts(3), WithDeadLetter(dl), WithRetryBackoff(10*time.Millisecond, 100*time.Millisecond))
				require.NoError(t, err)
				want := []string{"k1/2"}
				for range dlFails {
					want = append(want, "k1/2")
				}
				require.Equal(t, want, dead)
				var attempts []int
				var dlErrs int
				for _, e := range errs() {
					require.Equal(t, seqs[9], e.SequenceNumber)
					if e.DeadLetter {
						dlErrs++
					} else {
						attempts = append(attempts, e.Attempt)
					}
				}
				require.Equal(t, []int{1, 2, 3}, attempts)
				require.Equal(t, dlFails, dlErrs)
				require.NoError(t, sub.Close(context.Background()))
				require.Equal(t, seqs[len(seqs)-1], readLease(t, store, f.stream, f.shards[0].id).Checkpoint.Sequence, "the dead-lettered record counts as handled")
			})
		})
	}
}

// TestProcessStuckRecordShown: without a dead-letter function, a record that used its attempts
// is retried at the maximum backoff until it succeeds; Shards shows it meanwhile (sequence
// number, attempts, since when), its key waits, the other keys go on, and the checkpoint stays
// before it. Once it succeeds its key goes on and Shards no longer shows it.
func TestProcessStuckRecordShown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("stuck", 1)
		seqs := addKeyed(f, 0, 30, 3, map[string]int{})
		store := lease.NewMemory()
		sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithInitialPosition(Horizon()))...)
		log := newKeyLog(t)
		var fixed atomic.Bool
		var mu sync.Mutex
		var tries []time.Time
		ntries := func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(tries)
		}
		ctx, cancel := context.WithCancel(context.Background())
		res := make(chan error, 1)
		start := time.Now()
		go func() {
			res <- sub.Process(ctx, func(ctx context.Context, m *Message) error {
				log.begin(m)
				if string(m.Data()) == "k0/1" && !fixed.Load() {
					mu.Lock()
					tries = append(tries, time.Now())
					mu.Unlock()
					log.end(m, false)
					return errors.New("downstream rejects it")
				}
				log.end(m, true)
				return nil
			}, WithMaxAttempts(2), WithRetryBackoff(10*time.Millisecond, time.Minute))
		}()
		for ntries() < 4 {
			time.Sleep(time.Second)
		}
		synctest.Wait()
		st := sub.Shards()[0].Failing
		require.NotNil(t, st)
		require.Equal(t, seqs[3], st.SequenceNumber)
		require.Equal(t, "k0", st.OrderKey)
		require.Equal(t, 4, st.Attempts)
		require.True(t, st.Exhausted)
		require.Equal(t, 1, st.Failing)
		require.Equal(t, "downstream rejects it", st.LastError)
		require.Equal(t, tries[0], st.Since)
		require.False(t, st.Since.Before(start))
		require.Equal(t, 30-9, log.count(), "everything but k0 from its second record on")
		// Backoff: 10ms (drawn from 5–10ms) after the first failure; the attempts used, the
		// maximum (30–60s) after each later one.
		gaps := []time.Duration{tries[1].Sub(tries[0]), tries[2].Sub(tries[1]), tries[3].Sub(tries[2])}
		require.True(t, gaps[0] >= 5*time.Millisecond && gaps[0] <= 10*time.Millisecond, "gaps %v", gaps)
		for _, g := range gaps[1:] {
			require.True(t, g >= 30*time.Second && g <= time.Minute, "gaps %v", gaps)
		}
		require.NoError(t, sub.Commit(context.Background()))
		require.Equal(t, seqs[2], readLease(t, store, f.stream, f.shards[0].id).Checkpoint.Sequence)

		fixed.Store(true)
		for log.count() < 30 {
			time.Sleep(time.Second)
		}
		synctest.Wait()
		require.Nil(t, sub.Shards()[0].Failing)
		cancel()
		require.ErrorIs(t, <-res, context.Canceled)
		require.NoError(t, sub.Commit(context.Background()))
		require.Equal(t, seqs[29], readLease(t, store, f.stream, f.shards[0].id).Checkpoint.Sequence)
	})
}

// TestProcessPanickingHandler: a handler that panics fails that attempt with a *PanicError
// carrying the value and the stack; the record is retried, nothing crashes.
func TestProcessPanickingHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("panic", 1)
		seqs := addKeyed(f, 0, 10, 2, map[string]int{})
		sub := subscribeFake(t, f, fakeOpts(WithInitialPosition(Horizon()))...)
		errs := processErrors(sub)
		log := newKeyLog(t)
		var once atomic.Bool
		err := processUntil(t, sub, 10, log.count, func(ctx context.Context, m *Message) error {
			log.begin(m)
			if string(m.Data()) == "k1/2" && once.CompareAndSwap(false, true) {
				log.end(m, false)
				panic("boom")
			}
			log.end(m, true)
			return nil
		}, WithRetryBackoff(time.Millisecond, time.Millisecond))
		require.NoError(t, err)
		perr := errs()
		require.Len(t, perr, 1)
		require.Equal(t, seqs[5], perr[0].SequenceNumber)
		var pe *PanicError
		require.ErrorAs(t, perr[0], &pe)
		require.Equal(t, "boom", pe.Value)
		require.Contains(t, string(pe.Stack), "process_test.go")
		require.ErrorContains(t, perr[0], "handler panicked: boom")
	})
}

// TestProcessOptions: invalid options, a nil context or handler fail before anything is taken,
// naming the option and its range; a second consumer gets ErrConsumerBusy at once.
func TestProcessOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("options", 1)
		addKeyed(f, 0, 3, 1, map[string]int{})
		sub := subscribeFake(t, f, fakeOpts(WithInitialPosition(Horizon()))...)
		ok := func(context.Context, *Message) error { return nil }
		for _, tc := range []struct {
			opts []ProcessOption
			want string
		}{
			{[]ProcessOption{WithConcurrency(0)}, "WithConcurrency(0): must be between 1 and 100000"},
			{[]ProcessOption{WithConcurrency(100_001)}, "WithConcurrency(100001)"},
			{[]ProcessOption{WithMaxAttempts(-1)}, "WithMaxAttempts(-1): must be between 0"},
			{[]ProcessOption{WithRetryBackoff(0, time.Second)}, "WithRetryBackoff(0s): base must be between 1ms and 1h0m0s"},
			{[]ProcessOption{WithRetryBackoff(2*time.Second, time.Second)}, "WithRetryBackoff(1s): limit must be between the base (2s) and 1h0m0s"},
			{[]ProcessOption{WithRetryBackoff(time.Second, 2*time.Hour)}, "WithRetryBackoff(2h0m0s)"},
			{[]ProcessOption{WithDeadLetter(nil)}, "WithDeadLetter(nil)"},
			{[]ProcessOption{WithOrderKey(nil)}, "WithOrderKey(nil)"},
			{[]ProcessOption{WithDeadLetter(func(context.Context, *Message, error) error { return nil })}, "needs WithMaxAttempts of at least 1"},
			{[]ProcessOption{nil}, "option 0 of Process is nil"},
		} {
			err := sub.Process(context.Background(), ok, tc.opts...)
			require.ErrorIs(t, err, ErrInvalidOption)
			require.ErrorContains(t, err, tc.want)
		}
		//lint:ignore SA1012 the nil context is what is tested
		err := sub.Process(nil, ok) //nolint:staticcheck
		require.ErrorIs(t, err, ErrInvalidOption)
		require.ErrorContains(t, err, "pass context.Background()")
		require.ErrorIs(t, sub.Process(context.Background(), nil), ErrInvalidOption)

		ctx, cancel := context.WithCancel(context.Background())
		res := make(chan error, 1)
		go func() { res <- sub.Process(ctx, ok) }()
		synctest.Wait()
		require.ErrorIs(t, sub.Process(context.Background(), ok), ErrConsumerBusy)
		for _, err := range sub.All(context.Background()) {
			require.ErrorIs(t, err, ErrConsumerBusy)
		}
		cancel()
		require.ErrorIs(t, <-res, context.Canceled)
		sub.Messages()
		synctest.Wait() // the dispatcher took the hand-off over
		require.ErrorIs(t, sub.Process(context.Background(), ok), ErrConsumerBusy, "Messages consumes for good")
	})
}

// TestJobRingFIFO: the ready queue gives jobs back in the order they came, across its growth
// and its wrapping around.
func TestJobRingFIFO(t *testing.T) {
	var r jobRing
	jobs := make([]job, 1000)
	next, want := 0, 0
	for round := range 50 {
		for range round * 7 % 90 {
			r.push(&jobs[next%len(jobs)])
			next++
		}
		for range round * 5 % 70 {
			j := r.pop()
			if want == next {
				require.Nil(t, j, "empty")
				continue
			}
			require.Same(t, &jobs[want%len(jobs)], j)
			want++
		}
		require.Equal(t, next-want, r.len())
	}
	for ; want < next; want++ {
		require.Same(t, &jobs[want%len(jobs)], r.pop())
	}
	require.Nil(t, r.pop())
	require.Zero(t, r.len())
}
