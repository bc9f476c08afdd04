package lease_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// TestStealNote: a StealNote is a Steal that also sets the note, which Read, List and
// ListPrefix return and other writes leave as it is; a stale counter changes nothing, and an
// over-long note is refused before any write.
func TestStealNote(t *testing.T) {
	stores := map[string]func(t *testing.T) lease.Store{
		"memory":   func(*testing.T) lease.Store { return lease.NewMemory() },
		"dynamodb": func(t *testing.T) lease.Store { return newTable(t, testenv.DynamoDB(t)) },
	}
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := timeout(t)
			st := newStore(t)
			ns, ok := st.(lease.NoteStealer)
			require.True(t, ok)
			const key = "s/~v2/owner/a"
			ok, err := st.Acquire(ctx, key, "a", time.Minute)
			require.NoError(t, err)
			require.True(t, ok)

			ok, err = ns.StealNote(ctx, key, "a", 1, time.Minute, "load 1")
			require.NoError(t, err)
			require.True(t, ok)
			ok, err = ns.StealNote(ctx, key, "a", 1, time.Minute, "stale")
			require.NoError(t, err)
			assert.False(t, ok, "a stale counter")
			l, err := st.Read(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, lease.Lease{Key: key, Owner: "a", Counter: 2, Expiry: l.Expiry, Note: "load 1"}, l)
			assert.True(t, l.Held(time.Now()))

			ok, err = st.Steal(ctx, key, "a", 2, time.Minute)
			require.NoError(t, err)
			require.True(t, ok)
			all, err := st.List(ctx)
			require.NoError(t, err)
			require.Len(t, all, 1)
			assert.Equal(t, "load 1", all[0].Note, "a Steal keeps the note")
			assert.EqualValues(t, 3, all[0].Counter)

			ok, err = ns.StealNote(ctx, key, "a", 3, 0, "load 2")
			require.NoError(t, err)
			require.True(t, ok)
			some, err := st.(lease.PrefixLister).ListPrefix(ctx, "s/")
			require.NoError(t, err)
			require.Len(t, some, 1)
			assert.Equal(t, lease.Lease{Key: key, Owner: "a", Counter: 4, Note: "load 2"}, some[0], "no expiry with a zero TTL")

			_, err = ns.StealNote(ctx, key, "a", 4, time.Minute, strings.Repeat("x", lease.MaxNote+1))
			assert.True(t, errors.Is(err, lease.ErrInvalidArgument), "%v", err)
			l, err = st.Read(ctx, key)
			require.NoError(t, err)
			assert.EqualValues(t, 4, l.Counter, "nothing written")
		})
	}
}
