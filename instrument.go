package kinesub

import (
	"context"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/gostream/kinesub/internal/kinesisiface"
	"github.com/gostream/kinesub/lease"
)

// The library counts its calls by wrapping the two things it calls: the Kinesis client and the
// lease store. Each call becomes one kinesub.requests count and one kinesub.request.duration
// measurement, named by the Kinesis operation or by "lease." and the store method.

// meteredKinesis counts the calls made through a Kinesis client.
type meteredKinesis struct {
	k kinesisiface.Kinesis
	r *requestMetrics
}

var _ kinesisiface.Kinesis = meteredKinesis{}

func (c meteredKinesis) ListShards(ctx context.Context, in *kinesis.ListShardsInput, opts ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	start := time.Now()
	out, err := c.k.ListShards(ctx, in, opts...)
	c.r.record(ctx, "ListShards", start, err)
	return out, err
}

func (c meteredKinesis) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, opts ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	start := time.Now()
	out, err := c.k.GetShardIterator(ctx, in, opts...)
	c.r.record(ctx, "GetShardIterator", start, err)
	return out, err
}

func (c meteredKinesis) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	start := time.Now()
	out, err := c.k.GetRecords(ctx, in, opts...)
	c.r.record(ctx, "GetRecords", start, err)
	return out, err
}

func (c meteredKinesis) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, opts ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	start := time.Now()
	out, err := c.k.DescribeStreamSummary(ctx, in, opts...)
	c.r.record(ctx, "DescribeStreamSummary", start, err)
	return out, err
}

func (c meteredKinesis) CreateStream(ctx context.Context, in *kinesis.CreateStreamInput, opts ...func(*kinesis.Options)) (*kinesis.CreateStreamOutput, error) {
	start := time.Now()
	out, err := c.k.CreateStream(ctx, in, opts...)
	c.r.record(ctx, "CreateStream", start, err)
	return out, err
}

func (c meteredKinesis) PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	start := time.Now()
	out, err := c.k.PutRecords(ctx, in, opts...)
	c.r.record(ctx, "PutRecords", start, err)
	return out, err
}

func (c meteredKinesis) PutRecord(ctx context.Context, in *kinesis.PutRecordInput, opts ...func(*kinesis.Options)) (*kinesis.PutRecordOutput, error) {
	start := time.Now()
	out, err := c.k.PutRecord(ctx, in, opts...)
	c.r.record(ctx, "PutRecord", start, err)
	return out, err
}

// meteredStore counts the calls made to a lease store, and the results of checkpoint writes.
type meteredStore struct {
	s      lease.Store
	m      *metrics
	prefix string // "<stream>/": what a shard's lease key starts with
}

var _ lease.Store = meteredStore{}

func (c meteredStore) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	ctx = c.m.leaseCapacity(ctx, "lease.Acquire")
	start := time.Now()
	ok, err := c.s.Acquire(ctx, key, owner, ttl)
	c.m.req.record(ctx, "lease.Acquire", start, err)
	return ok, err
}

func (c meteredStore) Steal(ctx context.Context, key, owner string, counter int64, ttl time.Duration) (bool, error) {
	ctx = c.m.leaseCapacity(ctx, "lease.Steal")
	start := time.Now()
	ok, err := c.s.Steal(ctx, key, owner, counter, ttl)
	c.m.req.record(ctx, "lease.Steal", start, err)
	return ok, err
}

// StealNote is counted as lease.Steal.
func (c meteredStore) StealNote(ctx context.Context, key, owner string, counter int64, ttl time.Duration, note string) (bool, error) {
	ctx = c.m.leaseCapacity(ctx, "lease.Steal")
	start := time.Now()
	ok, err := c.s.StealNote(ctx, key, owner, counter, ttl, note)
	c.m.req.record(ctx, "lease.Steal", start, err)
	return ok, err
}

func (c meteredStore) Renew(ctx context.Context, key string, t lease.Tenure, ttl time.Duration) (bool, error) {
	ctx = c.m.leaseCapacity(ctx, "lease.Renew")
	start := time.Now()
	ok, err := c.s.Renew(ctx, key, t, ttl)
	c.m.req.record(ctx, "lease.Renew", start, err)
	return ok, err
}

func (c meteredStore) Checkpoint(ctx context.Context, key string, t lease.Tenure, cp lease.Checkpoint) (bool, error) {
	ctx = c.m.leaseCapacity(ctx, "lease.Checkpoint")
	start := time.Now()
	ok, err := c.s.Checkpoint(ctx, key, t, cp)
	c.m.req.record(ctx, "lease.Checkpoint", start, err)
	c.m.checkpointWritten(ctx, strings.TrimPrefix(key, c.prefix), ok, err)
	return ok, err
}

// CheckpointOrdered is counted as lease.Checkpoint.
func (c meteredStore) CheckpointOrdered(ctx context.Context, key string, t lease.Tenure, cp lease.Checkpoint, n int64) (bool, error) {
	ctx = c.m.leaseCapacity(ctx, "lease.Checkpoint")
	start := time.Now()
	ok, err := c.s.CheckpointOrdered(ctx, key, t, cp, n)
	c.m.req.record(ctx, "lease.Checkpoint", start, err)
	c.m.checkpointWritten(ctx, strings.TrimPrefix(key, c.prefix), ok, err)
	return ok, err
}

func (c meteredStore) Read(ctx context.Context, key string) (lease.Lease, error) {
	ctx = c.m.leaseCapacity(ctx, "lease.Read")
	start := time.Now()
	l, err := c.s.Read(ctx, key)
	c.m.req.record(ctx, "lease.Read", start, err)
	return l, err
}

func (c meteredStore) Release(ctx context.Context, key string, t lease.Tenure) (bool, error) {
	ctx = c.m.leaseCapacity(ctx, "lease.Release")
	start := time.Now()
	ok, err := c.s.Release(ctx, key, t)
	c.m.req.record(ctx, "lease.Release", start, err)
	return ok, err
}

func (c meteredStore) List(ctx context.Context) ([]lease.Lease, error) {
	ctx = c.m.leaseCapacity(ctx, "lease.List")
	start := time.Now()
	ls, err := c.s.List(ctx)
	c.m.req.record(ctx, "lease.List", start, err)
	return ls, err
}

// ListPrefix is counted as lease.List: one stream's rows are what a subscriber lists.
func (c meteredStore) ListPrefix(ctx context.Context, prefix string) ([]lease.Lease, error) {
	ctx = c.m.leaseCapacity(ctx, "lease.List")
	start := time.Now()
	ls, err := c.s.ListPrefix(ctx, prefix)
	c.m.req.record(ctx, "lease.List", start, err)
	return ls, err
}

func (c meteredStore) Delete(ctx context.Context, key string, counter int64) (bool, error) {
	ctx = c.m.leaseCapacity(ctx, "lease.Delete")
	start := time.Now()
	ok, err := c.s.Delete(ctx, key, counter)
	c.m.req.record(ctx, "lease.Delete", start, err)
	return ok, err
}

// publisherMetrics are a Publisher's instruments; safe for concurrent use.
type publisherMetrics struct {
	req      *requestMetrics
	sent     metric.Int64Counter
	failures metric.Int64Counter
	attrs    metric.MeasurementOption
}

func newPublisherMetrics(mp metric.MeterProvider, stream string) (*publisherMetrics, error) {
	meter := mp.Meter(meterName)
	req, err := newRequestMetrics(meter, stream)
	if err != nil {
		return nil, err
	}
	p := &publisherMetrics{req: req,
		attrs: metric.WithAttributeSet(attribute.NewSet(attrSystem.String(systemKinesis), attrDestination.String(stream)))}
	if p.sent, err = meter.Int64Counter("messaging.client.sent.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Records written to the stream.")); err != nil {
		return nil, err
	}
	if p.failures, err = meter.Int64Counter("kinesub.publish.failures", metric.WithUnit("{message}"),
		metric.WithDescription("Records a Publish or PublishBatch call returned as not written.")); err != nil {
		return nil, err
	}
	return p, nil
}

// published counts the outcome of one Publish or PublishBatch call: sent records written,
// failed not.
func (p *publisherMetrics) published(ctx context.Context, sent, failed int) {
	if sent > 0 {
		p.sent.Add(ctx, int64(sent), p.attrs)
	}
	if failed > 0 {
		p.failures.Add(ctx, int64(failed), p.attrs)
	}
}
