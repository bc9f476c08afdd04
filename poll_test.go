package kinesub

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/kinesisiface"
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

// TestQuietShardPolledAtIdleInterval: a shard that stays empty at its tip is polled every
// WithIdlePollInterval after quietAfter empty pages, Shards says so, and the first record ends
// the quiet spell: it arrives within the idle interval and the shard is polled at the poll
// interval again.
func TestQuietShardPolledAtIdleInterval(t *testing.T) {
	const poll = 300 * time.Millisecond // above the shard's 5 calls a second
	for _, tc := range []struct {
		name string
		opts []Option
		idle time.Duration // the gap between calls once quiet
	}{
		{"default", nil, 2 * poll},
		{"set", []Option{WithIdlePollInterval(5 * poll)}, 5 * poll},
		{"off", []Option{WithIdlePollInterval(poll)}, poll},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeStream("quiet", 1)
				var mu sync.Mutex
				var calls []time.Time
				f.setHooks(func(context.Context, string) error {
					mu.Lock()
					defer mu.Unlock()
					calls = append(calls, time.Now())
					return nil
				}, nil)
				gaps := func(from int) []time.Duration {
					mu.Lock()
					defer mu.Unlock()
					var out []time.Duration
					for i := max(from, 1); i < len(calls); i++ {
						out = append(out, calls[i].Sub(calls[i-1]))
					}
					return out
				}
				sub := subscribeFake(t, f, fakeOpts(append([]Option{WithPollInterval(poll)}, tc.opts...)...)...)
				time.Sleep(time.Duration(quietAfter+2)*poll + 4*tc.idle)
				synctest.Wait()

				all := gaps(0)
				require.Greater(t, len(all), quietAfter+2)
				for i, g := range all[:quietAfter-1] {
					require.Equal(t, poll, g, "gap %d, before the shard is quiet", i)
				}
				for i, g := range all[quietAfter:] {
					require.Equal(t, tc.idle, g, "gap %d, once the shard is quiet", quietAfter+i)
				}
				st := sub.Shards()
				require.Len(t, st, 1)
				require.Equal(t, tc.idle > poll, st[0].Quiet, "Shards shows a quiet shard")

				// The first record ends the spell: delivered within the idle interval, then
				// the shard is polled at the poll interval again.
				put := time.Now()
				f.add(0, put, "first")
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				m := <-sub.Messages()
				require.NotNil(t, m)
				require.Equal(t, "first", string(m.Data()))
				require.LessOrEqual(t, time.Since(put), tc.idle)
				require.NoError(t, m.Ack(ctx))
				mu.Lock()
				after := len(calls)
				mu.Unlock()
				time.Sleep(3 * poll)
				synctest.Wait()
				// The page with the record is followed at once (within the shard's call
				// rate), then by empty pages at the poll interval.
				next := gaps(after)
				require.Greater(t, len(next), 1)
				for i, g := range next[1:] {
					require.Equal(t, poll, g, "gap %d after the record", i+1)
				}
				require.False(t, sub.Shards()[0].Quiet)
			})
		})
	}
}

// behindClient answers every GetRecords with an empty page millisBehind behind the tip.
type behindClient struct {
	kinesisiface.Kinesis
	millisBehind int64
}

func (c *behindClient) GetRecords(context.Context, *kinesis.GetRecordsInput, ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	return &kinesis.GetRecordsOutput{NextShardIterator: aws.String("next"), MillisBehindLatest: aws.Int64(c.millisBehind)}, nil
}

// TestQuietOnlyAtTip: empty pages behind the tip (a shard whose records were trimmed, or a
// gap in a busy shard) do not make a shard quiet: only empty pages at its tip do, and a page
// behind it ends a quiet spell, as does reopening the shard.
func TestQuietOnlyAtTip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &behindClient{millisBehind: 5000}
		p := newPoller(c, nil, streamRef{name: "s"}, "shardId-000000000000", time.Second, 200*time.Millisecond, time.Second)
		ctx := context.Background()
		next := func() page {
			pg, err := p.next(ctx, 10)
			require.NoError(t, err)
			return pg
		}
		for range 2 * quietAfter {
			pg := next()
			require.False(t, pg.quiet)
			require.Equal(t, 200*time.Millisecond, pg.pause)
		}
		c.millisBehind = 0
		for range quietAfter - 1 {
			require.False(t, next().quiet)
		}
		pg := next()
		require.True(t, pg.quiet)
		require.Equal(t, time.Second, pg.pause)
		c.millisBehind = 1
		require.False(t, next().quiet, "a page behind the tip ends the quiet spell")
		c.millisBehind = 0
		for range quietAfter {
			next()
		}
		require.True(t, next().quiet)
		require.NoError(t, p.open(ctx, Latest()))
		require.False(t, next().quiet, "reopening the shard ends the quiet spell")
	})
}

func (c *behindClient) GetShardIterator(context.Context, *kinesis.GetShardIteratorInput, ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	return &kinesis.GetShardIteratorOutput{ShardIterator: aws.String("it")}, nil
}
