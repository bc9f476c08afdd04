package direct

import (
	"context"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	smithyendpoints "github.com/aws/smithy-go/endpoints"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/kinesistest"
)

// TestEndpointCacheAnswersAsTheSDK: for the parameters a reader's calls bind (regions of every
// partition, stream ARNs or names, FIPS and dual-stack, a custom endpoint, data and control
// operations), the cache answers exactly what the SDK's default resolver answers, the first
// time and from the cache, errors included (never cached).
func TestEndpointCacheAnswersAsTheSDK(t *testing.T) {
	ctx := context.Background()
	def := kinesis.NewDefaultEndpointResolverV2()
	c := &endpointCache{next: def, m: map[endpointKey]smithyendpoints.Endpoint{}}
	var cases []kinesis.EndpointParameters
	for _, region := range []string{"us-east-1", "eu-west-1", "cn-north-1", "us-gov-west-1", "us-iso-east-1"} {
		for _, arn := range []*string{nil, aws.String("arn:aws:kinesis:" + region + ":123456789012:stream/orders"), aws.String("arn:aws-cn:kinesis:cn-north-1:123456789012:stream/orders")} {
			for _, fips := range []bool{false, true} {
				for _, dual := range []bool{false, true} {
					for _, op := range []string{"data", "control"} {
						cases = append(cases, kinesis.EndpointParameters{Region: aws.String(region), StreamARN: arn,
							UseFIPS: aws.Bool(fips), UseDualStack: aws.Bool(dual), OperationType: aws.String(op)})
					}
				}
			}
		}
	}
	cases = append(cases,
		kinesis.EndpointParameters{Region: aws.String("us-east-1"), Endpoint: aws.String("http://127.0.0.1:4567"), UseFIPS: aws.Bool(false), UseDualStack: aws.Bool(false)},
		kinesis.EndpointParameters{Region: aws.String("us-east-1"), Endpoint: aws.String("http://127.0.0.1:4567"), UseFIPS: aws.Bool(true), UseDualStack: aws.Bool(false)},
		kinesis.EndpointParameters{Region: aws.String("us-east-1"), ConsumerARN: aws.String("arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/c:1"), UseFIPS: aws.Bool(false), UseDualStack: aws.Bool(false)},
		kinesis.EndpointParameters{},
	)
	errs := 0
	for _, p := range cases {
		want, wantErr := def.ResolveEndpoint(ctx, p)
		for range 2 {
			got, err := c.ResolveEndpoint(ctx, p)
			if wantErr != nil {
				require.EqualError(t, err, wantErr.Error())
				continue
			}
			require.NoError(t, err)
			require.Equal(t, want, got, "%+v", keyOf(p))
		}
		if wantErr != nil {
			errs++
		}
	}
	require.Positive(t, errs, "the cases include parameters the rules refuse")
	require.Len(t, c.m, len(cases)-errs, "each answer is kept once, and no error")
}

// countingResolver is an application's own endpoint resolver.
type countingResolver struct {
	calls atomic.Int64
	next  kinesis.EndpointResolverV2
}

func (r *countingResolver) ResolveEndpoint(ctx context.Context, p kinesis.EndpointParameters) (smithyendpoints.Endpoint, error) {
	r.calls.Add(1)
	return r.next.ResolveEndpoint(ctx, p)
}

// TestCachedEndpoints: calls made with CachedEndpoints resolve their endpoint from the cache
// when the client has the SDK's default resolver, and through the application's own resolver,
// every call, when it has one.
func TestCachedEndpoints(t *testing.T) {
	srv := kinesistest.NewServer()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, srv.CreateStream(ctx, "endpoints", 1))
	call := func(c *kinesis.Client) {
		for range 3 {
			_, err := c.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String("endpoints"),
				ShardId: aws.String("shardId-000000000000"), ShardIteratorType: types.ShardIteratorTypeTrimHorizon}, noRetry, CachedEndpoints)
			require.NoError(t, err)
		}
	}

	own := &countingResolver{next: kinesis.NewDefaultEndpointResolverV2()}
	call(kinesis.NewFromConfig(srv.Config(), func(o *kinesis.Options) { o.EndpointResolverV2 = own }))
	require.EqualValues(t, 3, own.calls.Load(), "an application's resolver is asked at every call")

	call(srv.Client())
	sharedEndpoints.mu.RLock()
	defer sharedEndpoints.mu.RUnlock()
	found := false
	for k := range sharedEndpoints.m {
		found = found || k.endpoint == srv.URL
	}
	require.True(t, found, "the default resolver's answer for %s is cached", srv.URL)
}

// TestEndpointKeyCoversEveryParameter: the cache's key holds every field of the SDK's endpoint
// parameters, so that two calls whose endpoints may differ never share one. When the SDK adds
// a field, this fails until keyOf takes it in.
func TestEndpointKeyCoversEveryParameter(t *testing.T) {
	require.Equal(t, 12, reflect.TypeOf(kinesis.EndpointParameters{}).NumField(), "keyOf must cover every field of kinesis.EndpointParameters")
	base := kinesis.EndpointParameters{}
	seen := map[endpointKey]string{keyOf(base): "none"}
	s := aws.String("x")
	for name, p := range map[string]kinesis.EndpointParameters{
		"Region": {Region: s}, "UseDualStack": {UseDualStack: aws.Bool(true)}, "UseFIPS": {UseFIPS: aws.Bool(true)},
		"Endpoint": {Endpoint: s}, "OperationType": {OperationType: s}, "StreamId": {StreamId: s},
		"StreamARN": {StreamARN: s}, "ConsumerARN": {ConsumerARN: s}, "ResourceARN": {ResourceARN: s},
		"ChannelARN": {ChannelARN: s}, "AccountId": {AccountId: s}, "AccountIdEndpointMode": {AccountIdEndpointMode: s},
		"UseFIPS false": {UseFIPS: aws.Bool(false)}, "UseDualStack false": {UseDualStack: aws.Bool(false)},
		"empty Region": {Region: aws.String("")}, "empty Endpoint": {Endpoint: aws.String("")},
		"empty OperationType": {OperationType: aws.String("")}, "empty StreamId": {StreamId: aws.String("")},
		"empty StreamARN": {StreamARN: aws.String("")}, "empty ConsumerARN": {ConsumerARN: aws.String("")},
		"empty ResourceARN": {ResourceARN: aws.String("")}, "empty ChannelARN": {ChannelARN: aws.String("")},
		"empty AccountId": {AccountId: aws.String("")}, "empty AccountIdEndpointMode": {AccountIdEndpointMode: aws.String("")},
	} {
		k := keyOf(p)
		require.NotContains(t, seen, k, "%s has the key of %s", name, seen[k])
		seen[k] = name
	}
}
