package kinesub

import (
	"context"
	"errors"
	"strconv"
	"sync"
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

// subscribeCall is one SubscribeToShard call a recordingClient saw.
type subscribeCall struct {
	start types.ShardIteratorType
	err   error
}

func (c subscribeCall) String() string {
	if c.err != nil {
		return string(c.start) + ": " + c.err.Error()
	}
	return string(c.start)
}

// recordingClient records every SubscribeToShard call: where it started, and its error.
type recordingClient struct {
	*kinesis.Client
	mu    *sync.Mutex
	calls *[]subscribeCall
}

func (c recordingClient) SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, opts ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error) {
	out, err := c.Client.SubscribeToShard(ctx, in, opts...)
	c.mu.Lock()
	*c.calls = append(*c.calls, subscribeCall{in.StartingPosition.Type, err})
	c.mu.Unlock()
	return out, err
}

// subscribeLog is the SubscribeToShard calls of a subscriber made withSubscribeLog.
type subscribeLog struct {
	mu    sync.Mutex
	calls []subscribeCall
}

func (l *subscribeLog) snapshot() []subscribeCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]subscribeCall(nil), l.calls...)
}

// count returns how many calls failed with an error matching match (nil: every call).
func (l *subscribeLog) count(match func(error) bool) int {
	n := 0
	for _, c := range l.snapshot() {
		if match == nil || c.err != nil && match(c.err) {
			n++
		}
	}
	return n
}

func withSubscribeLog(base *kinesis.Client, l *subscribeLog) Option {
	return func(c *config) {
		if c.fanOut != nil {
			c.fanOut.newClient = func() kinesisiface.Kinesis { return recordingClient{kinesis.New(base.Options()), &l.mu, &l.calls} }
		}
	}
}

func isLimitExceeded(err error) bool {
	var le *types.LimitExceededException
	return errors.As(err, &le)
}

// TestFanOutLostLease: when another instance takes a shard's lease over, the loser's
// subscription to it ends and its HTTP/2 stream is released (the server serves none, and no
// event-stream reader is left), the loser delivers nothing of that shard after the loss, and
// the new owner reads on after the checkpoint.
func TestFanOutLostLease(t *testing.T) {
	s, srv := newFanOutStream(t, 1)
	// Readers of earlier tests' subscriptions end once those tests closed them.
	eventually(t, 30*time.Second, "no event-stream reader running", func() bool { return testenv.EventStreamReaders() == 0 })
	check := noLeaks(t)
	store := lease.NewMemory()
	a, err := Subscribe(context.Background(), s.c, s.name, fanOutOpts(store, WithOwner("a"), WithInitialPosition(Horizon()))...)
	require.NoError(t, err)
	s.publish(10, 1)
	got := recv(t, a, 10, false)
	for _, m := range got[:4] {
		require.NoError(t, m.Ack(context.Background()))
	}
	require.NoError(t, a.Commit(context.Background()))
	require.Equal(t, 1, srv.Subscriptions())
	require.Equal(t, 1, testenv.EventStreamReaders())

	shard := got[0].ShardID()
	stealAsPeer(t, store, s.name, shard, "b")
	lost := waitErr(t, a, ErrLeaseLost, 30*time.Second)
	var se *ShardError
	require.True(t, errors.As(lost, &se))
	require.Equal(t, shard, se.Shard)
	eventually(t, 30*time.Second, "the subscription's stream released", func() bool {
		return srv.Subscriptions() == 0 && testenv.EventStreamReaders() == 0
	})

	// "b" stops at once, holding the shard pending: its successor, or a (below its share),
	// takes it over and reads from the checkpoint; the other delivers nothing.
	storeRelease(t, store, s.name+"/"+ownerRowPrefix+"b", "b")
	s.publish(5, 1)
	b := subscribeT(t, s, fanOutOpts(store, WithOwner("b"), WithInitialPosition(Horizon()))...)
	want := make([]string, 11)
	for i := range want {
		want[i] = "key-0/" + strconv.Itoa(4+i)
	}
	var reader, other *Subscriber
	eventually(t, 30*time.Second, "the shard bound to a or b", func() bool {
		l := readLease(t, store, s.name, shard)
		switch {
		case pendingAt(l, time.Now()):
		case l.Owner == a.cfg.owner:
			reader, other = a, b
		case l.Owner == b.cfg.owner:
			reader, other = b, a
		}
		return reader != nil
	})
	require.Equal(t, want, payloads(recv(t, reader, 11, true)))
	none(t, other) // what one read after the loss, the other did not deliver
	none(t, reader)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, a.Close(ctx))
	require.NoError(t, b.Close(ctx))
	check()
}

// TestFanOutDroppedMidStream: subscriptions that break after a few events, by a reset HTTP/2
// stream or by an error event, are resubscribed after the last continuation: every record
// arrives once, in order, and each break is reported on Errors with its shard.
func TestFanOutDroppedMidStream(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kind  kinesistest.FaultKind
		match func(error) bool
	}{
		{"reset", kinesistest.ResetStream, func(err error) bool { return !isInUse(err) && !isLimitExceeded(err) }},
		{"error", kinesistest.StreamError, func(err error) bool {
			var failure *types.InternalFailureException
			return errors.As(err, &failure)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := &kinesistest.FaultPlan{Seed: 3, Faults: []kinesistest.Fault{
				{Op: "SubscribeToShard", Kind: tc.kind, Probability: 1, AfterEvents: 3},
			}}
			s, _ := newFanOutStream(t, 1, kinesistest.WithFaults(plan))
			var log subscribeLog
			sub := subscribeT(t, s, fanOutOpts(lease.NewMemory(), WithInitialPosition(Horizon()), withSubscribeLog(s.c, &log))...)
			errs := collectErrors(sub)
			shard := s.shardIDs()[0]
			// Each batch needs an event of its own, and a subscription carries 3 events at
			// most (idle ones included): batches keep arriving across several breaks.
			require.Len(t, receiveOnce(t, s, sub, 10, 10, 1), 100)
			none(t, sub)
			calls := log.snapshot()
			require.GreaterOrEqual(t, len(calls), 4, "subscriptions broken and renewed")
			require.Equal(t, types.ShardIteratorTypeTrimHorizon, calls[0].start)
			for i, c := range calls[1:] {
				require.Equal(t, types.ShardIteratorTypeAfterSequenceNumber, c.start, "call %d resubscribes after a continuation", i+2)
			}
			eventually(t, 30*time.Second, "the breaks reported with their shard", func() bool {
				return errs.count(func(err error) bool {
					var se *ShardError
					return errors.As(err, &se) && se.Op == OpSubscribeToShard && se.Shard == shard &&
						!errors.Is(err, errSubscriptionStalled) && tc.match(se.Err)
				}) > 0
			})
		})
	}
}

// TestFanOutSubscribeRate: no path makes a second SubscribeToShard call to a shard within a
// second of the previous one, which the server (WithLimits) would refuse with
// LimitExceededException: renewing after a subscription's lifetime, after a dropped stream,
// after seeks in quick succession, and retrying after ResourceInUse.
func TestFanOutSubscribeRate(t *testing.T) {
	// newRateStream starts a server enforcing the rate, with a stream of one shard.
	newRateStream := func(t *testing.T, opts ...kinesistest.Option) *stream {
		s, _ := newFanOutStream(t, 1, append([]kinesistest.Option{kinesistest.WithLimits(true)}, opts...)...)
		return s
	}
	// subscribeRate subscribes at the real floor of one call a second, with a stall deadline
	// no subtest reaches, and checks when the test ends that no call was over the rate.
	subscribeRate := func(t *testing.T, s *stream) (*Subscriber, *subscribeLog) {
		var log subscribeLog
		sub := subscribeT(t, s, testOpts(lease.NewMemory(), WithEnhancedFanOut("app"), WithInitialPosition(Horizon()),
			withFanOutTimings(30*time.Second, time.Second), withSubscribeLog(s.c, &log))...)
		t.Cleanup(func() {
			if n := log.count(isLimitExceeded); n > 0 {
				t.Errorf("%d calls over the rate: %v", n, log.snapshot())
			}
		})
		return sub, &log
	}
	// renewals publishes and reads batches until n calls were made.
	renewals := func(t *testing.T, s *stream, sub *Subscriber, log *subscribeLog, n int) {
		for log.count(nil) < n {
			s.publishPaced(5, 1) // the server enforces the service's limits
			recv(t, sub, 5, true)
		}
	}
	t.Run("lifetime", func(t *testing.T) {
		s := newRateStream(t, kinesistest.WithSubscriptionLifetime(100*time.Millisecond))
		sub, log := subscribeRate(t, s)
		renewals(t, s, sub, log, 4)
	})
	t.Run("dropped", func(t *testing.T) {
		s := newRateStream(t, kinesistest.WithFaults(&kinesistest.FaultPlan{Faults: []kinesistest.Fault{
			{Op: "SubscribeToShard", Kind: kinesistest.ResetStream, Probability: 1, AfterEvents: 1},
		}}))
		sub, log := subscribeRate(t, s)
		renewals(t, s, sub, log, 4)
	})
	t.Run("seek", func(t *testing.T) {
		s := newRateStream(t)
		sub, log := subscribeRate(t, s)
		s.publish(3, 1)
		recv(t, sub, 3, true)
		for range 3 {
			require.NoError(t, sub.Seeker().Seek(context.Background(), Horizon()))
		}
		require.Equal(t, []string{"key-0/0", "key-0/1", "key-0/2"}, payloads(recv(t, sub, 3, true)))
		require.GreaterOrEqual(t, log.count(nil), 4)
	})
	t.Run("in use", func(t *testing.T) {
		// Another holder's subscription, opened by hand a server-second before the subscriber
		// starts: the subscriber's calls are refused with ResourceInUse until the server lets
		// a new one take over, 5 s (on its clock) after the holder's.
		var offset atomic.Int64
		s := newRateStream(t, kinesistest.WithClock(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }))
		reg, err := s.c.RegisterStreamConsumer(context.Background(), &kinesis.RegisterStreamConsumerInput{
			StreamARN: aws.String(streamARN(t, s)), ConsumerName: aws.String("app")})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		out, err := kinesis.New(s.c.Options()).SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{ConsumerARN: reg.Consumer.ConsumerARN,
			ShardId: aws.String(s.shardIDs()[0]), StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeLatest}})
		require.NoError(t, err)
		defer out.GetStream().Close()
		offset.Add(int64(time.Second))
		s.publish(3, 1)
		sub, log := subscribeRate(t, s)
		require.Equal(t, []string{"key-0/0", "key-0/1", "key-0/2"}, payloads(recv(t, sub, 3, true)))
		require.GreaterOrEqual(t, log.count(isInUse), 2, "retried after ResourceInUse: %v", log.snapshot())
	})
}
