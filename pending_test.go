package kinesub

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// TestVictimNote: the victim a pending steal notes is read back only from the holding that
// wrote it, and only while the lease is pending.
func TestVictimNote(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	pending := now.Add(pendingTTL)
	victim := lease.Tenure{Owner: "host a#1f", Counter: 6}
	note, ok := noteVictim(7, victim)
	require.True(t, ok)
	l := lease.Lease{Key: "s/x", Owner: "thief", Counter: 7, Expiry: pending, Note: note}
	got, ok := victimOf(l, now)
	require.True(t, ok, "note %q", note)
	require.Equal(t, victim, got, "an owner name with a space")
	got, ok = victimToNote(l, now)
	require.True(t, ok)
	require.Equal(t, victim, got, "stealing a pending lease notes its victim again")

	for _, c := range []struct {
		name string
		l    lease.Lease
	}{
		{"written at another holding (a plain Steal since)", lease.Lease{Owner: "next", Counter: 8, Expiry: pending, Note: note}},
		{"bound, not pending", lease.Lease{Owner: "thief", Counter: 7, Note: note}},
		{"released", lease.Lease{Counter: 7, Note: note}},
		{"a load note", lease.Lease{Owner: "thief", Counter: 7, Expiry: pending, Note: "load/1 5 5"}},
		{"no owner named", lease.Lease{Owner: "thief", Counter: 7, Expiry: pending, Note: "victim/1 7 6 "}},
		{"the victim's counter not below", lease.Lease{Owner: "thief", Counter: 7, Expiry: pending, Note: "victim/1 7 7 a"}},
	} {
		_, ok := victimOf(c.l, now)
		require.False(t, ok, c.name)
	}
	got, ok = victimToNote(lease.Lease{Owner: "holder", Counter: 3}, now)
	require.True(t, ok)
	require.Equal(t, lease.Tenure{Owner: "holder", Counter: 3}, got, "stealing a bound lease notes its holder")
	_, ok = victimToNote(lease.Lease{Owner: "thief", Counter: 9, Expiry: pending}, now)
	require.False(t, ok, "a pending lease without a note of its holding: victim unknown")
	_, ok = noteVictim(7, lease.Tenure{Owner: strings.Repeat("x", lease.MaxNote), Counter: 6})
	require.False(t, ok, "a note too long for the store")
}
