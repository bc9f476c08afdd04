package kinesub

import (
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/protocol"
)

// TestShardMeter: a meter counts records by arrival time over the window; records without an
// arrival time, with a zero one or one from long ago count as arriving now or at the oldest
// slot kept, never outside the slots.
func TestShardMeter(t *testing.T) {
	window := 4 * time.Second
	start := time.Now().Add(-10 * time.Second)
	m := newShardMeter(start, window)
	at := func(d time.Duration) *time.Time { x := time.Now().Add(d); return &x }
	var recs []types.Record
	for i := range 40 { // 10 records a second over the last 4 s, 100 bytes each
		recs = append(recs, types.Record{Data: make([]byte, 100), ApproximateArrivalTimestamp: at(-time.Duration(i) * 100 * time.Millisecond)})
	}
	m.add(recs)
	l := m.rate(time.Now())
	assert.InDelta(t, 1000, l.bytes, 400, "bytes a second")
	assert.InDelta(t, 10, l.records, 4, "records a second")

	odd := newShardMeter(time.Now(), window)
	zero := time.Time{}
	epoch := time.Unix(0, 0)
	odd.add([]types.Record{{Data: []byte("x"), ApproximateArrivalTimestamp: &zero}, {Data: []byte("y"), ApproximateArrivalTimestamp: &epoch},
		{Data: []byte("z")}, {Data: []byte("w"), ApproximateArrivalTimestamp: at(-time.Hour)}})
	assert.GreaterOrEqual(t, odd.rate(time.Now().Add(window)).records, 0.0)
	assert.Nil(t, (*shardMeter)(nil), "a nil meter counts nothing")
	(*shardMeter)(nil).add(nil)
}

// TestParseLoadNote: a note reads as a load with or without the utilization; a note written by
// a version that noted the load alone reads as a load with no utilization, and a reader of that
// version, which reads two fields, reads a note with the utilization as the same load.
func TestParseLoadNote(t *testing.T) {
	for _, c := range []struct {
		note    string
		ok      bool
		want    noteLoad
		comment string
	}{
		{"load/1 2048 20 350", true, noteLoad{shardLoad{2048, 20}, 0.35, true}, "this version"},
		{"load/1 2048 20", true, noteLoad{shardLoad{2048, 20}, 0, false}, "an earlier version"},
		{"load/1 2048 20 350 7", true, noteLoad{shardLoad{2048, 20}, 0.35, true}, "a later version's fields are ignored"},
		{"load/1 2048 20 1001", true, noteLoad{shardLoad{2048, 20}, 0, false}, "a utilization out of range is not one"},
		{"load/1 2048 20 x", true, noteLoad{shardLoad{2048, 20}, 0, false}, "nor is text"},
		{"load/1 0 0 0", true, noteLoad{shardLoad{}, 0, true}, "idle"},
		{"load/1 -1 20 350", false, noteLoad{}, "negative"},
		{"load/1 2048", false, noteLoad{}, "too short"},
		{"", false, noteLoad{}, "no note"},
		{"load/2 1 2 3", false, noteLoad{}, "another format"},
	} {
		got, ok := parseLoad(c.note)
		assert.Equal(t, c.ok, ok, c.comment)
		assert.Equal(t, c.want, got, c.comment)
	}

	// An earlier version read notes so; it takes this version's as the load they carry.
	var b, r int64
	n, err := fmt.Sscanf("load/1 2048 20 350", "load/1 %d %d", &b, &r)
	assert.NoError(t, err)
	assert.Equal(t, []int64{2, 2048, 20}, []int64{int64(n), b, r})

	book := newLoadBook(3*time.Second, 6*time.Second)
	got, ok := parseLoad(book.note())
	assert.True(t, ok)
	assert.True(t, got.hasUtil, "a note written here carries the utilization: %q", book.note())
}

// TestLoadNoteWithTTL: the heartbeat row's note carries the TTL after the load's fields, and
// reads as a load all the same (so versions that read only the load still do).
func TestLoadNoteWithTTL(t *testing.T) {
	note := protocol.NoteTTL(fmt.Sprintf(loadNote, 2048, 30, 250), 6*time.Second)
	l, ok := parseLoad(note)
	require.True(t, ok)
	require.Equal(t, 2048.0, l.bytes)
	require.Equal(t, 30.0, l.records)
	require.True(t, l.hasUtil)
	require.Equal(t, 0.25, l.util)
	ttl, ok := protocol.NotedTTL(note)
	require.True(t, ok)
	require.Equal(t, 6*time.Second, ttl)
}
