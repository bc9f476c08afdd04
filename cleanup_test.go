package kinesub

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// TestCleanupDeletesTrimmedParent: a parent read to its end keeps its lease while it is
// listed, and loses it once the service trims it from the listing. Leases of unlisted shards
// that are held, or not finished, are kept; the child reads on. It runs in a synctest bubble:
// cleanup rounds and grace periods are counted in exact time.
func TestCleanupDeletesTrimmedParent(t *testing.T) {
	synctest.Test(t, testCleanupDeletesTrimmedParent)
}

func testCleanupDeletesTrimmedParent(t *testing.T) {
	const name = "cleanup"
	f := newFakeStream(name, 1)
	parent := f.shards[0].id
	f.add(0, time.Now(), "p1", "p2")
	ci := f.split(0)
	child := f.shards[ci].id

	store := lease.NewMemory()
	ctx := context.Background()
	held, unfinished := "shardId-000000000090", "shardId-000000000091"
	holdAsPeer(t, store, name, "other", peerLive, held, unfinished)
	storeCheckpoint(t, store, name+"/"+held, lease.ShardEnd)
	storeCheckpoint(t, store, name+"/"+unfinished, "7")
	storeRelease(t, store, name+"/"+unfinished, "other")

	opts := fakeOpts(WithLeaseStore(store), WithStartAt(Horizon()))
	sub := subscribeFake(t, f, opts...)
	require.Equal(t, "p1", string(recv(t, sub, 1, true)[0].Data()))
	require.Equal(t, "p2", string(recv(t, sub, 1, true)[0].Data()))
	eventually(t, 5*time.Second, "parent finished", func() bool {
		return readLease(t, store, name, parent).Checkpoint.Sequence == lease.ShardEnd
	})
	f.add(ci, time.Now(), "c1")
	require.Equal(t, child, recv(t, sub, 1, true)[0].ShardID())

	// Listed and finished: kept however many cleanup rounds pass.
	time.Sleep(10 * cleanupGrace * sub.cfg.shardSyncInterval)
	require.Equal(t, lease.ShardEnd, readLease(t, store, name, parent).Checkpoint.Sequence, "a listed parent's lease was deleted")

	trimmed := time.Now()
	f.trim(0)
	eventually(t, 5*time.Second, "the trimmed parent's lease deleted", func() bool {
		return readLease(t, store, name, parent) == lease.Lease{Key: name + "/" + parent}
	})
	t.Logf("lease deleted %v after the trim", time.Since(trimmed))
	require.GreaterOrEqual(t, time.Since(trimmed), cleanupGrace*sub.cfg.shardSyncInterval, "deleted before the grace period")

	f.add(ci, time.Now(), "c2")
	m := recv(t, sub, 1, true)[0]
	require.Equal(t, child, m.ShardID())
	require.Equal(t, "c2", string(m.Data()))
	require.NoError(t, sub.Commit(ctx))
	cl := readLease(t, store, name, child)
	require.Equal(t, sub.cfg.owner, cl.Owner)
	require.Equal(t, m.SequenceNumber(), cl.Checkpoint.Sequence)
	st := sub.Shards()
	require.Len(t, st, 1)
	require.Equal(t, ShardReading, st[0].State)

	h := readLease(t, store, name, held)
	require.Equal(t, "other", h.Owner, "a held lease was deleted")
	require.Equal(t, lease.ShardEnd, h.Checkpoint.Sequence)
	require.Equal(t, "7", readLease(t, store, name, unfinished).Checkpoint.Sequence, "an unfinished shard's lease was deleted")

	// The held lease was kept for being held: released, it goes too.
	storeRelease(t, store, name+"/"+held, "other")
	eventually(t, 5*time.Second, "the released lease deleted", func() bool {
		return readLease(t, store, name, held).Counter == 0
	})
	require.Equal(t, "7", readLease(t, store, name, unfinished).Checkpoint.Sequence, "an unfinished shard's lease was deleted")
}
