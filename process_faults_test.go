package kinesub

import (
	"context"
	"errors"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// TestProcessNackFailsAttempt: a handler that nacks its record and returns nil has failed its
// attempt: the record is reported and retried, its key waits behind it, and once it succeeds
// the checkpoint passes it (a Nack that settled the record would hold the checkpoint there,
// and a rewind would skip the record).
func TestProcessNackFailsAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("nack", 1)
		seqs := addKeyed(f, 0, 40, 4, map[string]int{})
		store := lease.NewMemory()
		sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithInitialPosition(Horizon()))...)
		errs := processErrors(sub)
		log := newKeyLog(t)
		var mu sync.Mutex
		tries := map[string]int{}
		err := processUntil(t, sub, 40, log.count, func(ctx context.Context, m *Message) error {
			log.begin(m)
			mu.Lock()
			tries[string(m.Data())]++
			n := tries[string(m.Data())]
			mu.Unlock()
			if string(m.Data()) == "k1/2" && n == 1 {
				require.NoError(t, m.Nack(ctx))
				log.end(m, false)
				return nil
			}
			log.end(m, true)
			return nil
		}, WithRetryBackoff(time.Millisecond, 10*time.Millisecond))
		require.NoError(t, err)
		mu.Lock()
		require.Equal(t, 2, tries["k1/2"], "attempts of the nacked record")
		mu.Unlock()
		var nacked []*ProcessError
		for _, e := range errs() {
			nacked = append(nacked, e.ProcessError)
		}
		require.Len(t, nacked, 1)
		require.Equal(t, seqs[9], nacked[0].SequenceNumber)
		require.True(t, errors.Is(nacked[0], errHandlerNacked), "%v", nacked[0])
		require.NoError(t, sub.Close(context.Background()))
		require.Equal(t, seqs[len(seqs)-1], readLease(t, store, f.stream, f.shards[0].id).Checkpoint.Sequence)
	})
}

// TestProcessKeyOrderAcrossSplit: a handler that ignores its ctx runs on after its shard was
// handed back; the shard's next holder reads it to its end, and its child (a split) comes to
// this Process: the child's records of that key wait until the parent's handler returned,
// while the child's other keys go on.
func TestProcessKeyOrderAcrossSplit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("linger", 2)
		var child [2]int
		for i := range 2 {
			counts := map[string]int{}
			addKeyed(f, i, 3, 3, counts) // k0/0 k1/0 k2/0
			child[i] = f.split(i)
			addKeyed(f, child[i], 3, 3, counts) // k0/1 k1/1 k2/1
		}
		store := lease.NewMemory()
		a := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithInitialPosition(Horizon()))...)
		eventually(t, 5*time.Second, "a reads both", func() bool { return reading(a) == 2 })
		release := make(chan struct{})
		var mu sync.Mutex
		var events []string // "<shard>:<payload> start|end"
		note := func(m *Message, what string) {
			mu.Lock()
			events = append(events, m.ShardID()+":"+string(m.Data())+" "+what)
			mu.Unlock()
		}
		has := func(ev string) bool {
			mu.Lock()
			defer mu.Unlock()
			return slices.Contains(events, ev)
		}
		stop := startProcess(a, func(ctx context.Context, m *Message) error {
			note(m, "start")
			if string(m.Data()) == "k0/0" {
				<-release // ignores its ctx, past the hand-back's drain
			}
			note(m, "end")
			return nil
		})
		synctest.Wait()
		b := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("b"), WithInitialPosition(Horizon()))...)
		bctx, bcancel := context.WithCancel(context.Background())
		bdone := make(chan struct{})
		go func() { // b reads the parent handed back to its end, and nothing more
			defer close(bdone)
			for m, err := range b.All(bctx) {
				if err != nil {
					return
				}
				if m.ShardID() != f.shards[0].id && m.ShardID() != f.shards[1].id {
					_ = m.Nack(context.Background())
					return
				}
				_ = m.Ack(context.Background())
			}
		}()
		parent := -1
		eventually(t, 30*time.Second, "b reads a parent to its end", func() bool {
			for i := range 2 {
				if l, err := store.Read(context.Background(), f.stream+"/"+f.shards[i].id); err == nil && l.Checkpoint.Sequence == lease.ShardEnd {
					parent = i
					return true
				}
			}
			return false
		})
		bcancel()
		<-bdone
		require.NoError(t, b.Close(context.Background()))
		kid := f.shards[child[parent]].id
		eventually(t, 30*time.Second, "a handles the child's other keys", func() bool {
			return has(kid+":k1/1 end") && has(kid+":k2/1 end")
		})
		time.Sleep(5 * time.Second)
		synctest.Wait()
		early := has(kid + ":k0/1 start")
		close(release)
		require.False(t, early, "the child's k0/1 started while the parent's k0/0 runs")
		eventually(t, 5*time.Second, "the child's k0/1 handled", func() bool { return has(kid + ":k0/1 end") })
		require.NoError(t, stop())
		mu.Lock()
		defer mu.Unlock()
		require.Less(t, slices.Index(events, f.shards[parent].id+":k0/0 end"), slices.Index(events, kid+":k0/1 start"), "%v", events)
	})
}

// TestProcessReturnsWhyItStopped: Process returns the cause its ctx ended with (at once when it
// had ended already), ErrClosed when Close ends the subscription under it, and ErrClosed at
// once after Close, so that a caller's loop can tell why it stopped and does not spin.
func TestProcessReturnsWhyItStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("why", 1)
		addKeyed(f, 0, 10, 2, map[string]int{})
		sub := subscribeFake(t, f, fakeOpts(WithInitialPosition(Horizon()))...)
		ok := func(context.Context, *Message) error { return nil }
		cause := errors.New("shutting down")

		ctx, cancel := context.WithCancelCause(context.Background())
		res := make(chan error, 1)
		go func() { res <- sub.Process(ctx, ok) }()
		synctest.Wait()
		cancel(cause)
		require.ErrorIs(t, <-res, cause)
		require.ErrorIs(t, sub.Process(ctx, ok), cause, "ctx ended before the call")

		dl, cancelDL := context.WithTimeout(context.Background(), time.Second)
		defer cancelDL()
		require.ErrorIs(t, sub.Process(dl, ok), context.DeadlineExceeded)

		go func() { res <- sub.Process(context.Background(), ok) }()
		synctest.Wait()
		require.NoError(t, sub.Close(context.Background()))
		require.ErrorIs(t, <-res, ErrClosed, "Close under a running Process")
		require.ErrorIs(t, sub.Process(context.Background(), ok), ErrClosed, "after Close")
	})
}

// seekDuringStart runs Process on ten records of one key, pauses a worker at a point of its
// start of the first record (probes), seeks the shard to its beginning meanwhile, and returns
// the ctx errors of the handlers started on a record fetched before the seek, and how often
// each record of the new position was handled. at installs the pause in the probes.
func seekDuringStart(t *testing.T, at func(pr *probeSet, pause func())) (stale []error, fresh map[string]int) {
	f := newFakeStream("seek-start", 1)
	seqs := addKeyed(f, 0, 10, 1, map[string]int{})
	var armed atomic.Bool
	armed.Store(true)
	paused, resume := make(chan struct{}), make(chan struct{})
	pr := &probeSet{}
	at(pr, func() {
		if armed.CompareAndSwap(true, false) {
			close(paused)
			<-resume
		}
	})
	store := lease.NewMemory()
	sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithInitialPosition(Horizon()), withProbes(pr))...)
	var mu sync.Mutex
	fresh = map[string]int{}
	stop := startProcess(sub, func(ctx context.Context, m *Message) error {
		mu.Lock()
		defer mu.Unlock()
		if m.stale() {
			stale = append(stale, ctx.Err())
			return nil // its result must be ignored: not acked, not retried
		}
		fresh[string(m.Data())]++
		return nil
	})
	<-paused
	require.NoError(t, sub.Seeker().Seek(context.Background(), Horizon()))
	close(resume)
	eventually(t, 10*time.Second, "the records handled again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(fresh) == 10
	})
	synctest.Wait()
	require.NoError(t, stop())
	require.NoError(t, sub.Commit(context.Background()))
	require.Equal(t, seqs[9], readLease(t, store, f.stream, f.shards[0].id).Checkpoint.Sequence)
	mu.Lock()
	defer mu.Unlock()
	return stale, fresh
}

// TestProcessSeekFenceNotStarted: a worker that took a record before a Seek and reaches it
// only after Seek returned does not start it: nothing fetched before Seek returns is started
// after it, except in the instant below.
func TestProcessSeekFenceNotStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stale, fresh := seekDuringStart(t, func(pr *probeSet, pause func()) {
			pr.pause = func() {
				if strings.Contains(string(debug.Stack()), "(*processor).work") {
					pause() // after the worker took the record, before it starts it
				}
			}
		})
		require.Empty(t, stale, "records fetched before the seek started after it")
		for d, n := range fresh {
			require.Equal(t, 1, n, "%s handled again", d)
		}
	})
}

// TestProcessSeekFenceInstant: a worker that checked its record and is about to call the
// handler when a Seek moves the shard calls it after Seek returned: the handler's ctx has
// ended already, and what it returns is ignored: the record is not acked (the new position
// delivers and handles it again) nor retried.
func TestProcessSeekFenceInstant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stale, fresh := seekDuringStart(t, func(pr *probeSet, pause func()) {
			pr.handedOut = func(*Message, time.Time) { pause() } // the last step before the handler
		})
		require.Len(t, stale, 1, "the record in the instant started once, not retried")
		require.ErrorIs(t, stale[0], context.Canceled, "its ctx had ended")
		for d, n := range fresh {
			require.Equal(t, 1, n, "%s handled again", d)
		}
	})
}
