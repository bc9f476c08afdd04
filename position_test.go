package kinesub

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

func TestParsePosition(t *testing.T) {
	ts := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	long := strings.Repeat("9", 128)
	shard128 := strings.Repeat("s", 128)
	tests := []struct {
		in     string
		want   Position
		string string // String() of the result, when it differs from in
	}{
		{in: "horizon", want: Horizon()},
		{in: "latest", want: Latest()},
		{in: "timestamp:2026-12-02T10:00:00Z", want: AtTimestamp(ts)},
		{in: "timestamp:2026-12-02T10:00:00.123456789Z", want: AtTimestamp(ts.Add(123456789))},
		{in: "timestamp:2026-12-02T11:00:00+01:00", want: AtTimestamp(ts), string: "timestamp:2026-12-02T10:00:00Z"},
		{in: "sequence:shardId-000000000001:49590338271490256608559692538361571095921575989136588898",
			want: AtSequence("shardId-000000000001", "49590338271490256608559692538361571095921575989136588898")},
		{in: "sequence:" + shard128 + ":" + long, want: AtSequence(shard128, long)},
		{in: "sequence:a_b.c-d:0", want: AtSequence("a_b.c-d", "0")},
		{in: "  horizon\n", want: Horizon(), string: "horizon"},
		{in: "\tsequence:s:1 ", want: AtSequence("s", "1"), string: "sequence:s:1"},
		// Where a shard resumes after a checkpoint, as logged and as the import command prints it.
		{in: "after:shardId-000000000001:4960", want: Position{kind: posAfter, shard: "shardId-000000000001", sequence: "4960"}},
		{in: "after:shardId-000000000001:4960:1", want: Position{kind: posAfter, shard: "shardId-000000000001", sequence: "4960", sub: 1}},
		{in: "after:s:4960:0", want: Position{kind: posAfter, shard: "s", sequence: "4960"}, string: "after:s:4960"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParsePosition(tt.in)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			want := tt.string
			if want == "" {
				want = tt.in
			}
			assert.Equal(t, want, got.String())
			again, err := ParsePosition(got.String())
			require.NoError(t, err)
			assert.Equal(t, got, again)
			assert.False(t, got.IsZero())
		})
	}
}

func TestParsePositionRejects(t *testing.T) {
	for _, in := range []string{
		"",
		"   ",
		"Horizon",
		"LATEST",
		"oldest",
		"horizon latest",
		"invalid", // the zero Position's String form
		"timestamp:",
		"timestamp:yesterday",
		"timestamp:2026-12-02",
		"timestamp:2026-12-02 10:00:00Z",
		"timestamp:2026-12-02T25:00:00Z",
		"timestamp:1700000000",
		"sequence:",
		"sequence:1",
		"sequence:shardId-000000000000",
		"sequence:shardId-000000000000:",
		"sequence::123",
		"sequence:shard id:123",
		"sequence:a:b:123",
		"sequence:shardId-000000000000:12a",
		"sequence:shardId-000000000000:-1",
		"sequence:shardId-000000000000:+1",
		"sequence:shardId-000000000000:1 2",
		"sequence:shardId-000000000000:" + strings.Repeat("1", 129),
		"sequence:" + strings.Repeat("s", 129) + ":1",
		"after:4960",
		"after:4960:1", // the shard first
		"after:shardId-000000000000",
		"after:shardId-000000000000:12a",
		"after:shardId-000000000000:1:-1",
		"sequence:shärd:1",
	} {
		t.Run(in, func(t *testing.T) {
			p, err := ParsePosition(in)
			require.ErrorIs(t, err, ErrInvalidPosition)
			assert.True(t, p.IsZero(), "a rejected text yields the zero Position")
			assert.Contains(t, err.Error(), strconv.Quote(in), "the error quotes the text")
		})
	}
}

// TestParsePositionTimestampRange: a timestamp outside the years an int64 of nanoseconds can
// hold (1678 to 2262) must be rejected, not wrapped around to some other instant: a typo such
// as year 2626 would otherwise replay the stream from 1700-something.
func TestParsePositionTimestampRange(t *testing.T) {
	for _, in := range []string{
		"timestamp:2626-12-02T10:00:00Z",
		"timestamp:9999-12-31T23:59:59Z",
		"timestamp:1600-01-01T00:00:00Z",
		"timestamp:0000-01-01T00:00:00Z",
	} {
		_, err := ParsePosition(in)
		require.ErrorIs(t, err, ErrInvalidPosition, in)
	}
	p, err := ParsePosition("timestamp:2262-01-01T00:00:00Z")
	require.NoError(t, err)
	require.Equal(t, "timestamp:2262-01-01T00:00:00Z", p.String())
}

func TestPositionZeroAndShard(t *testing.T) {
	var zero Position
	assert.True(t, zero.IsZero())
	assert.Equal(t, "invalid", zero.String())
	assert.Equal(t, "", Horizon().Shard())
	assert.Equal(t, "", AtTimestamp(time.Now()).Shard())
	assert.Equal(t, "shardId-000000000003", AtSequence("shardId-000000000003", "7").Shard())
}

func FuzzParsePosition(f *testing.F) {
	for _, s := range []string{
		"horizon", "latest", " latest ", "timestamp:2026-12-02T10:00:00Z",
		"timestamp:2026-12-02T10:00:00.5+05:30", "timestamp:2262-04-11T23:47:16.854775807Z",
		"sequence:shardId-000000000000:1", "sequence:a:b:1", "sequence:s:", "sequence::", "timestamp:",
		"invalid", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePosition(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidPosition) {
				t.Fatalf("ParsePosition(%q): error %v does not wrap ErrInvalidPosition", s, err)
			}
			if !p.IsZero() {
				t.Fatalf("ParsePosition(%q) failed but returned %v", s, p)
			}
			return
		}
		if p.IsZero() {
			t.Fatalf("ParsePosition(%q) succeeded with the zero Position", s)
		}
		again, err := ParsePosition(p.String())
		if err != nil {
			t.Fatalf("ParsePosition(%q) = %v, whose String does not parse: %v", s, p, err)
		}
		if again != p {
			t.Fatalf("ParsePosition(%q) = %#v; its String %q parses to %#v", s, p, p.String(), again)
		}
		if ts, ok := strings.CutPrefix(strings.TrimSpace(s), "timestamp:"); ok {
			want, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil {
				t.Fatalf("ParsePosition(%q) accepted a timestamp time.Parse rejects: %v", s, err)
			}
			if got := time.Unix(0, p.unixNano); !got.Equal(want) {
				t.Fatalf("ParsePosition(%q) is at %v, not %v", s, got, want)
			}
		}
	})
}

// TestCheckpointPositionRoundTrips: where a shard opens after its checkpoint (logged as the
// lease's start) reads back with ParsePosition, and a Seek there resumes at the same record.
func TestCheckpointPositionRoundTrips(t *testing.T) {
	tab := newShardTable(nil, time.Now())
	for _, cp := range []lease.Checkpoint{{Sequence: "4960"}, {Sequence: "4960", SubSequence: 1}, {Sequence: "4960", SubSequence: 3}} {
		p, _ := tab.startInput("shardId-000000000002", cp, Latest())
		got, err := ParsePosition(p.String())
		require.NoError(t, err, "%+v", cp)
		require.Equal(t, p, got)
		require.Equal(t, "shardId-000000000002", got.Shard())
	}
}
