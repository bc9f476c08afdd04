package kinesub

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/kinesistest"
	"github.com/gostream/kinesub/lease"
)

// TestFanOutSplitAndMerge: over fan-out, a split and a merge while records flow keep every
// key's records in order, each once: ChildShards ends a parent as GetRecords' last page does.
func TestFanOutSplitAndMerge(t *testing.T) {
	t.Run("split", func(t *testing.T) {
		s, _ := newFanOutStream(t, 1)
		consumeAcrossReshard(t, s, func() { s.splitShard(s.shardIDs()[0]) }, WithEnhancedFanOut("app"), withFanOutTimings(2*time.Second, 100*time.Millisecond))
	})
	t.Run("merge", func(t *testing.T) {
		s, _ := newFanOutStream(t, 2)
		consumeAcrossReshard(t, s, func() {
			ids := s.shardIDs()
			_, err := s.c.MergeShards(context.Background(), &kinesis.MergeShardsInput{
				StreamName: aws.String(s.name), ShardToMerge: aws.String(ids[0]), AdjacentShardToMerge: aws.String(ids[1]),
			})
			require.NoError(t, err)
		}, WithEnhancedFanOut("app"), withFanOutTimings(2*time.Second, 100*time.Millisecond))
	})
}

// TestFanOutSeek: a seek ends the shard's subscription and subscribes at the new position;
// nothing from before the seek is delivered after it.
func TestFanOutSeek(t *testing.T) {
	s, _ := newFanOutStream(t, 1)
	sub := subscribeT(t, s, fanOutOpts(lease.NewMemory(), WithInitialPosition(Horizon()))...)
	s.publish(30, 1)
	got := recv(t, sub, 30, true)
	require.NoError(t, sub.Seeker().Seek(context.Background(), Horizon()))
	require.Equal(t, []string{"key-0/0", "key-0/1"}, payloads(recv(t, sub, 2, true)))
	require.NoError(t, sub.Seeker().Seek(context.Background(), AtSequence(got[20].ShardID(), got[20].SequenceNumber())))
	require.Equal(t, []string{"key-0/20", "key-0/21"}, payloads(recv(t, sub, 2, true)))
	require.NoError(t, sub.Seeker().Seek(context.Background(), Latest()))
	s.publish(1, 1)
	require.Equal(t, []string{"key-0/30"}, payloads(recv(t, sub, 1, true)))
	none(t, sub)
}

// TestFanOutNoLeakAfterClose: Close ends every subscription and releases its HTTP/2 stream;
// no goroutine of the subscriber or of the SDK's event-stream readers remains.
func TestFanOutNoLeakAfterClose(t *testing.T) {
	s, _ := newFanOutStream(t, 3)
	check := noLeaks(t)
	sub, err := Subscribe(context.Background(), s.c, s.name, fanOutOpts(lease.NewMemory(), WithInitialPosition(Horizon()))...)
	require.NoError(t, err)
	s.publish(60, 6)
	recv(t, sub, 60, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, sub.Close(ctx))
	check()
}

// TestFanOutStalledSubscription: a subscription that sends no event for the stall deadline
// (here the server's idle events come once a minute) is abandoned, reported, and renewed from
// its continuation, and records published afterwards arrive once.
func TestFanOutStalledSubscription(t *testing.T) {
	s, _ := newFanOutStream(t, 1, kinesistest.WithIdleEventInterval(time.Minute))
	var calls atomic.Int64
	sub := subscribeT(t, s, testOpts(lease.NewMemory(), WithEnhancedFanOut("app"), WithInitialPosition(Horizon()),
		withFanOutTimings(300*time.Millisecond, 100*time.Millisecond), withSubscribeCounter(s.c, &calls))...)
	s.publish(5, 1)
	recv(t, sub, 5, true)
	err := waitErr(t, sub, errSubscriptionStalled, 30*time.Second)
	var se *ShardError
	require.True(t, errors.As(err, &se))
	require.Equal(t, OpSubscribeToShard, se.Op)
	eventually(t, 30*time.Second, "a renewed subscription", func() bool { return calls.Load() >= 2 })
	s.publish(5, 1)
	require.Equal(t, []string{"key-0/5", "key-0/6", "key-0/7", "key-0/8", "key-0/9"}, payloads(recv(t, sub, 5, true)))
}

// TestFanOutBackpressureIsNotAStall: a reader held at WithMaxInFlight for several stall
// deadlines is not waiting for events: its subscription is not abandoned.
func TestFanOutBackpressureIsNotAStall(t *testing.T) {
	s, _ := newFanOutStream(t, 1, kinesistest.WithIdleEventInterval(time.Minute))
	var calls atomic.Int64
	sub := subscribeT(t, s, testOpts(lease.NewMemory(), WithEnhancedFanOut("app"), WithInitialPosition(Horizon()), WithMaxInFlight(10),
		withFanOutTimings(300*time.Millisecond, 100*time.Millisecond), withSubscribeCounter(s.c, &calls))...)
	s.publish(10, 1)
	held := recv(t, sub, 10, false)
	eventually(t, 30*time.Second, "the reader parked at its cap", func() bool { return parkedAtCap(sub, 1, 10) })
	// Several stall deadlines pass while the reader waits for acks.
	park := time.After(time.Second)
	for done := false; !done; {
		select {
		case err := <-sub.Errors():
			require.NotErrorIs(t, err, errSubscriptionStalled)
		case <-park:
			done = true
		}
	}
	require.Equal(t, int64(1), calls.Load(), "the subscription held while parked")
	s.publish(5, 1)
	for _, m := range held {
		require.NoError(t, m.Ack(context.Background()))
	}
	require.Equal(t, "key-0/10", string(recv(t, sub, 5, true)[0].Data()))
	require.Equal(t, int64(1), calls.Load(), "the parked subscription delivered the new records")
}

// TestFanOutInUseRetriesEachSecond: a subscription another holder still has (here one opened
// by hand, as a dead owner would leave it) is ResourceInUse until the service lets a new one
// take over; the reader retries at the one-per-second floor, not with a growing backoff, and
// reads as soon as the takeover is allowed.
func TestFanOutInUseRetriesEachSecond(t *testing.T) {
	s, _ := newFanOutStream(t, 1)
	store := lease.NewMemory()
	// Registers the consumer, then is closed: its consumer ARN serves the hand-made subscription.
	first, err := Subscribe(context.Background(), s.c, s.name, fanOutOpts(store)...)
	require.NoError(t, err)
	arn := first.cfg.fanOut.arn
	require.NoError(t, first.Close(context.Background()))
	other := kinesis.New(s.c.Options())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, err := other.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{ConsumerARN: aws.String(arn),
		ShardId: aws.String(s.shardIDs()[0]), StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeLatest}})
	require.NoError(t, err)
	defer out.GetStream().Close()
	held := time.Now()

	var calls atomic.Int64
	sub := subscribeT(t, s, testOpts(lease.NewMemory(), WithEnhancedFanOut("app"), WithInitialPosition(Horizon()),
		withFanOutTimings(30*time.Second, time.Second), withSubscribeCounter(s.c, &calls))...)
	s.publish(3, 1)
	got := recv(t, sub, 3, true)
	took := time.Since(held)
	require.Equal(t, "key-0/0", string(got[0].Data()))
	// The service's takeover window is 5 s; a retry each second reads within about a second
	// of it, where a doubling backoff would have waited up to 5 s more.
	require.Less(t, took, 7*time.Second, "read %v after the other subscription started", took)
	reported := 0
	for drained := false; !drained; {
		select {
		case err := <-sub.Errors():
			var inUse *types.ResourceInUseException
			var se *ShardError
			if errors.As(err, &inUse) && errors.As(err, &se) && se.Op == OpSubscribeToShard && se.Shard == s.shardIDs()[0] {
				reported++
			}
		default:
			drained = true
		}
	}
	require.Positive(t, reported, "ResourceInUse reported on Errors with its shard")
	n := calls.Load()
	require.GreaterOrEqual(t, n, int64(4), fmt.Sprintf("%d calls", n))
	require.LessOrEqual(t, n, int64(8), fmt.Sprintf("%d calls", n))
}

// TestFanOutHandoverOnClose: two instances share the consumer and split the shards through
// one lease table; when one closes, the other reads its shards within 2 s, and nothing the
// first acknowledged is delivered again.
func TestFanOutHandoverOnClose(t *testing.T) {
	s, _ := newFanOutStream(t, 4)
	store := lease.NewMemory()
	opts := func(owner string, extra ...Option) []Option {
		return append(fanOutOpts(store, WithOwner(owner), WithLeaseTTL(10*time.Second), WithInitialPosition(Horizon())), extra...)
	}
	a, err := Subscribe(context.Background(), s.c, s.name, opts("a")...)
	require.NoError(t, err)
	defer a.Close(context.Background())
	eventually(t, 30*time.Second, "a holds all 4", func() bool { return fmt.Sprint(split(t, store, s.name)) == "[4]" })
	b := subscribeT(t, s, opts("b", WithBalanceInterval(300*time.Millisecond))...)
	eventually(t, 30*time.Second, "2/2", func() bool { return fmt.Sprint(split(t, store, s.name)) == "[2 2]" })
	eventually(t, 30*time.Second, "each reads 2 shards", func() bool { return reading(a) == 2 && reading(b) == 2 })

	s.publish(40, 8)
	var oc orderChecker
	deadline := time.After(time.Minute)
	for got := 0; got < 40; got++ {
		var m *Message
		select {
		case m = <-a.Messages():
		case m = <-b.Messages():
		case <-deadline:
			t.Fatalf("received %d of 40", got)
		}
		oc.see(t, m)
		require.NoError(t, m.Ack(context.Background()))
	}
	start := time.Now()
	require.NoError(t, a.Close(context.Background()))
	upTo(t, s, b, nil) // a probe from every shard, and nothing a acknowledged
	took := time.Since(start)
	t.Logf("handover after Close took %v", took)
	require.Less(t, took, 2*time.Second)
}

// TestFanOutRegistration: instances share one consumer, which outlives them; a consumer that
// does not become ACTIVE in time fails Subscribe with ErrFanOutConsumer, naming it.
func TestFanOutRegistration(t *testing.T) {
	t.Run("shared and kept", func(t *testing.T) {
		s, _ := newFanOutStream(t, 1, kinesistest.WithStatusDelay(100*time.Millisecond))
		store := lease.NewMemory()
		var subs []*Subscriber
		for _, owner := range []string{"a", "b"} {
			sub, err := Subscribe(context.Background(), s.c, s.name, fanOutOpts(store, WithOwner(owner))...)
			require.NoError(t, err)
			subs = append(subs, sub)
		}
		require.Equal(t, subs[0].cfg.fanOut.arn, subs[1].cfg.fanOut.arn)
		for _, sub := range subs {
			require.NoError(t, sub.Close(context.Background()))
		}
		out, err := s.c.ListStreamConsumers(context.Background(), &kinesis.ListStreamConsumersInput{StreamARN: aws.String(streamARN(t, s))})
		require.NoError(t, err)
		require.Len(t, out.Consumers, 1)
		require.Equal(t, "app", aws.ToString(out.Consumers[0].ConsumerName))
		require.Equal(t, types.ConsumerStatusActive, out.Consumers[0].ConsumerStatus)
	})
	t.Run("not active in time", func(t *testing.T) {
		// The server's clock stands still once the stream is active: the consumer stays CREATING.
		var frozen atomic.Pointer[time.Time]
		clock := func() time.Time {
			if at := frozen.Load(); at != nil {
				return *at
			}
			return time.Now()
		}
		s, _ := newFanOutStream(t, 1, kinesistest.WithStatusDelay(50*time.Millisecond), kinesistest.WithClock(clock))
		now := time.Now()
		frozen.Store(&now)
		_, err := Subscribe(context.Background(), s.c, s.name, fanOutOpts(lease.NewMemory(), func(c *config) {
			c.fanOut.activeWithin = 2 * time.Second // a bound: the consumer stays CREATING
		})...)
		require.ErrorIs(t, err, ErrFanOutConsumer)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Contains(t, err.Error(), `"app"`)
		require.Contains(t, err.Error(), "CREATING")
	})
}

// TestFanOutFaults: subscriptions refused with throttles and 500s, or dropped before their
// first event, are retried from where they stood: every record arrives exactly once, in order.
func TestFanOutFaults(t *testing.T) {
	plan := &kinesistest.FaultPlan{Seed: 7, Faults: []kinesistest.Fault{
		{Op: "SubscribeToShard", Kind: kinesistest.DropConnection, Probability: 0.2},
		{Op: "SubscribeToShard", Kind: kinesistest.InternalFailure, Probability: 0.2},
		{Op: "SubscribeToShard", Kind: kinesistest.Throttle, Probability: 0.2},
	}}
	s, _ := newFanOutStream(t, 2, kinesistest.WithFaults(plan), kinesistest.WithSubscriptionLifetime(100*time.Millisecond))
	var calls atomic.Int64
	sub := subscribeT(t, s, fanOutOpts(lease.NewMemory(), WithInitialPosition(Horizon()), withSubscribeCounter(s.c, &calls))...)
	receiveOnce(t, s, sub, 5, 60, 6)
	none(t, sub)
	t.Logf("%d SubscribeToShard calls", calls.Load())
}

// TestFanOutConsumerDeregistered: a consumer deregistered under a running subscription ends
// it, as a deleted stream does: Messages closes and Err names the consumer.
func TestFanOutConsumerDeregistered(t *testing.T) {
	s, _ := newFanOutStream(t, 1)
	sub := subscribeT(t, s, fanOutOpts(lease.NewMemory(), WithInitialPosition(Horizon()))...)
	s.publish(3, 1)
	recv(t, sub, 3, true)
	_, err := s.c.DeregisterStreamConsumer(context.Background(), &kinesis.DeregisterStreamConsumerInput{ConsumerARN: aws.String(sub.cfg.fanOut.arn)})
	require.NoError(t, err)
	deadline := time.After(time.Minute)
	for open := true; open; {
		select {
		case m, ok := <-sub.Messages():
			if ok {
				t.Fatalf("delivered %q after deregistration", m.Data())
			}
			open = false
		case <-deadline:
			t.Fatal("Messages still open a minute after the consumer was deregistered")
		}
	}
	require.ErrorIs(t, sub.Err(), ErrStreamNotFound)
	require.Contains(t, sub.Err().Error(), sub.cfg.fanOut.arn)
}
