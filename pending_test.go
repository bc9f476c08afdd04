package kinesub

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// TestPendingNotes: a move counts as after a pending holding's write only when a change-row
// read sent after the listing that showed it, and a later one, found different counters, or
// a bump of this subscriber's read the row after that listing; a holding stolen from the noted
// one in one step keeps what was learnt, any other change forgets it.
func TestPendingNotes(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	pending := func(owner string, counter int64) lease.Lease {
		return lease.Lease{Key: "s/a", Owner: owner, Counter: counter, Expiry: t0.Add(pendingTTL)}
	}
	var p pendingNotes
	p.listed(map[string]lease.Lease{"a": pending("thief", 4), "b": {Owner: "x", Counter: 2}}, at(0), at(10))
	tt := lease.Tenure{Owner: "thief", Counter: 4}
	require.Zero(t, p.movedAfter("a", tt))
	require.Zero(t, p.movedAfter("b", lease.Tenure{Owner: "x", Counter: 2}), "a bound lease is not noted")

	p.changeRead(at(5), at(12), 7) // sent before the listing arrived: no base
	p.changeRead(at(20), at(22), 7)
	require.Zero(t, p.movedAfter("a", tt), "one read is a base, not a move")
	p.changeRead(at(30), at(32), 7)
	require.Zero(t, p.movedAfter("a", tt), "the same counter again")
	p.changeRead(at(40), at(45), 8)
	require.Equal(t, at(45), p.movedAfter("a", tt), "a move known by the answer that showed it")
	p.changeRead(at(50), at(55), 9)
	require.Equal(t, at(45), p.movedAfter("a", tt), "the first move known is kept")
	require.Zero(t, p.movedAfter("a", lease.Tenure{Owner: "thief", Counter: 5}), "another holding")

	// Stolen in one step by another thief: what was learnt holds.
	p.listed(map[string]lease.Lease{"a": pending("thief2", 5)}, at(60), at(70))
	require.Equal(t, at(45), p.movedAfter("a", lease.Tenure{Owner: "thief2", Counter: 5}))
	// Bound, then stolen again: nothing carries over.
	p.listed(map[string]lease.Lease{"a": {Owner: "thief2", Counter: 6}}, at(80), at(90))
	p.listed(map[string]lease.Lease{"a": pending("thief3", 7)}, at(100), at(110))
	t3 := lease.Tenure{Owner: "thief3", Counter: 7}
	require.Zero(t, p.movedAfter("a", t3))

	// A bump whose read was sent before the listing arrived says nothing; one sent after does.
	p.movedBy(at(105), at(120))
	require.Zero(t, p.movedAfter("a", t3))
	p.movedBy(at(115), at(125))
	require.Equal(t, at(125), p.movedAfter("a", t3))

	// toBump: once per holding with no move known, for silent owners only.
	p.listed(map[string]lease.Lease{"a": pending("thief3", 7), "c": pending("slow", 3), "d": pending("live", 1)}, at(130), at(140))
	silent := func(o string) bool { return o != "live" }
	require.True(t, p.toBump(silent), "c's owner is silent and nothing is known after its write")
	require.False(t, p.toBump(silent), "bumped for already")
	all := func(string) bool { return true }
	require.True(t, p.toBump(all), "d's owner silent now")
	require.False(t, p.toBump(all), "a has its move; c and d were bumped for")
}

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
