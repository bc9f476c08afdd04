package kinesub

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

func dynamoStore(t *testing.T) *lease.DynamoDB {
	t.Helper()
	table := lease.NewDynamoDB(testenv.DynamoDB(t), testenv.Name(t))
	require.NoError(t, table.EnsureTable(context.Background()))
	return table
}

// split counts the shard leases of stream per owner, sorted descending. A lease counts for
// its owner until released or taken over, expired or not: a renewal late on a busy machine
// does not move a shard.
func split(t *testing.T, store lease.Store, stream string) []int {
	t.Helper()
	ls, err := store.List(context.Background())
	require.NoError(t, err)
	per := map[string]int{}
	for _, l := range ls {
		if strings.HasPrefix(l.Key, stream+"/") && lease.KindOf(l.Key) == lease.KindShard && l.Owner != "" {
			per[l.Owner]++
		}
	}
	var out []int
	for _, n := range per {
		out = append(out, n)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(out)))
	return out
}

// TestBalanceConverges: one instance holds all 12 shards; two more join. The split becomes
// 4/4/4 (in well under a second on an idle machine: the time is logged) and stays there for
// 10 balance periods.
func TestBalanceConverges(t *testing.T) {
	s := newStream(t, 12)
	store := dynamoStore(t)
	period := 500 * time.Millisecond
	// A TTL long enough that a busy machine does not delay a renewal past it: a lease that
	// lapses moves, and this test is about moves made to balance.
	opts := func(owner string) []Option {
		return testOpts(store, WithOwner(owner), WithBalanceInterval(period), WithShardSyncInterval(200*time.Millisecond),
			WithLeaseTTL(3*time.Second))
	}
	subA := subscribeT(t, s, opts("a")...)
	eventually(t, 30*time.Second, "a holds all 12", func() bool {
		sp := split(t, store, s.name)
		return len(sp) == 1 && sp[0] == 12
	})
	_ = subA
	start := time.Now()
	subscribeT(t, s, opts("b")...)
	subscribeT(t, s, opts("c")...)
	eventually(t, 30*time.Second, "4/4/4", func() bool {
		return fmt.Sprint(split(t, store, s.name)) == "[4 4 4]"
	})
	t.Logf("converged to 4/4/4 in %v (balance period %v)", time.Since(start), period)
	for end := time.Now().Add(10 * period); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		require.Equal(t, "[4 4 4]", fmt.Sprint(split(t, store, s.name)), "the split flapped")
	}
}

// TestHandoffOnClose: two instances share 4 shards; when one closes, it releases its leases,
// and the other takes and reads all 4 without waiting for the lease TTL (10 s): well under a
// second on an idle machine (the time is logged). It resumes right after the closed one's acks.
func TestHandoffOnClose(t *testing.T) {
	s := newStream(t, 4)
	store := dynamoStore(t)
	opts := func(owner string) []Option {
		return []Option{WithLeaseStore(store), WithOwner(owner), WithLeaseTTL(10 * time.Second),
			WithPollInterval(50 * time.Millisecond), WithStartAt(Horizon())}
	}
	subA := subscribeT(t, s, opts("a")...)
	eventually(t, 30*time.Second, "a holds all 4", func() bool { return fmt.Sprint(split(t, store, s.name)) == "[4]" })
	subB, err := Subscribe(context.Background(), s.c, s.name, []Option{WithLeaseStore(store), WithOwner("b"),
		WithLeaseTTL(10 * time.Second), WithPollInterval(50 * time.Millisecond), WithBalanceInterval(300 * time.Millisecond)}...)
	require.NoError(t, err)
	defer subB.Close(context.Background())
	eventually(t, 30*time.Second, "2/2", func() bool { return fmt.Sprint(split(t, store, s.name)) == "[2 2]" })
	// a learns of b's takeovers on its next renewal (TTL/3).
	eventually(t, 30*time.Second, "a reads 2 shards", func() bool { return reading(subA) == 2 })

	s.publish(400, 16)
	var oc orderChecker
	fromA := 0
	for _, m := range drainFor(t, subA, 300*time.Millisecond) {
		oc.see(t, m)
		require.NoError(t, m.Ack(context.Background()))
		fromA++
	}
	start := time.Now()
	require.NoError(t, subA.Close(context.Background()))
	// Close released a's leases: b takes them without waiting for them to expire, however long
	// the machine then takes to schedule it.
	for _, id := range s.shardIDs() {
		require.NotEqual(t, "a", readLease(t, store, s.name, id).Owner, "lease of %s kept after Close", id)
	}
	eventually(t, time.Minute, "b holds all 4", func() bool { return fmt.Sprint(split(t, store, s.name)) == "[4]" })
	t.Logf("handoff after Close took %v", time.Since(start))
	got := recv(t, subB, 400-fromA, true)
	for _, m := range got {
		oc.see(t, m)
	}
	upTo(t, s, subB, nil) // nothing A acked is delivered again
	for k, n := range oc.next {
		require.Equal(t, 25, n, "key %s", k)
	}
}

// drainFor receives whatever arrives within d.
func drainFor(t *testing.T, sub *Subscriber, d time.Duration) []*Message {
	t.Helper()
	var got []*Message
	deadline := time.After(d)
	for {
		select {
		case m := <-sub.Messages():
			got = append(got, m)
		case <-deadline:
			return got
		}
	}
}

// TestShardsStatus: Shards reports reading, finished and waiting shards.
func TestShardsStatus(t *testing.T) {
	s := newStream(t, 2)
	store := lease.NewMemory()
	sub := subscribeT(t, s, testOpts(store, WithStartAt(Horizon()))...)
	s.publish(4, 2)
	got := recv(t, sub, 4, false)
	eventually(t, 30*time.Second, "both shards reading", func() bool {
		st := sub.Shards()
		return len(st) == 2 && st[0].State == ShardReading && st[1].State == ShardReading
	})
	inflight := 0
	for _, st := range sub.Shards() {
		inflight += st.InFlight
		require.NotEmpty(t, st.LastDelivered)
		require.Equal(t, sub.cfg.owner, st.Owner)
	}
	require.Equal(t, 4, inflight)
	for _, m := range got {
		require.NoError(t, m.Ack(context.Background()))
	}
	require.NoError(t, sub.Commit(context.Background()))
	for _, st := range sub.Shards() {
		require.Zero(t, st.InFlight)
		require.Equal(t, st.LastDelivered, st.LastCheckpoint)
	}
}
