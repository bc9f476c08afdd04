package publish

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/envelope"
	"github.com/gostream/kinesub/internal/kpl"
)

// TestAggregatePlanMatchesEncoding: the size a plan counts is exactly what the encoded aggregate
// takes against the service's limits (its data and partition key), so an aggregate planned to
// fit 1 MiB does; and kinesub's deaggregator reads every user record back: its key, its data
// (with the envelope) and its explicit hash key, in order.
func TestAggregatePlanMatchesEncoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	plan := newAggPlan()
	for round := range 200 {
		plan.reset()
		var recs []*Record
		for range 1 + rng.IntN(300) {
			key := "k" + strconv.Itoa(rng.IntN(20))
			if rng.IntN(10) == 0 {
				key = strings.Repeat("é", 1+rng.IntN(200)) // keys of up to 400 bytes
			}
			r := &Record{key: key, data: bytes.Repeat([]byte{byte(round)}, rng.IntN(400))}
			if rng.IntN(4) == 0 {
				r.ehk = strconv.FormatUint(rng.Uint64(), 10)
				if rng.IntN(2) == 0 {
					r.ehk = "0"
				}
			}
			if rng.IntN(5) == 0 {
				enc, err := envelope.Encode(map[string]string{"n": strconv.Itoa(round)}, r.data)
				require.NoError(t, err)
				r.data = enc
			}
			grow := plan.grow(r)
			before := plan.size()
			plan.add(r)
			require.Equal(t, before+grow, plan.size(), "grow and add disagree")
			recs = append(recs, r)
		}
		data := encodeAggregate(recs)
		require.Equal(t, plan.size(), len(data)+len(recs[0].key), "round %d: planned and encoded sizes differ", round)
		subs, err := kpl.Deaggregate(data)
		require.NoError(t, err)
		require.Len(t, subs, len(recs))
		for i, r := range recs {
			require.Equal(t, r.key, subs[i].PartitionKey)
			require.Equal(t, r.data, subs[i].Data)
			require.Equal(t, r.ehk, subs[i].ExplicitHashKey)
		}
	}
}

// TestAggregateAtTheLimit: records that fill an aggregate to exactly 1 MiB (data and partition
// key) fit, and read back.
func TestAggregateAtTheLimit(t *testing.T) {
	plan := newAggPlan()
	a := &Record{key: "a", data: make([]byte, 500_000)}
	plan.add(a)
	b := &Record{key: "b"}
	for n := MaxRecordBytes - plan.size(); ; n-- { // the largest record that fits
		b.data = make([]byte, n)
		if plan.size()+plan.grow(b) <= MaxRecordBytes {
			break
		}
	}
	plan.add(b)
	require.InDelta(t, MaxRecordBytes, plan.size(), 4, "a varint's byte more would not fit")
	data := encodeAggregate([]*Record{a, b})
	require.Equal(t, plan.size(), len(data)+len(a.key))
	subs, err := kpl.Deaggregate(data)
	require.NoError(t, err)
	require.Equal(t, []kpl.Record{{PartitionKey: "a", Data: a.data, ExplicitHashKey: ""}, {PartitionKey: "b", Data: b.data, ExplicitHashKey: ""}}, subs)
}
