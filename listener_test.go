package kinesub

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// shardEvents records the ShardListener calls of one or more subscribers, in the order they
// were made, as "<name> started <shard> <position>" and "<name> stopped <shard> <reason>".
type shardEvents struct {
	mu     sync.Mutex
	events []string
	// onStop, when set, runs inside Stopped (the shard still waits for it).
	onStop func(ShardStop)
}

func (e *shardEvents) add(ev string) {
	e.mu.Lock()
	e.events = append(e.events, ev)
	e.mu.Unlock()
}

func (e *shardEvents) option(name string) Option {
	return WithShardListener(ShardListener{
		Started: func(s ShardStart) { e.add(fmt.Sprintf("%s started %s %s", name, s.ShardID, s.Position)) },
		Stopped: func(s ShardStop) {
			if e.onStop != nil {
				e.onStop(s)
			}
			e.add(fmt.Sprintf("%s stopped %s %s", name, s.ShardID, s.Reason))
		},
	})
}

func (e *shardEvents) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.events)
}

// about returns the events that mention shard, in order.
func (e *shardEvents) about(shard string) []string {
	var out []string
	for _, ev := range e.all() {
		if slices.Contains(strings.Fields(ev), shard) {
			out = append(out, ev)
		}
	}
	return out
}

// index returns where ev was recorded, failing the test when it was not.
func (e *shardEvents) index(t *testing.T, ev string) int {
	t.Helper()
	i := slices.Index(e.all(), ev)
	require.GreaterOrEqual(t, i, 0, "event %q not among %q", ev, e.all())
	return i
}

const (
	shard0 = "shardId-000000000000"
	shard1 = "shardId-000000000001"
	shard2 = "shardId-000000000002"
	shard3 = "shardId-000000000003"
)

// TestShardListenerReshard: a parent's Stopped (shard ended) comes only once its last delivery
// was acked, and before its children's Started, for a split and then a merge.
func TestShardListenerReshard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("hooks-reshard", 2)
		var ev shardEvents
		sub := subscribeFake(t, f, fakeOpts(withMemSource(f), ev.option("a"), WithInitialPosition(Horizon()))...)
		keyedPayloads(f, 0, 0, 3)
		held := recv(t, sub, 3, false)
		child := f.split(0)
		keyedPayloads(f, child, 3, 3)
		time.Sleep(time.Second) // several shard-sync rounds, in the bubble's time
		synctest.Wait()
		require.Equal(t, []string{"a started " + shard0 + " horizon"}, ev.about(shard0),
			"the parent's Stopped waits for its deliveries to be settled")
		require.Empty(t, ev.about(shard2))
		for _, m := range held {
			require.NoError(t, m.Ack(context.Background()))
		}
		for _, m := range recv(t, sub, 3, true) {
			require.Equal(t, shard2, m.ShardID())
		}
		require.Equal(t, []string{"a started " + shard0 + " horizon", "a stopped " + shard0 + " shard ended"}, ev.about(shard0))
		require.Less(t, ev.index(t, "a stopped "+shard0+" shard ended"), ev.index(t, "a started "+shard2+" horizon"))

		merged := f.merge(1, child)
		keyedPayloads(f, merged, 6, 2)
		for _, m := range recv(t, sub, 2, true) {
			require.Equal(t, shard3, m.ShardID())
		}
		start := ev.index(t, "a started "+shard3+" horizon")
		require.Less(t, ev.index(t, "a stopped "+shard1+" shard ended"), start)
		require.Less(t, ev.index(t, "a stopped "+shard2+" shard ended"), start)

		require.NoError(t, sub.Close(context.Background()))
		require.Equal(t, []string{"a started " + shard3 + " horizon", "a stopped " + shard3 + " closing"}, ev.about(shard3))
	})
}

// TestShardListenerClose: Close calls Stopped (closing) once the deliveries handed out were
// acked and the last checkpoint written, and before the lease is released.
func TestShardListenerClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("hooks-close", 1)
		store := lease.NewMemory()
		var ev shardEvents
		var atStop lease.Lease
		ev.onStop = func(ShardStop) { atStop = readLease(t, store, f.stream, shard0) }
		sub := subscribeFake(t, f, fakeOpts(withMemSource(f), WithLeaseStore(store), ev.option("a"), WithInitialPosition(Horizon()))...)
		keyedPayloads(f, 0, 0, 2)
		held := recv(t, sub, 2, false)
		require.NoError(t, held[0].Ack(context.Background()))
		closed := make(chan error, 1)
		go func() { closed <- sub.Close(context.Background()) }()
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		require.Len(t, ev.about(shard0), 1, "Stopped waits for the delivery still held")
		require.NoError(t, held[1].Ack(context.Background()))
		require.NoError(t, <-closed)
		require.Equal(t, []string{"a started " + shard0 + " horizon", "a stopped " + shard0 + " closing"}, ev.about(shard0))
		require.Equal(t, held[1].SequenceNumber(), atStop.Checkpoint.Sequence, "the last checkpoint is written before Stopped")
		require.NotEmpty(t, atStop.Owner, "the lease is released after Stopped")
		require.Empty(t, readLease(t, store, f.stream, shard0).Owner)
	})
}

// TestShardListenerSteal: a lease taken over by another owner ends in Stopped (lease lost);
// a seek in Stopped (sought) and Started at the new position.
func TestShardListenerStealAndSeek(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("hooks-steal", 1)
		store := lease.NewMemory()
		var ev shardEvents
		sub := subscribeFake(t, f, fakeOpts(withMemSource(f), WithLeaseStore(store), ev.option("a"), WithInitialPosition(Horizon()))...)
		keyedPayloads(f, 0, 0, 3)
		got := recv(t, sub, 3, true)
		require.NoError(t, sub.Seeker().Seek(context.Background(), AtSequence(shard0, got[1].SequenceNumber())))
		recv(t, sub, 2, false) // the last two again; unsettled when the lease goes
		stealAsPeer(t, store, f.stream, shard0, "thief")
		waitErr(t, sub, ErrLeaseLost, time.Minute)
		synctest.Wait()
		require.Equal(t, []string{
			"a started " + shard0 + " horizon",
			"a stopped " + shard0 + " sought",
			"a started " + shard0 + " sequence:" + shard0 + ":" + got[1].SequenceNumber(),
			"a stopped " + shard0 + " lease lost",
		}, ev.about(shard0))
	})
}

// TestShardListenerHandBack: a subscriber that joins gets its share from the first by a
// hand-back: the first's Stopped (handed back) comes before the second's Started.
func TestShardListenerHandBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("hooks-handback", 2)
		store := lease.NewMemory()
		var ev shardEvents
		opts := func(name string) []Option {
			return fakeOpts(withMemSource(f), WithLeaseStore(store), ev.option(name), WithOwner(name),
				WithInitialPosition(Horizon()), WithBalanceInterval(100*time.Millisecond))
		}
		a := subscribeFake(t, f, opts("a")...)
		eventually(t, time.Minute, "a reads both shards", func() bool { return len(ev.all()) == 2 })
		b := subscribeFake(t, f, opts("b")...)
		eventually(t, time.Minute, "b reads one shard", func() bool { return len(heldShards(b)) == 1 })
		synctest.Wait()
		var moved string
		for id := range heldShards(b) {
			moved = id
		}
		require.Equal(t, []string{
			"a started " + moved + " horizon",
			"a stopped " + moved + " handed back",
			"b started " + moved + " horizon",
		}, ev.about(moved))
		require.NoError(t, a.Close(context.Background()))
		require.NoError(t, b.Close(context.Background()))
	})
}
