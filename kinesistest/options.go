package kinesistest

import (
	"fmt"
	"time"
)

// Option configures a Server.
type Option func(*config)

type config struct {
	limits               bool
	iteratorLifetime     time.Duration
	subscriptionLifetime time.Duration
	idleEventInterval    time.Duration
	statusDelay          time.Duration
	now                  func() time.Time
	faults               *FaultPlan
	region               string
	plain                bool
}

func defaultConfig() config {
	return config{
		iteratorLifetime:     5 * time.Minute,
		subscriptionLifetime: 5 * time.Minute,
		idleEventInterval:    5 * time.Second,
		now:                  time.Now,
		region:               "us-east-1",
	}
}

func (c *config) validate() error {
	if c.iteratorLifetime <= 0 || c.iteratorLifetime > 24*time.Hour {
		return fmt.Errorf("kinesistest: WithIteratorLifetime %v: must be in (0, 24h]", c.iteratorLifetime)
	}
	if c.subscriptionLifetime <= 0 || c.subscriptionLifetime > 24*time.Hour {
		return fmt.Errorf("kinesistest: WithSubscriptionLifetime %v: must be in (0, 24h]", c.subscriptionLifetime)
	}
	if c.idleEventInterval < time.Millisecond || c.idleEventInterval > time.Minute {
		return fmt.Errorf("kinesistest: WithIdleEventInterval %v: must be in [1ms, 1m]", c.idleEventInterval)
	}
	if c.statusDelay < 0 || c.statusDelay > time.Hour {
		return fmt.Errorf("kinesistest: WithStatusDelay %v: must be in [0, 1h]", c.statusDelay)
	}
	if c.region == "" {
		return fmt.Errorf("kinesistest: WithRegion: the region must not be empty")
	}
	if c.now == nil {
		return fmt.Errorf("kinesistest: WithClock: the clock must not be nil")
	}
	if c.faults != nil {
		if err := c.faults.validate(); err != nil {
			return err
		}
	}
	return nil
}

// WithLimits enforces the service's throughput limits, overriding the default of not enforcing
// them: per shard, 5 GetRecords calls and 2 MB read per second, 1,000 records and 1 MB written
// per second, and one SubscribeToShard call per second per consumer (a call refused with
// ResourceInUseException counts as well). A call over a limit fails
// with ProvisionedThroughputExceededException (LimitExceededException for SubscribeToShard) as
// the service's does; PutRecords fails only the records over the limit. The limits count on
// the server's clock (WithClock). Size limits (1 MiB record, 500 entries and 5 MiB per
// PutRecords, 10,000 records or 10 MiB per GetRecords) always hold.
func WithLimits(enforce bool) Option { return func(c *config) { c.limits = enforce } }

// WithIteratorLifetime sets how long a shard iterator stays valid after GetShardIterator or
// GetRecords handed it out, overriding the service's 5 minutes. Range (0, 24h].
func WithIteratorLifetime(d time.Duration) Option {
	return func(c *config) { c.iteratorLifetime = d }
}

// WithSubscriptionLifetime sets how long a SubscribeToShard subscription lives before the server
// ends it, overriding the service's 5 minutes. Range (0, 24h]. The lifetime counts on the
// server's clock, checked whenever the subscription sends an event.
func WithSubscriptionLifetime(d time.Duration) Option {
	return func(c *config) { c.subscriptionLifetime = d }
}

// WithIdleEventInterval sets how often a subscription to a shard with no new records sends an
// empty event, overriding the default 5s. Range [1ms, 1m]. It runs on real time, not on the
// server's clock, so that a stopped test clock cannot stall a subscription.
func WithIdleEventInterval(d time.Duration) Option {
	return func(c *config) { c.idleEventInterval = d }
}

// WithStatusDelay sets how long a stream stays CREATING, UPDATING (after a reshard) or
// DELETING, and a consumer CREATING or DELETING, on the server's clock, overriding the default
// 0: the next call sees the change done. Range [0, 1h]. A reshard of a stream that is not
// ACTIVE fails with ResourceInUseException, as the service's does.
func WithStatusDelay(d time.Duration) Option {
	return func(c *config) { c.statusDelay = d }
}

// WithClock makes the server read the time from now, overriding time.Now. Arrival timestamps,
// iterator expiry, MillisBehindLatest, throughput limits, status delays and subscription
// lifetimes all count on it, so a test can move time forward without waiting.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithRegion sets the region in the ARNs the server hands out and in Client's configuration,
// overriding the default "us-east-1". It must not be empty.
func WithRegion(region string) Option { return func(c *config) { c.region = region } }

// WithPlainHTTP makes the server also listen for plain HTTP/1.1, without TLS, at PlainURL, off
// by default. It serves the same streams; use it for a proxy or tool in front of the server
// that cannot trust its certificate. The SDK's SubscribeToShard needs the TLS endpoint.
func WithPlainHTTP() Option { return func(c *config) { c.plain = true } }
