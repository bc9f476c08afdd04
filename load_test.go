package kinesub

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/assert"
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
