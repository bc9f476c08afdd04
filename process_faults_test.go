package kinesub

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// TestProcessNackFailsAttempt: a handler that nacks its record and returns nil has failed its
// attempt: the record is reported and retried, its key waits behind it, and once it succeeds
// the checkpoint passes it (a Nack that settled the record would hold the checkpoint there,
// and a rewind would skip the record).
func TestProcessNackFailsAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("nack", 1)
		seqs := addKeyed(f, 0, 40, 4, map[string]int{})
		store := lease.NewMemory()
		sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithInitialPosition(Horizon()))...)
		errs := processErrors(sub)
		log := newKeyLog(t)
		var mu sync.Mutex
		tries := map[string]int{}
		err := processUntil(t, sub, 40, log.count, func(ctx context.Context, m *Message) error {
			log.begin(m)
			mu.Lock()
			tries[string(m.Data())]++
			n := tries[string(m.Data())]
			mu.Unlock()
			if string(m.Data()) == "k1/2" && n == 1 {
				require.NoError(t, m.Nack(ctx))
				log.end(m, false)
				return nil
			}
			log.end(m, true)
			return nil
		}, WithRetryBackoff(time.Millisecond, 10*time.Millisecond))
		require.NoError(t, err)
		mu.Lock()
		require.Equal(t, 2, tries["k1/2"], "attempts of the nacked record")
		mu.Unlock()
		var nacked []*ProcessError
		for _, e := range errs() {
			nacked = append(nacked, e.ProcessError)
		}
		require.Len(t, nacked, 1)
		require.Equal(t, seqs[9], nacked[0].SequenceNumber)
		require.True(t, errors.Is(nacked[0], errHandlerNacked), "%v", nacked[0])
		require.NoError(t, sub.Close(context.Background()))
		require.Equal(t, seqs[len(seqs)-1], readLease(t, store, f.stream, f.shards[0].id).Checkpoint.Sequence)
	})
}
