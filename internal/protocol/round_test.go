package protocol

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestShowsLoss: a held shard is lost when its listed lease is another holding, but not when
// the listing shows this holding's own release or binding landing.
func TestShowsLoss(t *testing.T) {
	t0 := time.Now()
	me := Tenure{Owner: "a#1", Counter: 4}
	for _, tc := range []struct {
		name string
		l    Row
		lost bool
	}{
		{"the same holding", Row{Owner: "a#1", Counter: 4}, false},
		{"the same holding, pending", Row{Owner: "a#1", Counter: 4, Expiry: t0.Add(PendingTTL)}, false},
		{"its release", Row{Counter: 5}, false},
		{"its binding", Row{Owner: "a#1", Counter: 5}, false},
		{"stolen", Row{Owner: "b#1", Counter: 5}, true},
		{"stolen pending", Row{Owner: "b#1", Counter: 5, Expiry: t0.Add(PendingTTL)}, true},
		{"released and taken", Row{Owner: "b#1", Counter: 6}, true},
		{"released twice over", Row{Counter: 7}, true},
		{"re-pended by itself", Row{Owner: "a#1", Counter: 5, Expiry: t0.Add(PendingTTL)}, true},
		{"absent", Row{}, true},
	} {
		require.Equal(t, tc.lost, ShowsLoss(tc.l, me), tc.name)
	}
}

// TestBlockingParent: a child waits for every listed parent not read to its end; a parent
// trimmed from the listing does not block.
func TestBlockingParent(t *testing.T) {
	listed := func(id string) bool { return id != "trimmed" }
	leases := map[string]Row{"done": {Finished: true}, "open": {Owner: "x", Counter: 1}}
	require.Empty(t, BlockingParent(nil, listed, leases))
	require.Empty(t, BlockingParent([]string{"done", "trimmed"}, listed, leases))
	require.Equal(t, "open", BlockingParent([]string{"done", "open"}, listed, leases))
	require.Equal(t, "new", BlockingParent([]string{"new"}, listed, leases), "a parent with no lease yet")
}

// TestJudge: gone before anything else; then by how long the counter stood still, against
// ReapAfter and SilentAfter.
func TestJudge(t *testing.T) {
	ttl := 3 * time.Second
	t0 := time.Now()
	var p Peers
	b := p.Observe("o", Row{Key: "k", Owner: "o", Counter: 3}, t0)
	require.Equal(t, Live, Judge("o", b, t0.Add(SilentAfter(ttl)-1), ttl))
	require.Equal(t, Silent, Judge("o", b, t0.Add(SilentAfter(ttl)), ttl))
	require.Equal(t, Silent, Judge("o", b, t0.Add(ReapAfter(ttl)-1), ttl))
	require.Equal(t, Reap, Judge("o", b, t0.Add(ReapAfter(ttl)), ttl))
	require.Equal(t, Gone, Judge("o", nil, t0, ttl), "never read: nothing of its own")
	taken := p.Observe("o", Row{Key: "k", Owner: "x", Counter: 4}, t0)
	require.Equal(t, Gone, Judge("o", taken, t0, ttl), "taken over")
	require.Equal(t, Gone, Judge("o", p.Observe("o", Row{}, t0), t0, ttl), "absent")
}

// TestReapReadBack: the takeover landed only when the row is this instance's one step past the
// counter it was written at; a renewal meanwhile means alive.
func TestReapReadBack(t *testing.T) {
	taken, gone := ReapReadBack(Row{Owner: "me", Counter: 8}, "me", "o", 7)
	require.True(t, taken)
	require.True(t, gone)
	taken, gone = ReapReadBack(Row{Owner: "o", Counter: 8}, "me", "o", 7)
	require.False(t, taken)
	require.False(t, gone, "renewed meanwhile: alive")
	taken, gone = ReapReadBack(Row{Owner: "other", Counter: 8}, "me", "o", 7)
	require.False(t, taken)
	require.True(t, gone, "another watcher took it over")
	taken, _ = ReapReadBack(Row{Owner: "me", Counter: 9}, "me", "o", 7)
	require.False(t, taken, "another takeover of this instance's, not this one")
}

// TestPlannedAndOverdue: dead owners' leases are shown free and counted as orphans; an orphan
// is overdue once rounds a claim tick apart found it so, and forgotten once it is not one.
func TestPlannedAndOverdue(t *testing.T) {
	leases := map[string]Row{"a": {Owner: "dead", Counter: 2}, "b": {Owner: "live", Counter: 3}, "c": {Counter: 1}}
	planned, orphans := Planned(leases, map[string]bool{"dead": true})
	require.Equal(t, map[string]bool{"a": true}, orphans)
	require.Equal(t, Row{Counter: 2}, planned["a"])
	require.Equal(t, leases["b"], planned["b"])
	require.Equal(t, "dead", leases["a"].Owner, "the listing itself is left as it is")

	t0 := time.Now()
	tick := time.Second
	o := OrphanClock{}
	require.Empty(t, o.Overdue(orphans, t0, tick))
	require.Empty(t, o.Overdue(orphans, t0.Add(tick-1), tick))
	require.Equal(t, map[string]bool{"a": true}, o.Overdue(orphans, t0.Add(tick), tick))
	require.Empty(t, o.Overdue(map[string]bool{}, t0.Add(2*tick), tick))
	require.Empty(t, o.Overdue(orphans, t0.Add(3*tick), tick), "found again: timed afresh")
}

// TestReconcile: of its own leases it does not read, a finished one is released and a readable
// one taken up; one read here, or whose life here ended after the listing, is left alone.
func TestReconcile(t *testing.T) {
	leases := map[string]Row{
		"a": {Owner: "me", Counter: 1}, "b": {Owner: "me", Counter: 1, Finished: true},
		"c": {Owner: "me", Counter: 1}, "d": {Owner: "me", Counter: 1}, "e": {Owner: "x", Counter: 1},
		"f": {Owner: "me", Counter: 1}, "g": {Owner: "me", Counter: 1, Finished: true},
	}
	skip := func(id string) bool { return id == "c" || id == "g" }
	takeUp, release := Reconcile(leases, "me", skip, []string{"a", "c", "e", "f"})
	require.Equal(t, []string{"a", "f"}, takeUp, "d is not readable; e is not its own")
	require.Equal(t, []string{"b"}, release)
}

// TestHowToTakeAndLanded: the way a chosen lease is taken, and which read-backs mean the take's
// own write made the holding read.
func TestHowToTakeAndLanded(t *testing.T) {
	t0 := time.Now()
	pend := t0.Add(PendingTTL)
	dead := map[string]bool{"dead": true}
	require.Equal(t, TakeHow{Counter: 4}, HowToTake(Row{Counter: 4}, "me", dead, t0))
	require.Equal(t, TakeHow{Own: true, Counter: 4, Pending: true}, HowToTake(Row{Owner: "me", Counter: 4, Expiry: pend}, "me", dead, t0))
	require.Equal(t, TakeHow{Steal: true, Counter: 4}, HowToTake(Row{Owner: "dead", Counter: 4}, "me", dead, t0))
	require.Equal(t, TakeHow{Counter: 4}, HowToTake(Row{Owner: "live", Counter: 4}, "me", dead, t0), "the Acquire fails")

	acquire := TakeHow{Counter: 4}
	require.True(t, TakeLanded(Row{Owner: "me", Counter: 5}, "me", acquire, true, t0))
	require.True(t, TakeLanded(Row{Owner: "me", Counter: 5}, "me", acquire, false, t0), "an unknown Acquire read back as landed")
	require.False(t, TakeLanded(Row{Owner: "me", Counter: 4}, "me", acquire, false, t0), "an older holding of its own")
	require.False(t, TakeLanded(Row{Owner: "x", Counter: 5}, "me", acquire, true, t0))
	require.False(t, TakeLanded(Row{Owner: "me", Counter: 5, Expiry: pend}, "me", acquire, true, t0), "pending, not asked so")

	steal := TakeHow{Steal: true, Pending: true, Counter: 4}
	require.True(t, TakeLanded(Row{Owner: "me", Counter: 5, Expiry: pend}, "me", steal, false, t0))
	require.False(t, TakeLanded(Row{Owner: "me", Counter: 6, Expiry: pend}, "me", steal, false, t0), "its own from another write")
	require.True(t, TakeLanded(Row{Owner: "me", Counter: 6, Expiry: pend}, "me", steal, true, t0), "applied: a holding of its own past the write")
}

// TestTTLNotes: a heartbeat row's note carries its holder's TTL beside the other fields; a row
// is judged, and a pending take waits, by the TTLs the rows note (a row that notes none: the
// reader's own).
func TestTTLNotes(t *testing.T) {
	note := NoteTTL("load/1 10 2 300", 6*time.Second)
	require.Equal(t, "load/1 10 2 300 ttl/6000", note)
	ttl, ok := NotedTTL(note)
	require.True(t, ok)
	require.Equal(t, 6*time.Second, ttl)
	ttl, ok = NotedTTL(NoteTTL("", 1500*time.Millisecond))
	require.True(t, ok)
	require.Equal(t, 1500*time.Millisecond, ttl)
	for _, n := range []string{"", "load/1 10 2 300", "ttl/", "ttl/-5", "ttl/x", "x ttl/0"} {
		_, ok := NotedTTL(n)
		require.False(t, ok, n)
	}

	own := 1500 * time.Millisecond
	t0 := time.Now()
	var p Peers
	long := p.Observe("long", Row{Key: "k1", Owner: "long", Counter: 3, Note: NoteTTL("", 6*time.Second)}, t0)
	plain := p.Observe("plain", Row{Key: "k2", Owner: "plain", Counter: 3}, t0)
	require.Equal(t, 6*time.Second, long.TTL(own))
	require.Equal(t, own, plain.TTL(own))
	later := t0.Add(ReapAfter(own))
	require.Equal(t, Reap, Judge("plain", plain, later, own))
	require.Equal(t, Live, Judge("long", long, later, own), "judged by its own 6s, not the reader's 1.5s")
	require.Equal(t, Reap, Judge("long", long, t0.Add(ReapAfter(6*time.Second)), own))
	silent := t0.Add(SilentAfter(own))
	p.Observe("plain", plain.Row, silent) // read again, the counter unmoved
	p.Observe("long", long.Row, silent)
	require.True(t, p.Suspect("me", "plain", silent, own))
	require.False(t, p.Suspect("me", "long", silent, own), "not silent in its own TTL")
	require.Equal(t, 6*time.Second, p.LongestTTL(own))
	require.Equal(t, 9*time.Second, p.LongestTTL(9*time.Second))
	beats := p.Beats("me", nil, later, t0, own)
	require.True(t, beats["plain"].Expiry.Equal(t0), "lapsed by the reader's TTL")
	require.True(t, beats["long"].Expiry.IsZero(), "live by its own")
	d, ok := p.NextReap("me", []string{"long"}, false, later, own, time.Hour)
	require.True(t, ok)
	require.Equal(t, SilentAfter(6*time.Second)-ReapAfter(own), d, "its next verdict, in its own TTL")
}
