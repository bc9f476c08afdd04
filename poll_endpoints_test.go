package kinesub

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	smithyendpoints "github.com/aws/smithy-go/endpoints"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/kinesistest"
)

// countingResolver is an application's own endpoint resolver.
type countingResolver struct {
	calls atomic.Int64
	next  kinesis.EndpointResolverV2
}

func (r *countingResolver) ResolveEndpoint(ctx context.Context, p kinesis.EndpointParameters) (smithyendpoints.Endpoint, error) {
	r.calls.Add(1)
	return r.next.ResolveEndpoint(ctx, p)
}

// TestPollerEndpoints: a poller's calls through a real client resolve their endpoint through the
// application's own resolver, every call, when it has one (direct.CachedEndpoints leaves it
// alone), and read as well with the SDK's default one. (The direct path, WithDirectGetRecords,
// refuses a client with a resolver of its own.)
func TestPollerEndpoints(t *testing.T) {
	srv := kinesistest.NewServer()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, srv.CreateStream(ctx, "endpoints", 1))
	poll := func(c *kinesis.Client) {
		p := newPoller(c, nil, streamRef{name: "endpoints"}, "shardId-000000000000", 10*time.Second, time.Millisecond, time.Millisecond)
		require.NoError(t, p.open(ctx, Horizon()))
		for range 3 {
			_, err := p.next(ctx, 10)
			require.NoError(t, err)
		}
	}

	own := &countingResolver{next: kinesis.NewDefaultEndpointResolverV2()}
	poll(kinesis.NewFromConfig(srv.Config(), func(o *kinesis.Options) { o.EndpointResolverV2 = own }))
	require.EqualValues(t, 4, own.calls.Load(), "an application's resolver is asked at every call")

	poll(srv.Client()) // the default resolver's answers come from the shared cache (internal/direct)
}
