package kinesub

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
)

// TestPagesFullUnderRateLimit: under the shard's 5 GetRecords calls a second, every call asks
// for a whole page when the caps have room for it by the time the call is made: the first call
// too (no record seen yet), and calls that wait for their turn while the consumer acks one
// record at a time. Short pages would cap the shard's throughput at 5 short pages a second.
func TestPagesFullUnderRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const page, pages = 1000, 4
		f := newFakeStream("pages", 1)
		addNumbered(f, 0, 0, page*pages)
		sub := subscribeFake(t, f, fakeOpts(WithInitialPosition(Horizon()), WithBatchSize(page), WithMaxInFlight(page))...)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var sizes []int
		next := 0
		for b, err := range sub.Batches(ctx) {
			require.NoError(t, err)
			sizes = append(sizes, len(b.Messages()))
			for _, m := range b.Messages() {
				require.Equal(t, next, number(t, m))
				next++
				require.NoError(t, m.Ack(ctx)) // one at a time: the reader wakes half way
			}
			if next == page*pages {
				break
			}
		}
		require.Equal(t, []int{page, page, page, page}, sizes)
	})
}
