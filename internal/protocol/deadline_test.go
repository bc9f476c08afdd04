package protocol

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDeadline: records may be handed out until the earlier of HandOutFor after the last
// renewal known to have landed (the earliest attempt that may have) and HandOutFor after the
// last confirmation; once passed, the deadline stays put until Restart; Resign ends it for good.
func TestDeadline(t *testing.T) {
	const ttl = 3 * time.Second
	t0 := time.Unix(1_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	d := NewDeadline(ttl)
	require.False(t, d.MayHandOut(at(0)), "not joined")

	require.True(t, d.Joined(at(0), at(10)))
	require.Equal(t, at(2000), d.Until())
	require.True(t, d.MayHandOut(at(1999)))
	require.False(t, d.MayHandOut(at(2000)))

	// A reading of the leases confirms them; the renewals still bound the deadline.
	require.Equal(t, Unchanged, d.Read(at(0), 7, at(20)), "not after the join's send")
	require.Equal(t, at(2000), d.Until())

	// Two attempts, the first one's answer lost: the landed renewal counts from the first send.
	d.Attempt(at(1000))
	d.Attempt(at(1100))
	require.Equal(t, Moved, d.Renewed(at(1200)))
	require.Equal(t, at(2000), d.Until(), "still bound by the join's confirmation")
	ok, ch := d.Confirm(at(1300), 8, at(1350))
	require.False(t, ok, "the change row moved: the leases must be read again")
	require.Equal(t, Unchanged, ch)
	ok, ch = d.Confirm(at(1300), 7, at(1350))
	require.True(t, ok)
	require.Equal(t, Moved, ch)
	require.Equal(t, at(3000), d.Until(), "2/3 TTL after the renewal's first attempt")

	// Nothing lands: the deadline passes, and stays put.
	require.False(t, d.Fire(at(2999)), "not yet")
	require.True(t, d.Fire(at(3000)))
	require.True(t, d.IsPassed())
	d.Attempt(at(3100))
	require.Equal(t, Unchanged, d.Renewed(at(3200)), "passed: nothing moves it until Restart")
	require.False(t, d.MayHandOut(at(3200)))
	// A confirmation that arrives after the deadline passed, unseen by a timer, passes it too.
	d2 := NewDeadline(ttl)
	d2.Joined(at(0), at(0))
	d2.Read(at(0), 1, at(0))
	ok, ch = d2.Confirm(at(100), 1, at(2500))
	require.True(t, ok)
	require.Equal(t, Passed, ch, "checked at now, after the deadline")

	// Every shard lost: the deadline moves on from what landed since.
	require.True(t, d.Restart(at(3250)), "renewed at 3100, confirmed at 1300: until 3300")
	require.Equal(t, at(3300), d.Until())
	require.True(t, d.MayHandOut(at(3299)))
	d3 := d
	require.False(t, d3.Restart(at(3300)), "a deadline already past hands nothing out")

	d.Resign()
	require.False(t, d.MayHandOut(at(3299)), "resigned")
	require.False(t, d.Restart(at(3299)), "resigned for good")
	_, ch = d.Confirm(at(3200), 7, at(3250))
	require.Equal(t, Unchanged, ch)
	require.False(t, d.MayHandOut(at(3250)))
}
