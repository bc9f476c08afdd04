package kinesub

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// releaseLog is a memory lease store that notes, in order with the test's own events, each
// release that landed: of a heartbeat row ("drop <owner>") and of a shard lease ("release
// <shard>"). onDrop, if set, runs as a row's release lands, before any later call.
type releaseLog struct {
	*lease.Memory
	mu       sync.Mutex
	events   []string
	dropped  chan struct{} // closed at the first drop
	released chan struct{} // closed at the first release of a shard lease
	onDrop   func()
}

func newReleaseLog() *releaseLog {
	return &releaseLog{Memory: lease.NewMemory(), dropped: make(chan struct{}), released: make(chan struct{})}
}

func (r *releaseLog) note(ev string) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

func (r *releaseLog) log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

func (r *releaseLog) Release(ctx context.Context, key string, t lease.Tenure) (bool, error) {
	ok, err := r.Memory.Release(ctx, key, t)
	if !ok || err != nil {
		return ok, err
	}
	if i := strings.Index(key, "/"+ownerRowPrefix); i >= 0 {
		if r.onDrop != nil {
			r.onDrop()
		}
		r.note("drop " + t.Owner)
		select {
		case <-r.dropped:
		default:
			close(r.dropped)
		}
		return ok, err
	}
	r.note("release " + key[strings.LastIndex(key, "/")+1:])
	select {
	case <-r.released:
	default:
		close(r.released)
	}
	return ok, err
}

// index returns where ev is in events, or -1.
func index(events []string, ev string) int {
	for i, e := range events {
		if e == ev {
			return i
		}
	}
	return -1
}

// TestCloseWaitsForHandOutUnderWay: a record passes its checks just before Close ends the
// shard's hand-outs, and stalls before it reaches the consumer's code: a Process job (k0/1,
// which fills a gap in the drain once k0/0 returns), or a record of All or Batches (k0/0,
// taken before Close). Close neither releases the lease nor drops the heartbeat row while it
// may still get there: peers would read the shard at once. When it gets there within Close's
// bound, Close then releases as usual; when it does not, the lease and the row are left bound
// (peers take them once the row lapses) and Close says so.
func TestCloseWaitsForHandOutUnderWay(t *testing.T) {
	for _, style := range []string{"process", "all", "batches"} {
		for _, inTime := range []bool{true, false} {
			name := style + "/in time"
			if !inTime {
				name = style + "/past the deadline"
			}
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { stallAtClose(t, style, inTime) })
			})
		}
	}
}

func stallAtClose(t *testing.T, style string, inTime bool) {
	f := newFakeStream("close-handing-"+style, 1)
	addKeyed(f, 0, 9, 3, map[string]int{})
	shard := f.shards[0].id
	store := newReleaseLog()
	stalls := "k0/0" // taken before Close
	if style == "process" {
		stalls = "k0/1" // started in Close's drain
	}
	stalled, unstall := make(chan struct{}), make(chan struct{})
	draining := make(chan struct{})
	var drainOnce sync.Once
	pr := &probeSet{
		checked: func(m *Message) {
			if string(m.Data()) == stalls {
				close(stalled)
				<-unstall
			}
		},
		step: func(name, _ string, _ lease.Tenure) {
			if name == "draining" {
				drainOnce.Do(func() { close(draining) })
			}
		},
	}
	a := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithInitialPosition(Horizon()), withProbes(pr))...)
	started := func(m *Message) {
		if string(m.Data()) == stalls {
			store.note("start " + stalls)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	consumed := make(chan error, 1)
	returned := make(chan struct{})
	switch style {
	case "process":
		blocking := make(chan struct{})
		go func() {
			consumed <- a.Process(ctx, func(ctx context.Context, m *Message) error {
				started(m)
				if string(m.Data()) == "k0/0" {
					close(blocking)
					<-returned // a downstream that ignores ctx
				}
				return nil
			})
		}()
		<-blocking
		synctest.Wait() // k1 and k2 handled: k0/1 and k0/2 wait below them
	case "all":
		close(returned)
		go func() {
			for m, err := range a.All(ctx) {
				if err != nil {
					consumed <- err
					return
				}
				started(m)
				_ = m.Ack(ctx)
			}
			consumed <- ErrClosed
		}()
		<-stalled
	case "batches":
		close(returned)
		go func() {
			for b, err := range a.Batches(ctx) {
				if err != nil {
					consumed <- err
					return
				}
				started(b.Messages()[0])
				_ = b.Ack(ctx)
			}
			consumed <- ErrClosed
		}()
		<-stalled
	}
	t0 := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- a.Close(context.Background()) }()
	<-draining
	if style == "process" {
		close(returned) // k0/1 fills the drain's gap: it passes its checks, and stalls
		<-stalled
	}
	var closeErr error
	if inTime {
		select {
		case <-store.dropped:
		case <-time.After(9500*time.Millisecond - time.Since(t0)): // the drain ends at 9s, Close's deadline is at 10s
		}
		close(unstall)
		closeErr = <-closed
	} else {
		select {
		case <-store.dropped:
		case closeErr = <-closed:
		}
		close(unstall)
		if closeErr == nil {
			closeErr = <-closed
		}
	}
	synctest.Wait()
	events := store.log()
	t.Logf("Close returned after %v: %v; events: %v", time.Since(t0), closeErr, events)
	start := index(events, "start "+stalls)
	require.GreaterOrEqual(t, start, 0, "%s never reached the consumer", stalls)
	for _, ev := range []string{"release " + shard, "drop " + a.tenure.owner()} {
		if i := index(events, ev); i >= 0 {
			require.Less(t, start, i, "%s handed to the consumer after %q", stalls, ev)
		}
	}
	if inTime {
		require.NoError(t, closeErr)
		require.GreaterOrEqual(t, index(events, "release "+shard), 0, "the lease was not released")
		require.ErrorIs(t, <-consumed, ErrClosed)
		return
	}
	var se *ShardError
	require.ErrorAs(t, closeErr, &se)
	require.Equal(t, shard, se.Shard)
	require.Equal(t, OpRelease, se.Op)
	l, err := store.Read(context.Background(), a.leaseKey(shard))
	require.NoError(t, err)
	require.Equal(t, a.tenure.owner(), l.Owner, "the lease is left bound to the closed subscriber")
	name, key := a.tenure.self()
	row, err := store.Read(context.Background(), key)
	require.NoError(t, err)
	require.Equal(t, name, row.Owner, "the heartbeat row is left to lapse")
	require.ErrorIs(t, <-consumed, ErrClosed)
}

// TestHandBackWaitsForHandOutUnderWay: a record All took just before its shard was handed
// back stalls before it is yielded, past the hand-back's drain. The lease is released only
// once the record reached the consumer: the next owner reads the shard at once.
func TestHandBackWaitsForHandOutUnderWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("handback-handing", 1)
		addKeyed(f, 0, 9, 3, map[string]int{})
		shard := f.shards[0].id
		store := newReleaseLog()
		stalled, unstall := make(chan struct{}), make(chan struct{})
		var once sync.Once
		pr := &probeSet{checked: func(m *Message) {
			if string(m.Data()) == "k0/0" {
				once.Do(func() { // its first delivery: taken again, after the release, it goes
					close(stalled)
					<-unstall
				})
			}
		}}
		a := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithInitialPosition(Horizon()), withProbes(pr))...)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		consumed := make(chan struct{})
		go func() {
			defer close(consumed)
			for m, err := range a.All(ctx) {
				if err != nil {
					return
				}
				if string(m.Data()) == "k0/0" {
					store.note("start k0/0")
				}
				_ = m.Ack(ctx)
			}
		}()
		<-stalled
		t0 := time.Now()
		a.coord.handBack([]string{shard})
		select {
		case <-store.released:
		case <-time.After(2 * handBackDrain): // past the drain
		}
		close(unstall)
		<-store.released
		synctest.Wait()
		events := store.log()
		t.Logf("released %v after the hand-back; events: %v", time.Since(t0), events)
		start := index(events, "start k0/0")
		require.GreaterOrEqual(t, start, 0, "k0/0 never reached the consumer")
		require.Less(t, start, index(events, "release "+shard), "k0/0 handed to the consumer after the lease was released")
		cancel()
		<-consumed
	})
}

// TestCloseWaitsForHandBack: Close while an earlier hand-back still drains (a delivery of the
// shard handed back is not settled yet) drops the heartbeat row only once that drain wrote its
// last checkpoint and released the lease: peers take every shard bound to the row the moment it
// is gone, and would read the one handed back from an older checkpoint, delivering again what
// was acked.
func TestCloseWaitsForHandBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("close-waits-handback", 2)
		for i := range 2 {
			addKeyed(f, i, 5, 5, map[string]int{})
		}
		store := newReleaseLog()
		opts := []Option{WithLeaseStore(store), WithCheckpointInterval(time.Hour), WithInitialPosition(Horizon())}
		a := subscribeFake(t, f, fakeOpts(append(opts, WithOwner("a"))...)...)
		eventually(t, 5*time.Second, "a reads both", func() bool { return reading(a) == 2 })
		var mu sync.Mutex
		acked := map[string]bool{}       // shard/sequence acked by a
		last := map[string]*Message{}    // the last record of each shard, held unsettled by a
		redelivered := map[string]bool{} // shard/sequence acked by a and delivered by b
		seen := map[string]bool{}        // shard/sequence delivered by b
		checkpoints := map[string]string{}
		go func() {
			for m := range a.Messages() {
				if m.SequenceNumber() == "5" {
					mu.Lock()
					last[m.ShardID()] = m
					mu.Unlock()
					continue
				}
				if err := m.Ack(context.Background()); err != nil {
					t.Errorf("ack: %v", err)
				}
				mu.Lock()
				acked[m.ShardID()+"/"+m.SequenceNumber()] = true
				mu.Unlock()
			}
		}()
		eventually(t, 5*time.Second, "a acked all but the last record of each shard", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(acked) == 8 && len(last) == 2
		})
		store.onDrop = func() {
			if len(checkpoints) > 0 {
				return
			}
			for _, sh := range f.shards {
				l, err := store.Read(context.Background(), a.leaseKey(sh.id))
				if err == nil {
					checkpoints[sh.id] = l.Checkpoint.Sequence
				}
			}
		}
		b := subscribeFake(t, f, fakeOpts(append(opts, WithOwner("b"))...)...)
		go func() {
			for m := range b.Messages() {
				mu.Lock()
				seen[m.ShardID()+"/"+m.SequenceNumber()] = true
				if acked[m.ShardID()+"/"+m.SequenceNumber()] {
					redelivered[m.ShardID()+"/"+m.SequenceNumber()] = true
				}
				mu.Unlock()
				_ = m.Ack(context.Background())
			}
		}()
		var back, kept string
		eventually(t, 10*time.Second, "a hands one back", func() bool {
			for _, sh := range f.shards {
				if handingBack(a, sh.id) {
					back = sh.id
				}
			}
			return back != ""
		})
		for _, sh := range f.shards {
			if sh.id != back {
				kept = sh.id
			}
		}
		mu.Lock()
		require.NoError(t, last[kept].Ack(context.Background())) // the shard kept closes at once
		mu.Unlock()
		require.NoError(t, a.Close(context.Background()))
		<-store.dropped
		t.Logf("checkpoints when a's heartbeat row was dropped: %v; events: %v", checkpoints, store.log())
		require.Equal(t, "4", checkpoints[back], "the shard handed back had not its last checkpoint written when the row was dropped")
		require.Less(t, index(store.log(), "release "+back), index(store.log(), "drop "+a.tenure.owner()))
		eventually(t, 10*time.Second, "b delivers the last record of the shard handed back", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return seen[back+"/5"]
		})
		mu.Lock()
		defer mu.Unlock()
		require.Empty(t, redelivered, "records a acked delivered again by b")
	})
}
