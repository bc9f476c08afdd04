package kinesub

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/kinesisiface"
	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/kinesistest"
	"github.com/gostream/kinesub/lease"
)

// Enhanced fan-out is tested against kinesistest (kinesalite has no SubscribeToShard), one
// server per test, with short subscription lifetimes and idle-event intervals.

// receiveOnce publishes rounds of n records over keys partition keys and receives each round,
// acking it: every record must arrive exactly once and in order. It returns the payloads seen.
func receiveOnce(t *testing.T, s *stream, sub *Subscriber, rounds, n, keys int) map[string]bool {
	t.Helper()
	var oc orderChecker
	seen := map[string]bool{}
	for range rounds {
		s.publish(n, keys)
		for _, m := range recv(t, sub, n, true) {
			require.False(t, seen[string(m.Data())], "%s delivered twice", m.Data())
			seen[string(m.Data())] = true
			oc.see(t, m)
		}
	}
	return seen
}

// newFanOutStream starts a kinesistest server with opts and creates a stream of shards on it.
func newFanOutStream(t *testing.T, shards int32, opts ...kinesistest.Option) (*stream, *kinesistest.Server) {
	t.Helper()
	srv := kinesistest.NewServer(append([]kinesistest.Option{kinesistest.WithIdleEventInterval(50 * time.Millisecond)}, opts...)...)
	t.Cleanup(srv.Close)
	c := srv.Client()
	name := testenv.Name(t)
	testenv.CreateStream(t, c, name, shards)
	pub, err := NewPublisher(c, name)
	require.NoError(t, err)
	return &stream{t: t, c: c, name: name, pub: pub, counts: map[string]int{}}, srv
}

func streamARN(t *testing.T, s *stream) string {
	t.Helper()
	out, err := s.c.DescribeStreamSummary(context.Background(), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(s.name)})
	require.NoError(t, err)
	return aws.ToString(out.StreamDescriptionSummary.StreamARN)
}

// withFanOutTimings shortens the dead-subscription deadline and the retry floor.
func withFanOutTimings(stall, retry time.Duration) Option {
	return func(c *config) {
		if c.fanOut != nil {
			c.fanOut.stallAfter, c.fanOut.inUseRetry, c.fanOut.describeWait = stall, retry, 10*time.Millisecond
		}
	}
}

// countingClient counts SubscribeToShard calls; one is made per shard, from base's options.
type countingClient struct {
	*kinesis.Client
	calls *atomic.Int64
}

func (c countingClient) SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, opts ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error) {
	c.calls.Add(1)
	return c.Client.SubscribeToShard(ctx, in, opts...)
}

func withSubscribeCounter(base *kinesis.Client, calls *atomic.Int64) Option {
	return func(c *config) {
		if c.fanOut != nil {
			c.fanOut.newClient = func() kinesisiface.Kinesis { return countingClient{kinesis.New(base.Options()), calls} }
		}
	}
}

// fanOutOpts are testOpts reading over enhanced fan-out as consumer "app".
func fanOutOpts(store lease.Store, extra ...Option) []Option {
	return testOpts(store, append([]Option{WithEnhancedFanOut("app"), withFanOutTimings(2*time.Second, 100*time.Millisecond)}, extra...)...)
}

// recvOrdered takes n messages, checking per-key order with oc, and acks them.
func recvOrdered(t *testing.T, sub *Subscriber, oc *orderChecker, n int) {
	t.Helper()
	for _, m := range recv(t, sub, n, true) {
		oc.see(t, m)
	}
}

// TestFanOutRoundTrip: Subscribe registers the consumer and waits until it is ACTIVE; every
// record published to both shards arrives once, in per-key order, pushed over SubscribeToShard.
func TestFanOutRoundTrip(t *testing.T) {
	s, _ := newFanOutStream(t, 2, kinesistest.WithStatusDelay(200*time.Millisecond))
	var calls atomic.Int64
	sub := subscribeT(t, s, fanOutOpts(lease.NewMemory(), WithInitialPosition(Horizon()), withSubscribeCounter(s.c, &calls))...)
	out, err := s.c.DescribeStreamConsumer(context.Background(), &kinesis.DescribeStreamConsumerInput{
		StreamARN: aws.String(streamARN(t, s)), ConsumerName: aws.String("app")})
	require.NoError(t, err)
	require.Equal(t, types.ConsumerStatusActive, out.ConsumerDescription.ConsumerStatus)
	var oc orderChecker
	s.publish(300, 7)
	recvOrdered(t, sub, &oc, 300)
	for k, n := range s.counts {
		require.Equal(t, n, oc.next[k], "key %s", k)
	}
	none(t, sub)
	require.GreaterOrEqual(t, calls.Load(), int64(2), "each shard read over SubscribeToShard")
}

// TestFanOutResumeAfterAcks: a second subscriber, after the first closed, starts right after
// the last acknowledged record: the acked ones are not delivered again, the rest all are.
func TestFanOutResumeAfterAcks(t *testing.T) {
	s, _ := newFanOutStream(t, 1)
	store := lease.NewMemory()
	s.publish(200, 1)
	first, err := Subscribe(context.Background(), s.c, s.name, fanOutOpts(store, WithInitialPosition(Horizon()))...)
	require.NoError(t, err)
	got := recv(t, first, 100, true)
	require.Equal(t, "key-0/99", string(got[99].Data()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, first.Close(ctx))

	s.publish(50, 1)
	second := subscribeT(t, s, fanOutOpts(store, WithInitialPosition(Horizon()))...)
	want := make([]string, 150)
	for i := range want {
		want[i] = "key-0/" + strconv.Itoa(100+i)
	}
	require.Equal(t, want, payloads(recv(t, second, 150, true)))
	none(t, second)
}

// TestFanOutLifetimeRollover: subscriptions that end every 150 ms while records arrive are
// renewed from their continuation: every record arrives exactly once, in order per key.
func TestFanOutLifetimeRollover(t *testing.T) {
	s, _ := newFanOutStream(t, 2, kinesistest.WithSubscriptionLifetime(150*time.Millisecond))
	var calls atomic.Int64
	sub := subscribeT(t, s, fanOutOpts(lease.NewMemory(), WithInitialPosition(Horizon()), withSubscribeCounter(s.c, &calls))...)
	var oc orderChecker
	seen := map[string]bool{}
	take := func(n int) {
		for _, m := range recv(t, sub, n, true) {
			require.False(t, seen[string(m.Data())], "%s delivered twice", m.Data())
			seen[string(m.Data())] = true
			oc.see(t, m)
		}
	}
	for range 10 {
		s.publish(80, 5)
		take(40)
		// A renewal falls between the two halves of each batch.
		before := calls.Load()
		eventually(t, 10*time.Second, "a renewed subscription", func() bool { return calls.Load() > before+1 })
		take(40)
	}
	require.Len(t, seen, 800)
	none(t, sub)
	require.Greater(t, calls.Load(), int64(4), "subscriptions were renewed")
}

// TestFanOutMillisBehindLatest: an event's MillisBehindLatest shows in Shards.
func TestFanOutMillisBehindLatest(t *testing.T) {
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	s, _ := newFanOutStream(t, 1, kinesistest.WithClock(clock))
	big := make([]byte, 600<<10) // an event carries at most 1 MiB: one of these at a time
	for range 3 {
		s.put("k", big)
	}
	offset.Store(int64(time.Hour))
	sub := subscribeT(t, s, fanOutOpts(lease.NewMemory(), WithInitialPosition(Horizon()), WithMaxInFlight(1))...)
	recv(t, sub, 1, false)
	eventually(t, 30*time.Second, "lag shown", func() bool {
		st := sub.Shards()
		return len(st) == 1 && st[0].MillisBehindLatest >= time.Hour.Milliseconds()
	})
}

// TestFanOutMetrics: the consumer calls and every SubscribeToShard are counted in
// kinesub.requests, and the events' records in the consumed count.
func TestFanOutMetrics(t *testing.T) {
	s, _ := newFanOutStream(t, 2, kinesistest.WithSubscriptionLifetime(100*time.Millisecond))
	mt := newMeters(t)
	sub := subscribeT(t, s, fanOutOpts(lease.NewMemory(), WithInitialPosition(Horizon()), WithMeterProvider(mt.provider))...)
	s.publish(20, 4)
	recv(t, sub, 20, true)
	ok := func(op string) float64 {
		return mt.sum("kinesub.requests", string(attrOperation), op, string(attrOutcome), outcomeOK)
	}
	require.EqualValues(t, 1, ok("RegisterStreamConsumer"))
	require.Positive(t, ok("DescribeStreamConsumer"))
	// Renewals every 100 ms: more than one subscription per shard.
	eventually(t, 30*time.Second, "renewals counted", func() bool { return ok("SubscribeToShard") > 2 })
	require.Zero(t, ok("GetRecords"), "fan-out does not poll")
	require.EqualValues(t, 20, mt.sum("messaging.client.consumed.messages"))
}
