package kinesub

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMetricsProcess: what a dashboard shows of Process: the handlers running, the attempts
// that failed, the records dead-lettered, and the wait of records behind their key.
func TestMetricsProcess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("metrics-process", 1)
		addKeyed(f, 0, 2000, 2, map[string]int{})
		mt := newMeters(t)
		sub := subscribeFake(t, f, fakeOpts(WithInitialPosition(Horizon()), WithMeterProvider(mt.provider))...)
		release := make(chan struct{})
		defer func() {
			select {
			case <-release:
			default:
				close(release) // a failed check must not leave the handler blocked
			}
		}()
		stop := startProcess(sub, func(ctx context.Context, m *Message) error {
			switch string(m.Data()) {
			case "k0/0":
				<-release // k0 waits behind it meanwhile
			case "k1/2":
				return errors.New("poison")
			}
			return nil
		}, WithMaxAttempts(2), WithRetryBackoff(time.Millisecond, time.Millisecond),
			WithDeadLetter(func(context.Context, *Message, error) error { return nil }))
		time.Sleep(time.Second)
		synctest.Wait() // k1 is done, k0/0 runs
		require.EqualValues(t, 1, mt.sum("kinesub.process.running"))
		shard := f.shards[0].id
		require.EqualValues(t, 2, mt.byShard("kinesub.process.failures")[shard])
		require.EqualValues(t, 1, mt.byShard("kinesub.records.dead_lettered")[shard])
		before := mt.sum("kinesub.process.key_wait.duration") // k1's, behind its earlier records
		time.Sleep(time.Second)
		close(release)
		synctest.Wait()
		require.EqualValues(t, 2000, mt.sum("kinesub.records.acked"))
		require.EqualValues(t, 0, mt.sum("kinesub.process.running"))
		pts, unit := mt.collect("kinesub.process.key_wait.duration")
		require.Equal(t, "s", unit)
		require.Len(t, pts, 1)
		require.Equal(t, shard, pts[0].attrs[string(attrShard)])
		require.Greater(t, pts[0].value, before, "a sample of k0's 999 waits (one in %d)", waitSample)
		require.NoError(t, stop())
		pts, _ = mt.collect("kinesub.process.running")
		require.Empty(t, pts, "no longer reported once Process returned")
	})
}
