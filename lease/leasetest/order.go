package leasetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// testRenewNeverShortens: a renewal with a shorter TTL than the last one, as a renewal that
// arrives late looks, leaves the later expiry and reports the holding current; a fenced
// renewal still reports false.
func testRenewNeverShortens(t *testing.T, s lease.Store) {
	k := key(t, "0")
	a := hold(t, s, k, "a", short)
	require.True(t, renew(t, s, k, a, long))
	later := read(t, s, k).Expiry
	assert.True(t, renew(t, s, k, a, short), "Renew with a shorter TTL by the holder")
	assert.Equal(t, later, read(t, s, k).Expiry, "a shorter renewal moved the expiry back")

	time.Sleep(expire) // past what the shorter renewal would have left
	assert.False(t, acquire(t, s, k, "b", long), "Acquire while the later expiry stands")
	require.True(t, release(t, s, k, a))
	assert.False(t, renew(t, s, k, a, long), "Renew after Release")
}

// testCheckpointsInOrder: within a holding, a checkpoint write with a lower number than one
// already applied, as a write applied late looks, changes nothing and reports true; the same
// number is applied again (a retry); a new holding's writes apply whatever their numbers; a
// fenced write reports false; Checkpoint forgets the order.
func testCheckpointsInOrder(t *testing.T, s lease.Store) {
	k := key(t, "0")
	c := ctx(t)
	write := func(h lease.Tenure, seq string, n int64) bool {
		t.Helper()
		ok, err := s.CheckpointOrdered(c, k, h, lease.Checkpoint{Sequence: seq}, n)
		require.NoError(t, err, "CheckpointOrdered(%q, %+v, %s, %d)", k, h, seq, n)
		return ok
	}
	a := hold(t, s, k, "a", long)
	require.True(t, write(a, "200", 2))
	assert.True(t, write(a, "100", 1), "an earlier write of the holding, arriving late")
	assert.Equal(t, "200", seq(read(t, s, k)), "a late write moved the checkpoint back")
	assert.True(t, write(a, "250", 2), "the same write number again")
	assert.Equal(t, "250", seq(read(t, s, k)))
	require.True(t, write(a, "300", 3))

	require.True(t, release(t, s, k, a))
	assert.False(t, write(a, "400", 9), "a write of a holding that is over")
	b := hold(t, s, k, "b", long)
	assert.Equal(t, "300", seq(read(t, s, k)))
	assert.True(t, write(b, "310", 1), "the first write of a new holding")
	assert.Equal(t, "310", seq(read(t, s, k)))
	require.True(t, checkpoint(t, s, k, b, "320"))
	assert.True(t, write(b, "330", 1), "an ordered write after Checkpoint")
	assert.Equal(t, "330", seq(read(t, s, k)))

	for _, n := range []int64{0, -1, lease.MaxCheckpointWrite + 1} {
		_, err := s.CheckpointOrdered(c, k, b, lease.Checkpoint{Sequence: "1"}, n)
		assert.ErrorIs(t, err, lease.ErrInvalidArgument, "write number %d", n)
	}
	_, err := s.CheckpointOrdered(c, k, b, lease.Checkpoint{}, 1)
	assert.ErrorIs(t, err, lease.ErrInvalidArgument, "empty sequence")
	assert.Equal(t, "330", seq(read(t, s, k)), "refused writes changed the checkpoint")
}
