package kinesub

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/kinesisiface"
	"github.com/gostream/kinesub/kinesistest"
	"github.com/gostream/kinesub/lease"
)

// TestFanOutSeekPause: seeks under enhanced fan-out report nothing on Errors (the service
// refusing the resubscription the seek itself caused is not a failure), and the pause each
// seek causes (from Seek's call to the first record of the replay) is measured: back to back,
// within the service's one SubscribeToShard call per second after the previous subscription,
// and after a live spell of two seconds, when that floor has passed. The server enforces the
// service's limits, and the reader keeps to the real floor of one call a second.
func TestFanOutSeekPause(t *testing.T) {
	s, _ := newFanOutStream(t, 1, kinesistest.WithLimits(true))
	var log subscribeLog
	sub, err := Subscribe(context.Background(), s.c, s.name, testOpts(lease.NewMemory(), WithEnhancedFanOut("app"),
		WithInitialPosition(Horizon()), withFanOutTimings(30*time.Second, time.Second), withSubscribeLog(s.c, &log))...)
	require.NoError(t, err)
	s.publish(5, 1)
	recv(t, sub, 5, true)
	const seeks = 3
	pause := func() time.Duration {
		start := time.Now()
		require.NoError(t, sub.Seeker().Seek(context.Background(), Horizon()))
		require.Equal(t, []string{"key-0/0", "key-0/1", "key-0/2", "key-0/3", "key-0/4"}, payloads(recv(t, sub, 5, true)))
		return time.Since(start)
	}
	var early, late []time.Duration
	for range seeks {
		early = append(early, pause())
	}
	for range seeks {
		// A live subscription for two seconds: the scenario, not a wait for a condition.
		<-time.After(2 * time.Second)
		late = append(late, pause())
	}
	slices.Sort(early)
	slices.Sort(late)
	t.Logf("pause after a seek, back to back: %v; after 2 s live: %v (sorted)", early, late)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, sub.Close(ctx))
	var reported []error
	for err := range sub.Errors() {
		reported = append(reported, err)
	}
	require.Empty(t, reported, "seeks reported on Errors; SubscribeToShard calls: %v", log.snapshot())
	require.Zero(t, log.count(isLimitExceeded), "calls over the rate: %v", log.snapshot())
	// Back to back, the floor sets the pause; after it passed, a seek resubscribes at once.
	// The bounds hold on a busy machine; the figures logged above are the measurement.
	require.Less(t, early[seeks-1], 3*time.Second)
	require.Less(t, late[seeks/2], time.Second, "seeks after the floor waited: %v", late)
}

// holdingService stands in front of kinesistest as the service's documentation describes it:
// a SubscribeToShard call within hold of the last accepted one is refused with
// ResourceInUseException, even when the client ended that subscription.
type holdingService struct {
	hold     time.Duration
	mu       sync.Mutex
	accepted time.Time
	refused  atomic.Int64
}

type holdingClient struct {
	*kinesis.Client
	svc *holdingService
}

func (c holdingClient) SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, opts ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error) {
	c.svc.mu.Lock()
	held := !c.svc.accepted.IsZero() && time.Since(c.svc.accepted) < c.svc.hold
	c.svc.mu.Unlock()
	if held {
		c.svc.refused.Add(1)
		return nil, &types.ResourceInUseException{Message: aws.String("Another active subscription exists for this consumer and shard.")}
	}
	out, err := c.Client.SubscribeToShard(ctx, in, opts...)
	if err == nil {
		c.svc.mu.Lock()
		c.svc.accepted = time.Now()
		c.svc.mu.Unlock()
	}
	return out, err
}

// TestFanOutSeekInUseIsOwn: where the service holds a subscription for its takeover window
// after accepting it, even once the client ended it, the seek's resubscription is refused as in
// use until then. That subscription is the reader's own: nothing is reported on Errors, the
// reader retries at its floor, and the replay arrives once the window has passed. (The window
// and the floor are shortened here: 600 ms and 100 ms.)
func TestFanOutSeekInUseIsOwn(t *testing.T) {
	s, _ := newFanOutStream(t, 1)
	svc := &holdingService{hold: 500 * time.Millisecond}
	sub, err := Subscribe(context.Background(), s.c, s.name, testOpts(lease.NewMemory(), WithEnhancedFanOut("app"),
		WithInitialPosition(Horizon()), withFanOutTimings(30*time.Second, 100*time.Millisecond), func(c *config) {
			c.fanOut.takeover = 600 * time.Millisecond
			c.fanOut.newClient = func() kinesisiface.Kinesis { return holdingClient{kinesis.New(s.c.Options()), svc} }
		})...)
	require.NoError(t, err)
	s.publish(3, 1)
	recv(t, sub, 3, true)
	for range 3 {
		require.NoError(t, sub.Seeker().Seek(context.Background(), Horizon()))
		require.Equal(t, []string{"key-0/0", "key-0/1", "key-0/2"}, payloads(recv(t, sub, 3, true)))
	}
	require.Positive(t, svc.refused.Load(), "no resubscription was refused: the test shows nothing")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, sub.Close(ctx))
	for err := range sub.Errors() {
		var inUse *types.ResourceInUseException
		require.False(t, errors.As(err, &inUse), "the reader's own subscription reported: %v", err)
		t.Errorf("reported: %v", err)
	}
}
