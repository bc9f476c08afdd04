package kinesub

import (
	"fmt"
	"regexp"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub/internal/kinesisiface"
)

// fanOutConfig is how a subscription reads over enhanced fan-out (WithEnhancedFanOut).
type fanOutConfig struct {
	name string // the stream consumer's name
	arn  string // set by Subscribe once the consumer is ACTIVE

	// newClient returns the client one subscription is made with. The SDK's event-stream
	// decoder state is shared by all the streams of one client and races when several are read
	// at once (aws/smithy-go#714), also a shard's next subscription against its previous one's
	// reader still winding down, so Subscribe gives each subscription a client of its own built
	// from the user's client's options: same HTTP client and connections, same credentials and
	// endpoint, its own decoder. nil: the subscriber's client.
	newClient func() kinesisiface.Kinesis

	stallAfter   time.Duration // no event for this long: the subscription is dead
	inUseRetry   time.Duration // the wait before retrying a subscription in use elsewhere
	takeover     time.Duration // after an accepted call, how long the service refuses the next
	activeWithin time.Duration // the longest wait for the consumer to become ACTIVE
	describeWait time.Duration // between DescribeStreamConsumer calls while waiting
}

// Defaults of enhanced fan-out; tests shorten them through fanOutTimings.
const (
	// The service sends an event on an idle shard every few seconds; a subscription silent
	// for this long has died without its connection noticing.
	fanOutStallAfter = 35 * time.Second
	// One SubscribeToShard call per second per consumer and shard is the service's limit, and
	// ResourceInUseException clears within seconds: retry at that floor, never slower.
	fanOutInUseRetry = time.Second
	// Registration usually takes seconds; this bounds a consumer stuck in CREATING.
	fanOutActiveWithin = 2 * time.Minute
	// A second SubscribeToShard call within 5 s of an accepted one is refused with
	// ResourceInUseException; after that it takes over. A second more covers the trip.
	fanOutTakeover     = 6 * time.Second
	fanOutDescribeWait = time.Second
)

// The service's rule for consumer names.
var consumerNameRE = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,128}$`)

// WithEnhancedFanOut makes the subscription read every shard it leases over enhanced fan-out
// (SubscribeToShard) through the stream consumer named consumerName, instead of polling with
// GetRecords. Each consumer gets its own 2 MB/s per shard, and records are pushed within tens of
// milliseconds of their arrival instead of at the next poll.
//
// Subscribe looks the consumer up, registers it when missing, and waits until it is ACTIVE
// (failing with ErrFanOutConsumer after two minutes). Every instance of an application, and
// every restart, uses the same consumerName: they share the consumer and split the shards
// through the lease table as polling subscribers do. The consumer is never deregistered by
// kinesub; deregister it (DeregisterStreamConsumer) when the application is retired, as a
// registered consumer is billed per shard-hour and a stream has at most 20.
//
// Everything else is unchanged: leases, balancing, resharding, the watermark, checkpoints,
// Seek, Shards and Close. WithPollInterval, WithIdlePollInterval and WithBatchSize do not
// apply to fan-out reads.
// consumerName must be 1 to 128 characters of letters, digits, '_', '.' and '-'.
func WithEnhancedFanOut(consumerName string) Option {
	return func(c *config) {
		if !consumerNameRE.MatchString(consumerName) {
			c.reject("WithEnhancedFanOut", fmt.Sprintf("%q", consumerName), "must be 1 to 128 characters of letters, digits, '_', '.' and '-'")
			return
		}
		c.fanOut = &fanOutConfig{
			name:         consumerName,
			stallAfter:   fanOutStallAfter,
			inUseRetry:   fanOutInUseRetry,
			takeover:     fanOutTakeover,
			activeWithin: fanOutActiveWithin,
			describeWait: fanOutDescribeWait,
		}
	}
}

// withClientPerSubscription gives each shard's subscriptions a client of their own, built from
// client's options (see fanOutConfig.newClient). Subscribe adds it for a *kinesis.Client.
func withClientPerSubscription(client *kinesis.Client) Option {
	return func(c *config) {
		if c.fanOut != nil && c.fanOut.newClient == nil {
			c.fanOut.newClient = func() kinesisiface.Kinesis { return kinesis.New(client.Options()) }
		}
	}
}
