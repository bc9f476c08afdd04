package protocol

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPendingNotes: a move counts as after a pending holding's write only when a change-row
// read sent after the listing that showed it, and a later one, found different counters, or
// a bump of this subscriber's read the row after that listing; a holding stolen from the noted
// one in one step keeps what was learnt, any other change forgets it.
func TestPendingNotes(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	pending := func(owner string, counter int64) Row {
		return Row{Key: "s/a", Owner: owner, Counter: counter, Expiry: t0.Add(PendingTTL)}
	}
	var p PendingNotes
	p.Listed(map[string]Row{"a": pending("thief", 4), "b": {Owner: "x", Counter: 2}}, at(0), at(10))
	tt := Tenure{Owner: "thief", Counter: 4}
	require.Zero(t, p.MovedAfter("a", tt))
	require.Zero(t, p.MovedAfter("b", Tenure{Owner: "x", Counter: 2}), "a bound lease is not noted")

	p.ChangeRead(at(5), at(12), 7) // sent before the listing arrived: no base
	p.ChangeRead(at(20), at(22), 7)
	require.Zero(t, p.MovedAfter("a", tt), "one read is a base, not a move")
	p.ChangeRead(at(30), at(32), 7)
	require.Zero(t, p.MovedAfter("a", tt), "the same counter again")
	p.ChangeRead(at(40), at(45), 8)
	require.Equal(t, at(45), p.MovedAfter("a", tt), "a move known by the answer that showed it")
	p.ChangeRead(at(50), at(55), 9)
	require.Equal(t, at(45), p.MovedAfter("a", tt), "the first move known is kept")
	require.Zero(t, p.MovedAfter("a", Tenure{Owner: "thief", Counter: 5}), "another holding")

	// Stolen in one step by another thief: what was learnt holds.
	p.Listed(map[string]Row{"a": pending("thief2", 5)}, at(60), at(70))
	require.Equal(t, at(45), p.MovedAfter("a", Tenure{Owner: "thief2", Counter: 5}))
	// Bound, then stolen again: nothing carries over.
	p.Listed(map[string]Row{"a": {Owner: "thief2", Counter: 6}}, at(80), at(90))
	p.Listed(map[string]Row{"a": pending("thief3", 7)}, at(100), at(110))
	t3 := Tenure{Owner: "thief3", Counter: 7}
	require.Zero(t, p.MovedAfter("a", t3))

	// A bump whose read was sent before the listing arrived says nothing; one sent after does.
	p.MovedBy(at(105), at(120))
	require.Zero(t, p.MovedAfter("a", t3))
	p.MovedBy(at(115), at(125))
	require.Equal(t, at(125), p.MovedAfter("a", t3))

	// toBump: once per holding with no move known, for silent owners only.
	p.Listed(map[string]Row{"a": pending("thief3", 7), "c": pending("slow", 3), "d": pending("live", 1)}, at(130), at(140))
	silent := func(o string) bool { return o != "live" }
	require.True(t, p.ToBump(silent), "c's owner is silent and nothing is known after its write")
	require.False(t, p.ToBump(silent), "bumped for already")
	all := func(string) bool { return true }
	require.True(t, p.ToBump(all), "d's owner silent now")
	require.False(t, p.ToBump(all), "a has its move; c and d were bumped for")
}
