package leasetest

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// testStealNote: StealNote is a Steal that also sets the note, which Read, List and ListPrefix
// return and other writes (a Steal, a Renew, a checkpoint, a Release) leave as it is; a stale
// counter changes nothing, an absent lease is not stolen, and an over-long note is refused
// before any write.
func testStealNote(t *testing.T, s lease.Store) {
	c := ctx(t)
	k := key(t, "0")
	stealNote := func(owner string, counter int64, note string) bool {
		t.Helper()
		ok, err := s.StealNote(c, k, owner, counter, long, note)
		require.NoError(t, err, "StealNote(%q, %q, %d, %q)", k, owner, counter, note)
		return ok
	}
	assert.False(t, stealNote("a", 0, "absent"), "StealNote of an absent lease")
	assert.Empty(t, read(t, s, k).Owner, "an absent lease stays absent")

	a := hold(t, s, k, "a", long)
	assert.Empty(t, read(t, s, k).Note, "a new lease has no note")
	require.True(t, stealNote("b", a.Counter, "load 1"))
	assert.False(t, stealNote("c", a.Counter, "stale"), "StealNote at a stale counter")
	l := read(t, s, k)
	assert.Equal(t, "b", l.Owner)
	assert.Equal(t, a.Counter+1, l.Counter, "StealNote adds one to the counter")
	assert.Equal(t, "load 1", l.Note)
	b := l.Tenure()

	require.True(t, renew(t, s, k, b, long))
	ok, err := s.CheckpointOrdered(c, k, b, lease.Checkpoint{Sequence: "100"}, 1)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.Steal(c, k, "b", b.Counter, long)
	require.NoError(t, err)
	require.True(t, ok)
	l = read(t, s, k)
	assert.Equal(t, "load 1", l.Note, "Renew, CheckpointOrdered and Steal keep the note")
	assert.Equal(t, "100", seq(l), "StealNote and Steal keep the checkpoint")

	all, err := s.List(c)
	require.NoError(t, err)
	require.Len(t, all, 1)
	assert.Equal(t, l, all[0], "List shows the note as Read does")
	some, err := s.ListPrefix(c, t.Name()+"/")
	require.NoError(t, err)
	require.Len(t, some, 1)
	assert.Equal(t, l, some[0], "ListPrefix shows the note as Read does")

	// A zero TTL: held until released, stolen or deleted.
	ok, err = s.StealNote(c, k, "b", l.Counter, 0, "load 2")
	require.NoError(t, err)
	require.True(t, ok)
	l = read(t, s, k)
	assert.True(t, l.Expiry.IsZero(), "no expiry with a zero TTL")
	assert.Equal(t, "load 2", l.Note)

	_, err = s.StealNote(c, k, "b", l.Counter, long, strings.Repeat("x", lease.MaxNote+1))
	assert.ErrorIs(t, err, lease.ErrInvalidArgument, "a note longer than MaxNote")
	assert.Equal(t, l, read(t, s, k), "nothing written")
	ok, err = s.StealNote(c, k, "b", l.Counter, long, strings.Repeat("x", lease.MaxNote))
	require.NoError(t, err)
	assert.True(t, ok, "a note of MaxNote bytes")

	require.True(t, release(t, s, k, read(t, s, k).Tenure()))
	assert.Equal(t, strings.Repeat("x", lease.MaxNote), read(t, s, k).Note, "Release keeps the note")
}
