package kinesub

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// TestLatestReadsWhatFollowsSubscribe: at the default position, records published right after
// Subscribe returns are all delivered, however late the shards' readers open: the tip is that
// of the Subscribe call, not of the moment a reader opens. Twenty subscriptions in a row, each
// new (no checkpoint), each followed at once by 100 records.
func TestLatestReadsWhatFollowsSubscribe(t *testing.T) {
	s := newStream(t, 2)
	for run := range 20 {
		sub := subscribeT(t, s, testOpts(lease.NewMemory())...)
		recs := make([]Record, 100)
		for i := range recs {
			k := fmt.Sprintf("run%d-key%d", run, i%7)
			recs[i] = Record{PartitionKey: k, Data: fmt.Appendf(nil, "run%d/%d", run, i)}
		}
		require.NoError(t, s.pub.PublishBatch(context.Background(), recs))
		got := map[string]bool{}
		deadline := time.After(time.Minute)
		for len(got) < len(recs) {
			select {
			case m := <-sub.Messages():
				require.NotNil(t, m, "Messages closed: %v", sub.Err())
				// Records of earlier runs, published a moment before this Subscribe, may come too
				// (the tip reaches back for clock skew): only this run's are counted.
				if d := string(m.Data()); strings.HasPrefix(d, fmt.Sprintf("run%d/", run)) {
					require.False(t, got[d], "%s delivered twice", d)
					got[d] = true
				}
				require.NoError(t, m.Ack(context.Background()))
			case <-deadline:
				t.Fatalf("run %d: %d of %d records delivered", run, len(got), len(recs))
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		require.NoError(t, sub.Close(ctx))
		cancel()
	}
}

// TestDefaultStartIsSubscribeTime: a shard without a checkpoint opens at the tip as of the
// Subscribe call (less the clock-skew margin), whenever its reader opens; WithInitialPosition
// replaces it, and a tip given there is pinned to the Subscribe call too.
func TestDefaultStartIsSubscribeTime(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		initial *Position
		want    Position
	}{
		{"default", nil, AtTimestamp(at.Add(-tipSkew))},
		{"latest", ptr(Latest()), AtTimestamp(at.Add(-tipSkew))},
		{"horizon", ptr(Horizon()), Horizon()},
		{"timestamp", ptr(AtTimestamp(at.Add(-time.Hour))), AtTimestamp(at.Add(-time.Hour))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Subscriber{subscribedAt: at}
			s.cfg.initialPos = tc.initial
			require.Equal(t, tc.want, s.initial())
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestStuckRecordIsVisible: one delivery left unsettled while every later one is acked holds
// the shard's checkpoint and, WithMaxInFlight deliveries later, stops the shard. Shards names
// it, with how long it has been unsettled, and the oldest-age metric reports it, so a lost Ack
// is found without a debugger.
func TestStuckRecordIsVisible(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("stuck", 1)
		mt := newMeters(t)
		sub := subscribeFake(t, f, fakeOpts(WithStartAt(Horizon()), WithMaxInFlight(10), WithBatchSize(5),
			WithMeterProvider(mt.provider))...)
		seqs := f.add(0, time.Now(), "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l")
		lost := <-sub.Messages() // never settled
		for range 9 {
			require.NoError(t, (<-sub.Messages()).Ack(context.Background()))
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		st := sub.Shards()[0]
		require.True(t, st.WaitingForAcks, "the shard stopped at its cap: %+v", st)
		require.Equal(t, seqs[0], st.OldestUnsettled, "the record holding the shard")
		require.Equal(t, lost.SequenceNumber(), st.OldestUnsettled)
		require.GreaterOrEqual(t, st.OldestUnsettledMillis, time.Minute.Milliseconds(), "how long it has been unsettled")
		require.Equal(t, 1, st.InFlight)
		require.GreaterOrEqual(t, mt.sum("kinesub.in_flight.oldest_age"), time.Minute.Seconds())

		// Settled, it is gone from both, and the shard reads on.
		require.NoError(t, lost.Ack(context.Background()))
		for range 2 {
			require.NoError(t, (<-sub.Messages()).Ack(context.Background()))
		}
		synctest.Wait()
		st = sub.Shards()[0]
		require.Empty(t, st.OldestUnsettled, "%+v", st)
		require.Zero(t, st.OldestUnsettledMillis)
		require.Zero(t, mt.sum("kinesub.in_flight.oldest_age"))
	})
}

// TestCloseSaysWhatItWaitsFor: Close waiting for unsettled deliveries logs, per shard, how many
// and until when; and when it gives up, that they will be delivered again.
func TestCloseSaysWhatItWaitsFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("closewait", 2)
		f.add(0, time.Now(), "a", "b")
		f.add(1, time.Now(), "c")
		logs := &logLines{}
		sub, err := subscribe(context.Background(), f, "closewait", fakeOpts(WithStartAt(Horizon()), WithLogger(slog.New(logs)))...)
		require.NoError(t, err)
		held := map[string]int{}
		for range 3 {
			m := <-sub.Messages()
			held[m.ShardID()]++
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		require.NoError(t, sub.Close(ctx))
		waits := logs.matching(slog.LevelInfo, "waiting for deliveries to be settled")
		require.Len(t, waits, 2, "one line per shard: %v", logs.all())
		for _, line := range waits {
			require.Contains(t, line, "why=subscription closing")
			require.Contains(t, line, "until=")
		}
		require.Len(t, logs.matching(slog.LevelInfo, "gave up waiting for deliveries to be settled"), 2, "%v", logs.all())
		var unsettled []string
		for _, line := range waits {
			unsettled = append(unsettled, line[strings.Index(line, "unsettled="):][:len("unsettled=1")])
		}
		require.ElementsMatch(t, []string{"unsettled=2", "unsettled=1"}, unsettled)
	})
}
