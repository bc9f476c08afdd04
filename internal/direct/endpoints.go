package direct

import (
	"context"
	"reflect"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	smithyendpoints "github.com/aws/smithy-go/endpoints"
)

// The SDK's default endpoint resolver evaluates the service's endpoint rules (the partition
// table, the stream ARN's account and region) on every call: about a sixth of the CPU of an
// empty GetRecords call, asked again by each reader at every poll with the same parameters.
// The default resolver is a pure function of those parameters, so a reader's calls reuse what
// it answered (CachedEndpoints). A resolver of the application's own (kinesis.Options'
// EndpointResolverV2 set to anything else) is called every time: it need not be pure.

// defaultResolverType is the type of the SDK's default endpoint resolver.
var defaultResolverType = reflect.TypeOf(kinesis.NewDefaultEndpointResolverV2())

// maxCachedEndpoints bounds the cache: one entry per stream, region and endpoint setting in
// use, so a process reaches it only with that many streams; past it, calls resolve as before.
const maxCachedEndpoints = 1024

// endpointKey is an EndpointParameters by value: every field of it (a test fails when the SDK
// adds one), with which of its pointers are set.
type endpointKey struct {
	region, endpoint, operation, streamID, streamARN, consumerARN, resourceARN, channelARN string
	accountID, accountIDMode                                                               string
	dualStack, fips                                                                        bool
	set                                                                                    uint16 // a bit per pointer field set
}

func keyOf(p kinesis.EndpointParameters) endpointKey {
	var k endpointKey
	str := func(v *string, to *string, bit uint16) {
		if v != nil {
			*to, k.set = *v, k.set|bit
		}
	}
	str(p.Region, &k.region, 1<<0)
	str(p.Endpoint, &k.endpoint, 1<<1)
	str(p.OperationType, &k.operation, 1<<2)
	str(p.StreamId, &k.streamID, 1<<3)
	str(p.StreamARN, &k.streamARN, 1<<4)
	str(p.ConsumerARN, &k.consumerARN, 1<<5)
	str(p.ResourceARN, &k.resourceARN, 1<<6)
	str(p.ChannelARN, &k.channelARN, 1<<7)
	str(p.AccountId, &k.accountID, 1<<8)
	str(p.AccountIdEndpointMode, &k.accountIDMode, 1<<9)
	if p.UseDualStack != nil {
		k.dualStack, k.set = *p.UseDualStack, k.set|1<<10
	}
	if p.UseFIPS != nil {
		k.fips, k.set = *p.UseFIPS, k.set|1<<11
	}
	return k
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

// CachedEndpoints is a per-call option: it swaps the SDK's default endpoint resolver for the
// shared cache, and leaves any other resolver alone.
func CachedEndpoints(o *kinesis.Options) {
	if o.EndpointResolverV2 != nil && reflect.TypeOf(o.EndpointResolverV2) == defaultResolverType {
		o.EndpointResolverV2 = sharedEndpoints
	}
}
