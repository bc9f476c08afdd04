package kinesub

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/gostream/kinesub/internal/kinesisiface"
)

// Limits the service puts on what one PutRecord or PutRecords call carries.
const (
	maxPartitionKey = 256     // characters
	maxRecordBytes  = 1 << 20 // data plus partition key
	maxBatchRecords = 500
	maxBatchBytes   = 5 << 20 // data plus partition keys, over the whole call
)

// Publisher writes records to one stream, adding the header envelope to records that carry
// headers so that kinesub subscribers (and the Rust implementation) read them back. It is safe
// for concurrent use and holds no goroutines, so it needs no closing.
type Publisher struct {
	client  kinesisiface.Kinesis
	stream  string // the stream's name, also when given its ARN
	ref     streamRef
	cfg     publisherConfig
	metrics *publisherMetrics
}

// Record is one record for PublishBatch. Headers may be nil.
type Record struct {
	PartitionKey string
	Data         []byte
	Headers      map[string]string
}

// PublisherOption configures NewPublisher. Options are validated before any I/O; an invalid
// value makes NewPublisher return an error wrapping ErrInvalidOption that names the option and
// its range.
type PublisherOption func(*publisherConfig)

type publisherConfig struct {
	retries       int
	backoffMin    time.Duration
	backoffMax    time.Duration
	meterProvider metric.MeterProvider

	errs []error // collected while applying options, reported by validate
}

func defaultPublisherConfig() publisherConfig {
	return publisherConfig{retries: 8, backoffMin: 100 * time.Millisecond, backoffMax: 5 * time.Second,
		meterProvider: otel.GetMeterProvider()}
}

// Limits of the publisher options' ranges.
const (
	maxPublishRetries    = 100
	minPublishBackoff    = time.Millisecond
	maxPublishBackoffMin = time.Minute
	maxPublishBackoffMax = 5 * time.Minute
)

func (c *publisherConfig) validate() error {
	if len(c.errs) > 0 {
		return c.errs[0]
	}
	switch {
	case c.retries < 0 || c.retries > maxPublishRetries:
		return optionError("WithPublishRetries", c.retries, fmt.Sprintf("must be between 0 and %d", maxPublishRetries))
	case c.backoffMin < minPublishBackoff || c.backoffMin > maxPublishBackoffMin ||
		c.backoffMax < c.backoffMin || c.backoffMax > maxPublishBackoffMax:
		return optionError("WithPublishBackoff", fmt.Sprintf("%v, %v", c.backoffMin, c.backoffMax),
			fmt.Sprintf("min must be between %v and %v, max between min and %v", minPublishBackoff, maxPublishBackoffMin, maxPublishBackoffMax))
	}
	return nil
}

// WithPublishRetries sets how many times PublishBatch resends the records that a PutRecords
// call refused (throttled or failed inside the service) before it gives up, overriding the
// default 8. 0 sends each record once. Range 0 to 100. Errors of a whole call (network,
// throttling of the request) are retried by the SDK client's own retryer, not by this count.
func WithPublishRetries(n int) PublisherOption { return func(c *publisherConfig) { c.retries = n } }

// WithPublishBackoff sets the wait before each resend by PublishBatch, overriding the defaults
// 100ms and 5s: the n-th resend waits a random time between min and min×2ⁿ⁻¹, capped at max;
// the randomness spreads out publishers that were throttled together. min ranges from 1ms to
// 1m, max from min to 5m.
func WithPublishBackoff(min, max time.Duration) PublisherOption {
	return func(c *publisherConfig) { c.backoffMin, c.backoffMax = min, max }
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

// NewPublisher returns a Publisher that writes to stream, given by name or by ARN, through
// client. It does no I/O: a
// stream that does not exist shows up as ErrStreamNotFound from the first publish. An empty or
// malformed stream name or ARN, a nil client or an invalid option is an error wrapping
// ErrInvalidOption.
func NewPublisher(client *kinesis.Client, stream string, opts ...PublisherOption) (*Publisher, error) {
	if client == nil {
		return nil, optionError("NewPublisher client", "nil", "must be a *kinesis.Client")
	}
	return newPublisher(client, stream, opts...)
}

// newPublisher takes the interface, so tests can put a fake in front of the publisher.
func newPublisher(client kinesisiface.Kinesis, stream string, opts ...PublisherOption) (*Publisher, error) {
	ref, err := parseStream("NewPublisher", stream)
	if err != nil {
		return nil, err
	}
	cfg := defaultPublisherConfig()
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: option %d of NewPublisher is nil", ErrInvalidOption, i)
		}
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m, err := newPublisherMetrics(cfg.meterProvider, ref.name)
	if err != nil {
		return nil, fmt.Errorf("kinesub: metrics: %w", err)
	}
	return &Publisher{client: meteredKinesis{k: client, r: m.req}, stream: ref.name, ref: ref, cfg: cfg, metrics: m}, nil
}

// Publish writes one record with PutRecord and returns its sequence number. headers may be nil;
// their names are written lowercased, as every reader of the envelope delivers them.
// The record is checked first (see ErrInvalidRecord). Publish sends once: failures of the call
// are retried only by the SDK client's retryer, and a missing stream is ErrStreamNotFound.
// Successive Publish calls with one partition key, each waiting for the previous, are stored
// in call order. A nil ctx is an error wrapping ErrInvalidOption.
func (p *Publisher) Publish(ctx context.Context, partitionKey string, data []byte, headers map[string]string) (sequence string, err error) {
	if ctx == nil {
		return "", nilContext("Publish")
	}
	enc, err := prepareRecord(partitionKey, data, headers)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidRecord, err)
	}
	out, err := p.client.PutRecord(ctx, &kinesis.PutRecordInput{
		StreamName: p.ref.streamName(), StreamARN: p.ref.streamARN(), PartitionKey: aws.String(partitionKey), Data: enc,
	})
	if err != nil {
		p.metrics.published(ctx, 0, 1)
		return "", callError("PutRecord", p.stream, err)
	}
	p.metrics.published(ctx, 1, 0)
	return aws.ToString(out.SequenceNumber), nil
}

// PublishBatch writes records with PutRecords, in calls of at most 500 records and 5 MiB, one
// call at a time in slice order. Every record is checked before anything is sent (see
// ErrInvalidRecord).
//
// When a call partly fails, only the refused records are sent again, in their original
// relative order, after a backoff (WithPublishBackoff), up to WithPublishRetries times; the
// next call starts only once every record of the current one is written. Kinesis stores the
// records of one partition key in the order it accepts them, so a resent record lands after
// the later records of its key that the same call did write: where strict per-key order
// matters across failures, publish one record per key at a time.
//
// On failure PublishBatch returns a *PublishError listing the records not written (those
// refused after the last retry and all the later ones, never sent); the others are written.
// Cancelling ctx stops at once with such an error, wrapping ctx's error. A nil ctx is an error
// wrapping ErrInvalidOption, and nothing is sent.
func (p *Publisher) PublishBatch(ctx context.Context, records []Record) error {
	if ctx == nil {
		return nilContext("PublishBatch")
	}
	entries := make([]types.PutRecordsRequestEntry, len(records))
	for i, r := range records {
		enc, err := prepareRecord(r.PartitionKey, r.Data, r.Headers)
		if err != nil {
			return fmt.Errorf("%w: record %d: %w", ErrInvalidRecord, i, err)
		}
		entries[i] = types.PutRecordsRequestEntry{Data: enc, PartitionKey: aws.String(r.PartitionKey)}
	}
	for start := 0; start < len(entries); {
		end := chunkEnd(entries, start)
		if perr := p.putChunk(ctx, entries, start, end); perr != nil {
			for i := end; i < len(entries); i++ {
				perr.Failed = append(perr.Failed, i)
			}
			perr.total = len(entries)
			p.metrics.published(ctx, len(entries)-len(perr.Failed), len(perr.Failed))
			return perr
		}
		start = end
	}
	p.metrics.published(ctx, len(entries), 0)
	return nil
}

// chunkEnd returns the end of the longest run of entries from start that fits one PutRecords
// call. Each record is at most 1 MiB, so a call always takes at least one.
func chunkEnd(entries []types.PutRecordsRequestEntry, start int) int {
	end, size := start, 0
	for end < len(entries) && end-start < maxBatchRecords {
		n := entrySize(&entries[end])
		if size+n > maxBatchBytes {
			break
		}
		size += n
		end++
	}
	return end
}

func entrySize(e *types.PutRecordsRequestEntry) int {
	return len(e.Data) + len(aws.ToString(e.PartitionKey))
}

// putChunk writes entries[start:end], resending refused entries until all are written or the
// retries run out.
func (p *Publisher) putChunk(ctx context.Context, entries []types.PutRecordsRequestEntry, start, end int) *PublishError {
	pending := make([]int, 0, end-start)
	for i := start; i < end; i++ {
		pending = append(pending, i)
	}
	req := make([]types.PutRecordsRequestEntry, 0, len(pending))
	var code, msg string
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return &PublishError{Stream: p.stream, Failed: pending, ErrorCode: code, ErrorMessage: msg, Err: err, attempts: attempt}
		}
		req = req[:0]
		for _, i := range pending {
			req = append(req, entries[i])
		}
		out, err := p.client.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: p.ref.streamName(), StreamARN: p.ref.streamARN(), Records: req})
		if err == nil && len(out.Records) != len(req) {
			err = fmt.Errorf("PutRecords answered %d results for %d records", len(out.Records), len(req))
		}
		if err != nil {
			return &PublishError{Stream: p.stream, Failed: pending, ErrorCode: code, ErrorMessage: msg, Err: callError("PutRecords", p.stream, err), attempts: attempt + 1}
		}
		// Keep the refused entries in their order; pending is reused, as each kept index comes
		// from at or after the slot it is written to.
		failed := pending[:0]
		for k, r := range out.Records {
			if c := aws.ToString(r.ErrorCode); c != "" {
				failed = append(failed, pending[k])
				code, msg = c, aws.ToString(r.ErrorMessage)
			}
		}
		pending = failed
		if len(pending) == 0 {
			return nil
		}
		if attempt == p.cfg.retries {
			return &PublishError{Stream: p.stream, Failed: pending, ErrorCode: code, ErrorMessage: msg, attempts: attempt + 1}
		}
		t := time.NewTimer(p.cfg.backoff(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return &PublishError{Stream: p.stream, Failed: pending, ErrorCode: code, ErrorMessage: msg, Err: ctx.Err(), attempts: attempt + 1}
		case <-t.C:
		}
	}
}

// backoff returns the wait before resend number retry+1: random between min and min×2^retry,
// capped at max.
func (c *publisherConfig) backoff(retry int) time.Duration {
	ceil := c.backoffMin
	for i := 0; i < retry && ceil < c.backoffMax; i++ {
		ceil *= 2
	}
	ceil = min(ceil, c.backoffMax)
	return c.backoffMin + rand.N(ceil-c.backoffMin+1)
}

// prepareRecord checks a record against the service's limits and returns its data with the
// header envelope.
func prepareRecord(partitionKey string, data []byte, headers map[string]string) ([]byte, error) {
	if !utf8.ValidString(partitionKey) {
		return nil, fmt.Errorf("partition key %q is not valid UTF-8", partitionKey)
	}
	if n := utf8.RuneCountInString(partitionKey); n < 1 || n > maxPartitionKey {
		return nil, fmt.Errorf("partition key of %d characters: must be 1 to %d", n, maxPartitionKey)
	}
	enc, err := encodeEnvelope(headers, data)
	if err != nil {
		return nil, err
	}
	if enc == nil {
		// The service takes a record of no data; the SDK refuses a nil blob as missing.
		enc = []byte{}
	}
	if n := len(enc) + len(partitionKey); n > maxRecordBytes {
		return nil, fmt.Errorf("%d bytes of data, headers and partition key: must be at most %d (1 MiB)", n, maxRecordBytes)
	}
	return enc, nil
}

// callError wraps the failure of a whole call, classifying a missing stream.
func callError(op, stream string, err error) error {
	if rnf := (*types.ResourceNotFoundException)(nil); errors.As(err, &rnf) {
		return fmt.Errorf("%w: %s %s: %w", ErrStreamNotFound, op, stream, err)
	}
	return fmt.Errorf("kinesub: %s %s: %w", op, stream, err)
}

// PublishError is returned by PublishBatch when some records were not written. Records not in
// Failed were written; those in Failed may still have been, if a call failed in transit, so a
// caller that resends them gets at-least-once delivery.
type PublishError struct {
	Stream string
	// Failed holds the indexes, ascending, into the records given to PublishBatch of those
	// not known to be written.
	Failed []int
	// ErrorCode and ErrorMessage are the last per-record refusal seen, such as
	// "ProvisionedThroughputExceededException"; empty when no record was refused.
	ErrorCode    string
	ErrorMessage string
	// Err is why PublishBatch stopped before the retries ran out: the failure of a whole
	// PutRecords call (wrapping ErrStreamNotFound for a missing stream) or ctx's error. It is
	// nil when the retries ran out.
	Err error

	total    int
	attempts int
}

func (e *PublishError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kinesub: PublishBatch %s: %d of %d records not written", e.Stream, len(e.Failed), e.total)
	if e.Err == nil {
		fmt.Fprintf(&b, " after %d attempts", e.attempts)
	}
	if e.ErrorCode != "" {
		fmt.Fprintf(&b, " (last error code %s: %s)", e.ErrorCode, e.ErrorMessage)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

func (e *PublishError) Unwrap() error { return e.Err }
