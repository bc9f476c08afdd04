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
	mu      sync.Mutex
	events  []string
	dropped chan struct{} // closed at the first drop
	onDrop  func()
}

func newReleaseLog() *releaseLog {
	return &releaseLog{Memory: lease.NewMemory(), dropped: make(chan struct{})}
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
