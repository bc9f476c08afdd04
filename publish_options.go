package kinesub

import (
	"fmt"
	"reflect"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/gostream/kinesub/internal/publish"
)

// PublisherOption configures NewPublisher. Options are validated before any I/O; an invalid
// value makes NewPublisher return an error wrapping ErrInvalidOption that names the option and
// its range.
type PublisherOption func(*publisherConfig)

type publisherConfig struct {
	send           publish.Config // retries, backoff, timeout, aggregation
	meterProvider  metric.MeterProvider
	tracerProvider trace.TracerProvider // nil: no tracing (tracing.go)

	errs []error // collected while applying options, reported by validate
}

func defaultPublisherConfig() publisherConfig {
	return publisherConfig{send: publish.Config{Retries: 8, BackoffMin: 100 * time.Millisecond, BackoffMax: 5 * time.Second,
		Timeout: 30 * time.Second}, meterProvider: otel.GetMeterProvider()}
}

// Limits of the publisher options' ranges.
const (
	maxPublishRetries    = 100
	minPublishBackoff    = time.Millisecond
	maxPublishBackoffMin = time.Minute
	maxPublishBackoffMax = 5 * time.Minute
	minPublishTimeout    = 10 * time.Millisecond
	maxPublishTimeout    = time.Hour
)

func (c *publisherConfig) validate() error {
	if len(c.errs) > 0 {
		return c.errs[0]
	}
	s := c.send
	switch {
	case s.Retries < 0 || s.Retries > maxPublishRetries:
		return optionError("WithPublishRetries", s.Retries, fmt.Sprintf("must be between 0 and %d", maxPublishRetries))
	case s.BackoffMin < minPublishBackoff || s.BackoffMin > maxPublishBackoffMin ||
		s.BackoffMax < s.BackoffMin || s.BackoffMax > maxPublishBackoffMax:
		return optionError("WithPublishBackoff", fmt.Sprintf("%v, %v", s.BackoffMin, s.BackoffMax),
			fmt.Sprintf("first must be between %v and %v, limit between first and %v", minPublishBackoff, maxPublishBackoffMin, maxPublishBackoffMax))
	case s.Timeout < minPublishTimeout || s.Timeout > maxPublishTimeout:
		return optionError("WithPublishTimeout", s.Timeout, fmt.Sprintf("must be between %v and %v", minPublishTimeout, maxPublishTimeout))
	}
	return nil
}

// WithPublishTimeout sets the time budget of each record of a PublishBatch call, overriding
// the default 30s (the Java KPL's RecordTtl). A record that was sent is retried until it is
// written or this long has passed since it was first sent; a record still waiting for its
// shard's turn fails once its shard has written nothing for this long. Throttling is never a
// reason to fail earlier. Range 10ms to 1h.
func WithPublishTimeout(d time.Duration) PublisherOption {
	return func(c *publisherConfig) { c.send.Timeout = d }
}

// WithPublishRetries sets how many times PublishBatch resends a record after refusals other
// than throttling, overriding the default 8: a record the service failed internally
// (InternalFailure), or that a call carried whose answer was lost (a broken connection, a 5xx
// answer). 0 fails such a record at its first refusal. Range 0 to 100. Throttling is not
// counted: a throttled record is resent until WithPublishTimeout runs out.
func WithPublishRetries(n int) PublisherOption {
	return func(c *publisherConfig) { c.send.Retries = n }
}

// WithPublishBackoff sets how long a shard waits after refusals in a row (with no record
// written in between) before PublishBatch sends to it again, overriding the defaults 100ms and
// 5s: after the n-th such refusal a random time between first and first×2ⁿ⁻¹, capped at
// limit; the randomness spreads out publishers that were refused together. A throttle right
// after a write does not count: the pacer already sends at the shard's pace, and only books the
// refused records again. Only the refused shard waits. first ranges from 1ms to 1m, limit from
// first to 5m.
func WithPublishBackoff(first, limit time.Duration) PublisherOption {
	return func(c *publisherConfig) { c.send.BackoffMin, c.send.BackoffMax = first, limit }
}

// WithPublishAggregation makes PublishBatch pack user records bound for one shard into Kinesis
// Producer Library (KPL) aggregated records of up to 1 MiB, as the Java KPL's
// AggregationEnabled does, overriding the default of sending each record on its own. A shard
// takes 1,000 records but only 1 MiB a second, so small records are written up to ten times
// faster. Every reader must deaggregate: kinesub subscribers, the KCL, Lambda with the KPL
// deaggregation libraries do; a reader that does not sees one record of KPL protobuf per
// aggregate (see docs/publishing.md). Publish, which writes one record, never aggregates.
func WithPublishAggregation(enabled bool) PublisherOption {
	return func(c *publisherConfig) { c.send.Aggregate = enabled }
}

// WithPublishMeterProvider sets where the publisher's OpenTelemetry metrics go (listed in
// the README, "Metrics"), as WithMeterProvider does for a Subscriber. The default is the global
// provider, otel.GetMeterProvider(), which discards everything until the application installs
// one. nil is rejected.
func WithPublishMeterProvider(mp metric.MeterProvider) PublisherOption {
	return func(c *publisherConfig) {
		if v := reflect.ValueOf(mp); mp == nil || v.Kind() == reflect.Pointer && v.IsNil() {
			c.errs = append(c.errs, optionError("WithPublishMeterProvider", "nil", "must be a metric.MeterProvider"))
			return
		}
		c.meterProvider = mp
	}
}

// WithPublishTracerProvider makes the publisher trace its calls with OpenTelemetry (see the
// repository's docs/tracing.md): a producer span per Publish or PublishBatch call, whose W3C
// trace context ("traceparent", and "tracestate" when there is one) is written into the header
// envelope of every record of the call, so that a subscriber continues the trace. Records then
// always carry the envelope, and 60 to 100 more bytes: readers other than kinesub and the Rust
// crate see it in the data. A KCL application still reading the stream, during a migration
// say, gets "RSK1", a length and the header lines ahead of each payload: turn this on once no
// such reader is left, or have it strip the envelope (docs/migrating.md, "Running the KCL and
// kinesub side by side"). The default is no tracing: records are written exactly as given, and
// the global provider is not used. nil is rejected.
func WithPublishTracerProvider(tp trace.TracerProvider) PublisherOption {
	return func(c *publisherConfig) {
		if isNilProvider(tp) {
			c.errs = append(c.errs, optionError("WithPublishTracerProvider", "nil", "must be a trace.TracerProvider"))
			return
		}
		c.tracerProvider = tp
	}
}
