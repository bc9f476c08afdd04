package leasetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// testSubSequence: a checkpoint inside a KPL aggregate keeps its sub-sequence through Read,
// List, Release and a new owner; a checkpoint without one sets it back to zero; a fenced owner
// changes neither.
func testSubSequence(t *testing.T, s lease.Store) {
	const seq = "49590338271490256608559692538361571095921575989136588898"
	k := key(t, "0")
	a := hold(t, s, k, "a", long)
	ok, err := s.Checkpoint(ctx(t), k, a, lease.Checkpoint{Sequence: seq, SubSequence: 4})
	require.NoError(t, err)
	require.True(t, ok)
	l := read(t, s, k)
	assert.Equal(t, lease.Checkpoint{Sequence: seq, SubSequence: 4}, l.Checkpoint)

	all, err := s.List(ctx(t))
	require.NoError(t, err)
	found := false
	for _, x := range all {
		if x.Key == k {
			found = true
			assert.Equal(t, int64(4), x.Checkpoint.SubSequence, "sub-sequence in List")
		}
	}
	assert.True(t, found, "lease missing from List")

	require.True(t, release(t, s, k, a))
	assert.Equal(t, int64(4), read(t, s, k).Checkpoint.SubSequence, "sub-sequence after Release")
	b := hold(t, s, k, "b", short)
	assert.Equal(t, int64(4), read(t, s, k).Checkpoint.SubSequence, "sub-sequence after another owner acquired")

	ok, err = s.Checkpoint(ctx(t), k, a, lease.Checkpoint{Sequence: seq, SubSequence: 7})
	require.NoError(t, err)
	assert.False(t, ok, "Checkpoint by a fenced owner")
	assert.Equal(t, int64(4), read(t, s, k).Checkpoint.SubSequence, "sub-sequence after a fenced Checkpoint")

	require.True(t, checkpoint(t, s, k, b, seq))
	assert.Equal(t, lease.Checkpoint{Sequence: seq}, read(t, s, k).Checkpoint, "after a whole-record checkpoint")

	ok, err = s.Checkpoint(ctx(t), k, b, lease.Checkpoint{Sequence: lease.ShardEnd})
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, lease.Lease{Key: k, Owner: "b", Checkpoint: lease.Checkpoint{Sequence: lease.ShardEnd}}, withoutTimes(read(t, s, k)))
}

// withoutTimes clears what a lease's history decides (expiry, counter), keeping what the test
// wrote.
func withoutTimes(l lease.Lease) lease.Lease {
	l.Expiry, l.Counter = time.Time{}, 0
	return l
}
