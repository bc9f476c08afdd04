package kinesub

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/gostream/kinesub/internal/kinesisiface"
	"github.com/gostream/kinesub/internal/publish"
	"github.com/gostream/kinesub/internal/telemetry"
)

// maxRecordBytes is the largest record the service stores: data plus partition key.
const maxRecordBytes = publish.MaxRecordBytes

// Publisher writes records to one stream, adding the header envelope to records that carry
// headers so that kinesub subscribers (and the Rust implementation) read them back. It paces
// what it sends to each shard under the shard's write limits, learning the stream's shards
// with ListShards. It is safe for concurrent use, and every goroutine it starts ends before the
// call that started it returns, so it needs no closing.
type Publisher struct {
	client  kinesisiface.Kinesis
	stream  string // the stream's name, also when given its ARN
	ref     streamRef
	metrics *publisherMetrics
	shards  *publish.Tracker // the stream's shards and their pacers, which Publish charges too
	w       *publish.Writer  // sends PublishBatch's records
	tracer  *tracer          // nil unless WithPublishTracerProvider (tracing.go)
}

// Record is one record for PublishBatch. Headers may be nil.
type Record struct {
	PartitionKey string
	// ExplicitHashKey, when not empty, places the record instead of its partition key's MD5
	// hash: a decimal number from 0 to 2^128-1, written without leading zeros, as the service
	// takes it. Records with one partition key keep their order only while they also share
	// their explicit hash key.
	ExplicitHashKey string
	Data            []byte
	Headers         map[string]string
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
	resent, err := cfg.meterProvider.Meter(meterName).Int64Counter("kinesub.publish.unconfirmed_resends",
		metric.WithUnit("{message}"),
		metric.WithDescription("Records PublishBatch sent again after the answer to a call that carried them was lost: each may be stored twice."))
	if err != nil {
		return nil, fmt.Errorf("kinesub: metrics: %w", err)
	}
	client = telemetry.Kinesis{Client: client, Requests: m.req}
	dest := publish.Stream{Name: ref.name, ARN: ref.arn}
	p := &Publisher{client: client, stream: ref.name, ref: ref, metrics: m,
		shards: publish.NewTracker(client, dest), tracer: newTracer(cfg.tracerProvider, ref.name)}
	p.w = &publish.Writer{Client: client, Stream: dest, Config: cfg.send, Shards: p.shards,
		Resent:    func(ctx context.Context, n int) { resent.Add(ctx, int64(n), m.attrs) },
		CallError: func(op string, err error) error { return callError(op, ref.name, err) }}
	return p, nil
}

// Publish writes one record with PutRecord and returns its sequence number. headers may be nil;
// their names are written lowercased, as every reader of the envelope delivers them.
// The record is checked first (see ErrInvalidRecord). Publish sends once: failures of the call
// are retried only by the SDK client's retryer, and a missing stream is ErrStreamNotFound.
// Successive Publish calls with one partition key, each waiting for the previous, are stored
// in call order. Publish does not wait for its shard's turn, but once PublishBatch has
// learned the stream's shards, what Publish writes counts in their pacing. A nil ctx is an
// error wrapping ErrInvalidOption.
func (p *Publisher) Publish(ctx context.Context, partitionKey string, data []byte, headers map[string]string) (sequence string, err error) {
	if ctx == nil {
		return "", nilContext("Publish")
	}
	if p.tracer != nil {
		var span trace.Span
		ctx, span, headers = p.tracer.startPublish(ctx, headers)
		defer func() { endPublish(span, sequence, err) }()
	}
	enc, hash, err := publish.Prepare(partitionKey, "", data, headers)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidRecord, err)
	}
	predicted := p.shards.Charge(hash, len(enc)+len(partitionKey))
	out, err := p.client.PutRecord(ctx, &kinesis.PutRecordInput{
		StreamName: p.ref.streamName(), StreamARN: p.ref.streamARN(), PartitionKey: aws.String(partitionKey), Data: enc,
	})
	if err != nil {
		p.metrics.published(ctx, 0, 1)
		return "", callError("PutRecord", p.stream, err)
	}
	if predicted != "" {
		p.shards.Wrote(predicted, aws.ToString(out.ShardId))
	}
	p.metrics.published(ctx, 1, 0)
	return aws.ToString(out.SequenceNumber), nil
}

// PublishBatch writes records with PutRecords. Every record is checked before anything is sent
// (see ErrInvalidRecord): an invalid record fails the call at once, naming its index, and
// nothing is written.
//
// Records go to each shard at the pace the shard takes them (1,000 records and 1 MiB a second),
// predicted from the stream's shards and hash-key ranges (listed with ListShards, again after
// a reshard), so that a burst larger than the stream's limits is written as fast as they allow
// instead of being refused. Calls may run concurrently, and a shard that is busy or refusing
// never holds back the records of another.
//
// Records of one partition key are stored in slice order, also when some are refused and sent
// again: a record is sent only once every earlier record of its key is written. So a key's
// records are written one call after the other (one round trip each); with
// WithPublishAggregation, a call carries as many of a key's records as one aggregated record
// holds.
//
// A refused record goes back to the front of its key's queue and is booked again in its
// shard's pacer; a shard that refuses again before writing anything pauses (WithPublishBackoff).
// Throttling is expected and retried until the record's time budget (WithPublishTimeout) runs
// out; other refusals, and calls whose answer was lost, at most WithPublishRetries times. When a record
// fails, the later records of its key fail with it unsent, so that resending the failed ones
// keeps the key's order. The Publisher writes a record twice only when it resent it after the
// answer to a call that carried it was lost; the metric kinesub.publish.unconfirmed_resends
// counts those records, and a consumer tells such a copy apart only by an identifier of your own
// in its data or headers.
//
// On failure PublishBatch returns a *PublishError listing the records not written; the others
// are written. A PutRecords call that the service refuses outright for a reason that does not
// pass (a missing stream, a denied permission) stops the batch, as cancelling ctx does, with
// such an error wrapping the cause. A nil ctx is an error wrapping ErrInvalidOption, and
// nothing is sent.
func (p *Publisher) PublishBatch(ctx context.Context, records []Record) (err error) {
	if ctx == nil {
		return nilContext("PublishBatch")
	}
	if len(records) == 0 {
		return nil
	}
	var tc traceHeaders
	if p.tracer != nil {
		var span trace.Span
		ctx, span, tc = p.tracer.startSend(ctx, len(records))
		defer func() { endSpan(span, err) }()
	}
	recs := make([]publish.Record, len(records))
	for i, r := range records {
		enc, hash, err := publish.Prepare(r.PartitionKey, r.ExplicitHashKey, r.Data, tc.add(r.Headers))
		if err != nil {
			return fmt.Errorf("%w: record %d: %w", ErrInvalidRecord, i, err)
		}
		recs[i] = publish.NewRecord(r.PartitionKey, r.ExplicitHashKey, enc, hash)
	}
	out := p.w.Batch(ctx, recs)
	p.metrics.published(ctx, out.Written, len(recs)-out.Written)
	if out.Written == len(recs) {
		return nil
	}
	return newPublishError(p.stream, recs, out)
}

// callError wraps the failure of a whole call, classifying a missing stream.
func callError(op, stream string, err error) error {
	if rnf := (*types.ResourceNotFoundException)(nil); errors.As(err, &rnf) {
		return fmt.Errorf("%w: %s %s: %w", ErrStreamNotFound, op, stream, err)
	}
	return fmt.Errorf("kinesub: %s %s: %w", op, stream, err)
}

// PublishError is returned by PublishBatch when some records were not written. Records not in
// Failed were written; those in Failed may still have been, if a call that carried them lost
// its answer, so a caller that resends them gets at-least-once delivery. Resending Failed in
// its order keeps each partition key's order: a key's records after a failed one are in Failed
// too.
type PublishError struct {
	Stream string
	// Failed holds the indexes, ascending, into the records given to PublishBatch of those
	// not known to be written.
	Failed []int
	// ErrorCode and ErrorMessage are the last per-record refusal seen, such as
	// "ProvisionedThroughputExceededException"; empty when no record was refused.
	ErrorCode    string
	ErrorMessage string
	// Err is what stopped PublishBatch before its records ran out of time or retries: a
	// PutRecords or ListShards call the service refused outright (wrapping ErrStreamNotFound
	// for a missing stream), or ctx's error. It is nil when the records in Failed ran out of
	// their time budget (WithPublishTimeout) or of retries (WithPublishRetries).
	Err error

	total  int
	reason string // why records failed on their own, when Err is nil
}

func (e *PublishError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kinesub: PublishBatch %s: %d of %d records not written", e.Stream, len(e.Failed), e.total)
	if e.Err == nil && e.reason != "" {
		fmt.Fprintf(&b, ": %s", e.reason)
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

// newPublishError lists the records of recs not written.
func newPublishError(stream string, recs []publish.Record, out publish.Outcome) *PublishError {
	e := &PublishError{Stream: stream, ErrorCode: out.Code, ErrorMessage: out.Message, Err: out.Err, total: len(recs), reason: out.Reason}
	for i := range recs {
		if !recs[i].Written() {
			e.Failed = append(e.Failed, i)
		}
	}
	return e
}
