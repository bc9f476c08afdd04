package kinesub

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"
)

// TestShardMeterZeroArrival: a record whose arrival time is unset or the zero time (a fake, or
// a server that leaves it out) counts as arriving now, not in a slot before 1970.
func TestShardMeterZeroArrival(t *testing.T) {
	now := time.Now()
	m := newShardMeter(now, 4*time.Second)
	var zero time.Time
	m.add([]types.Record{{Data: []byte("ab"), ApproximateArrivalTimestamp: &zero}, {Data: []byte("cde")}})
	require.Equal(t, now.UnixNano()/m.width, m.slots[(now.UnixNano()/m.width)%meterSlots].slot)
	require.EqualValues(t, 5, m.slots[(now.UnixNano()/m.width)%meterSlots].bytes)
}
