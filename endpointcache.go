package kinesub

import (
	"context"
	"reflect"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	smithyendpoints "github.com/aws/smithy-go/endpoints"
)

// The SDK's default endpoint resolver evaluates the service's endpoint rules (the partition
// table, the stream ARN's account and region) on every call: about a sixth of the CPU of an
// empty GetRecords call, asked again by each reader at every poll with the same parameters.
// The default resolver is a pure function of those parameters, so a reader's calls reuse what
// it answered (cachedEndpoints). A resolver of the application's own (kinesis.Options'
// EndpointResolverV2 set to anything else) is called every time: it need not be pure.

// defaultResolverType is the type of the SDK's default endpoint resolver.
var defaultResolverType = reflect.TypeOf(kinesis.NewDefaultEndpointResolverV2())

// maxCachedEndpoints bounds the cache: one entry per stream, region and endpoint setting in
// use, so a process reaches it only with that many streams; past it, calls resolve as before.
const maxCachedEndpoints = 1024

// endpointKey is an EndpointParameters by value.
type endpointKey struct {
	region, endpoint, operation, streamID, streamARN, consumerARN, resourceARN string
	dualStack, fips                                                            string // "", "true", "false"
}

func keyOf(p kinesis.EndpointParameters) endpointKey {
	b := func(v *bool) string {
		if v == nil {
			return ""
		}
		if *v {
			return "true"
		}
		return "false"
	}
	return endpointKey{
		region: aws.ToString(p.Region), endpoint: aws.ToString(p.Endpoint), operation: aws.ToString(p.OperationType),
		streamID: aws.ToString(p.StreamId), streamARN: aws.ToString(p.StreamARN), consumerARN: aws.ToString(p.ConsumerARN),
		resourceARN: aws.ToString(p.ResourceARN), dualStack: b(p.UseDualStack), fips: b(p.UseFIPS),
	}
}

// endpointCache answers with the default resolver's endpoints, each computed once.
type endpointCache struct {
	next kinesis.EndpointResolverV2
	mu   sync.RWMutex
	m    map[endpointKey]smithyendpoints.Endpoint
}

var sharedEndpoints = &endpointCache{next: kinesis.NewDefaultEndpointResolverV2(), m: map[endpointKey]smithyendpoints.Endpoint{}}

func (c *endpointCache) ResolveEndpoint(ctx context.Context, p kinesis.EndpointParameters) (smithyendpoints.Endpoint, error) {
	k := keyOf(p)
	c.mu.RLock()
	e, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return e, nil
	}
	e, err := c.next.ResolveEndpoint(ctx, p)
	if err != nil {
		return e, err
	}
	c.mu.Lock()
	if len(c.m) < maxCachedEndpoints {
		c.m[k] = e
	}
	c.mu.Unlock()
	return e, nil
}

// cachedEndpoints is a per-call option: it swaps the SDK's default endpoint resolver for the
// shared cache, and leaves any other resolver alone.
func cachedEndpoints(o *kinesis.Options) {
	if o.EndpointResolverV2 != nil && reflect.TypeOf(o.EndpointResolverV2) == defaultResolverType {
		o.EndpointResolverV2 = sharedEndpoints
	}
}
