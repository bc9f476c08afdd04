package kinesub

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/gostream/kinesub/internal/telemetry"
	"github.com/gostream/kinesub/lease"
)

// Metrics are OpenTelemetry instruments made from the MeterProvider given with
// WithMeterProvider or WithPublishMeterProvider (the global one by default). The names,
// units and attributes are listed in docs/metrics.md; dashboards and alerts are written against
// them, so they do not change.
//
// Counts on the delivery path cost an atomic add per record: the consumed, acked and nacked
// counters are observed from per-shard tallies when the provider collects, not added to an
// instrument per record, and the settle duration is measured on a sample of the deliveries
// (settleSample).
//
// The calls made to Kinesis and to the lease store are counted by internal/telemetry's
// wrappers of the client and the store (kinesub.requests, kinesub.request.duration); the
// store's wrapper reports the capacity its calls consumed and the results of the checkpoint
// writes to the instruments here (store).

const meterName = "github.com/gostream/kinesub"

// settleSample: the first delivery of each page, and one in settleSample of a page's
// deliveries besides (those whose offset in the page is a multiple of it), have their settle
// duration measured. Timing every record would cost a clock read and a histogram measurement
// (a few hundred nanoseconds with the SDK's provider) per record, more than the rest of the
// delivery path; a sample leaves the distribution (its percentiles) as it is. Pages make the
// sample follow the traffic: a shard that receives a record at a time has every one timed, a
// busy shard's pages of thousands about 1 in 256. The sampled deliveries' times are kept in
// their page (shardPage.handed), not in every Message.
const settleSample = 256

// Attribute keys; those of the request instruments are internal/telemetry's.
const (
	attrSystem      = telemetry.AttrSystem
	attrDestination = telemetry.AttrDestination
	attrShard       = attribute.Key("kinesub.shard.id")
	attrOperation   = telemetry.AttrOperation
	attrOutcome     = telemetry.AttrOutcome
	attrResult      = attribute.Key("kinesub.result")
	attrTransition  = attribute.Key("kinesub.transition")
	attrReason      = attribute.Key("kinesub.reason")
)

const systemKinesis = telemetry.SystemKinesis

// Values of kinesub.outcome, on the request instruments (internal/telemetry).
const (
	outcomeOK        = telemetry.OutcomeOK
	outcomeThrottled = telemetry.OutcomeThrottled
	outcomeError     = telemetry.OutcomeError
)

// Values of kinesub.transition.
const (
	transAcquired   = "acquired"
	transStolen     = "stolen"
	transLost       = "lost"
	transReleased   = "released"
	transHandedBack = "handed_back"
)

// Values of kinesub.reason, on kinesub.records.dropped.
const (
	// reasonOutsideHashRange: a user record of a KPL aggregate whose hash key lies outside the
	// range of the shard the aggregate is stored in.
	reasonOutsideHashRange = "outside_hash_key_range"
)

// durationBuckets are the duration histograms' bucket bounds, the request duration's among
// them: from a millisecond (an in-memory store) to a minute (a consumer stuck on a record).
var durationBuckets = telemetry.DurationBuckets

// metrics are a Subscriber's instruments. Its methods are safe for concurrent use, and do
// nothing on a nil *metrics (a Subscriber assembled by hand in a test).
type metrics struct {
	meter       metric.Meter
	req         *telemetry.Requests
	stream      attribute.KeyValue
	settle      metric.Float64Histogram
	checkpoints metric.Int64Counter
	transitions metric.Int64Counter
	capacity    metric.Float64Counter
	dropped     metric.Int64Counter
	fallbacks   metric.Int64Counter

	consumedC, acked, nacked  metric.Int64ObservableCounter
	ackedLate                 metric.Int64ObservableCounter
	behind, inFlight, ifBytes metric.Int64ObservableGauge
	held                      metric.Int64ObservableGauge
	oldest                    metric.Float64ObservableGauge
	util                      metric.Float64ObservableGauge
	needed                    metric.Int64ObservableGauge
	reg                       metric.Registration

	mu     sync.Mutex
	shards map[string]*shardStats // every shard read here since Subscribe, held or not
}

// shardStats are one shard's tallies, kept for the life of the subscription so that its
// counters never go back when its lease moves away and comes back.
type shardStats struct {
	m     *metrics
	id    string
	attrs metric.MeasurementOption // system, stream, shard
	timed []metric.RecordOption    // attrs, made once: a variadic call would allocate per measurement

	// consumed is written by the dispatcher, the others by the consumer: each on a cache line
	// of its own, so that the two goroutines do not take the line from each other per record.
	_        [64]byte
	consumed atomic.Int64
	_        [64]byte
	acked    atomic.Int64
	nacked   atomic.Int64
	late     atomic.Int64 // acks that moved no checkpoint: see ackedLate
	_        [64]byte
}

func newMetrics(mp metric.MeterProvider, stream string) (*metrics, error) {
	meter := mp.Meter(meterName)
	req, err := telemetry.NewRequests(meter, stream)
	m := &metrics{meter: meter, req: req, stream: attrDestination.String(stream), shards: map[string]*shardStats{}}
	errs := []error{err}
	add := func(e error) { errs = append(errs, e) }
	var e error
	m.settle, e = meter.Float64Histogram("kinesub.message.settle.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a record's delivery to the consumer to its Ack or Nack."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	add(e)
	m.checkpoints, e = meter.Int64Counter("kinesub.checkpoint.writes", metric.WithUnit("{write}"),
		metric.WithDescription("Checkpoint writes to the lease store, by result: ok, fenced (the lease was lost) or error."))
	add(e)
	m.transitions, e = meter.Int64Counter("kinesub.lease.transitions", metric.WithUnit("{transition}"),
		metric.WithDescription("Shard leases taken (acquired, stolen) and given up (lost, released, handed_back) by this subscriber."))
	add(e)
	m.dropped, e = meter.Int64Counter("kinesub.records.dropped", metric.WithUnit("{message}"),
		metric.WithDescription("Records read and not delivered, by reason: outside_hash_key_range, a user record of a KPL aggregate whose hash key lies outside its shard's range (an aggregate made for the parent of a split, written again by its producer on the right shard)."))
	add(e)
	m.fallbacks, e = meter.Int64Counter("kinesub.getrecords.fallbacks", metric.WithUnit("{call}"),
		metric.WithDescription("GetRecords calls of the direct path (WithDirectGetRecords) handed to the SDK's request path, by reason: transport and response_body (made again through the SDK), credentials, endpoint, request (not sent; that reader keeps to the SDK), unknown_error and undecodable (answered; that reader keeps to the SDK)."))
	add(e)
	m.capacity, e = meter.Float64Counter("kinesub.lease.consumed_capacity", metric.WithUnit("{capacity_unit}"),
		metric.WithDescription("DynamoDB read and write capacity units the lease store's calls consumed, by operation."))
	add(e)
	m.consumedC, e = meter.Int64ObservableCounter("messaging.client.consumed.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Records delivered to the consumer."))
	add(e)
	m.acked, e = meter.Int64ObservableCounter("kinesub.records.acked", metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries settled with Ack."))
	add(e)
	m.nacked, e = meter.Int64ObservableCounter("kinesub.records.nacked", metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries given back with Nack, unhandled."))
	add(e)
	m.ackedLate, e = meter.Int64ObservableCounter("kinesub.records.acked_late", metric.WithUnit("{message}"),
		metric.WithDescription("Acks that moved no checkpoint because they came after their shard's lease was lost or given up (handed back, Close), or after a Seek moved the shard: those records are delivered again (after a Seek, if the new position includes them)."))
	add(e)
	m.behind, e = meter.Int64ObservableGauge("kinesub.shard.millis_behind_latest", metric.WithUnit("ms"),
		metric.WithDescription("MillisBehindLatest of the last page read from each shard held here."))
	add(e)
	m.inFlight, e = meter.Int64ObservableGauge("kinesub.in_flight", metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries not yet settled, per shard held here."))
	add(e)
	m.ifBytes, e = meter.Int64ObservableGauge("kinesub.in_flight.bytes", metric.WithUnit("By"),
		metric.WithDescription("Bytes held toward WithMaxInFlightBytes, per shard held here."))
	add(e)
	m.held, e = meter.Int64ObservableGauge("kinesub.leases.held", metric.WithUnit("{lease}"),
		metric.WithDescription("Shards this subscriber holds the lease of and reads."))
	add(e)
	m.oldest, e = meter.Float64ObservableGauge("kinesub.in_flight.oldest_age", metric.WithUnit("s"),
		metric.WithDescription("How long ago the oldest delivery not yet settled was fetched, per shard held here (0 when none): a record that holds its shard's checkpoint back."))
	add(e)
	m.util, e = meter.Float64ObservableGauge("kinesub.consumer.utilization", metric.WithUnit("1"),
		metric.WithDescription("Share of the last window (the longer of a third of the lease TTL and the balance interval) the consumer was not waiting for records: near 0 when it keeps up, 1 when records wait for it all the time; for Process, the share of its workers running handlers."))
	add(e)
	m.needed, e = meter.Int64ObservableGauge("kinesub.fleet.instances_needed", metric.WithUnit("{instance}"),
		metric.WithDescription("Instances the fleet reading the stream needs for its consumers to run at the scale target (WithScaleTarget, 0.7 by default): ceil(sum of the live instances' kinesub.consumer.utilization / target), at least 1, at most the shards open for reading."))
	add(e)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("kinesub: metrics: %w", err)
	}
	return m, nil
}

// observe starts reporting the observed instruments from the shards that held returns, and
// the consumer's utilization and the fleet's size from fleet (needed 0: not known yet).
func (m *metrics) observe(held func() []*worker, fleet func() (util float64, needed int64)) error {
	r, err := m.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		m.mu.Lock()
		for _, st := range m.shards {
			o.ObserveInt64(m.consumedC, st.consumed.Load(), st.attrs)
			o.ObserveInt64(m.acked, st.acked.Load(), st.attrs)
			o.ObserveInt64(m.nacked, st.nacked.Load(), st.attrs)
			o.ObserveInt64(m.ackedLate, st.late.Load(), st.attrs)
		}
		m.mu.Unlock()
		ws := held()
		now := time.Now()
		for _, w := range ws {
			w.mu.Lock()
			n, b := w.wm.inFlight(), w.wm.bytes
			_, at, unsettled := w.wm.oldest()
			w.mu.Unlock()
			age := 0.0
			if unsettled && at != 0 {
				age = now.Sub(time.Unix(0, at)).Seconds()
			}
			o.ObserveFloat64(m.oldest, age, w.stats.attrs)
			o.ObserveInt64(m.inFlight, int64(n), w.stats.attrs)
			o.ObserveInt64(m.ifBytes, int64(b), w.stats.attrs)
			o.ObserveInt64(m.behind, w.millisBehind.Load(), w.stats.attrs)
		}
		streamAttrs := metric.WithAttributeSet(attribute.NewSet(attrSystem.String(systemKinesis), m.stream))
		o.ObserveInt64(m.held, int64(len(ws)), streamAttrs)
		if u, needed := fleet(); needed > 0 {
			o.ObserveFloat64(m.util, u, streamAttrs)
			o.ObserveInt64(m.needed, needed, streamAttrs)
		}
		return nil
	}, m.consumedC, m.acked, m.nacked, m.ackedLate, m.behind, m.inFlight, m.ifBytes, m.held, m.oldest, m.util, m.needed)
	if err != nil {
		return fmt.Errorf("kinesub: metrics: %w", err)
	}
	m.reg = r
	return nil
}

// stop ends the observed instruments' reports: a closed subscription holds no shard.
func (m *metrics) stop() {
	if m == nil || m.reg == nil {
		return
	}
	_ = m.reg.Unregister()
}

// shard returns the tallies of shard id, made on first use.
func (m *metrics) shard(id string) *shardStats {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.shards[id]
	if st == nil {
		base := []attribute.KeyValue{attrSystem.String(systemKinesis), m.stream, attrShard.String(id)}
		st = &shardStats{
			m:     m,
			id:    id,
			attrs: metric.WithAttributeSet(attribute.NewSet(base...)),
		}
		st.timed = []metric.RecordOption{st.attrs}
		m.shards[id] = st
	}
	return st
}

// handedAt returns where the time m was handed out is kept, or nil when m is not sampled or
// its shard not metered. A page's first delivery (lead) gets the slot of its offset: no other
// sampled delivery has it, as none comes before the lead.
func (m *Message) handedAt() *int64 {
	pg := m.pg
	if pg.handed == nil || (m.off%settleSample != 0 && m.off != pg.lead) {
		return nil
	}
	return &pg.handed[m.off/settleSample]
}

// consumed counts msg as delivered to the consumer and, for a sampled delivery, notes when,
// for the settle duration. It is called once msg is handed out; an Ack racing ahead of the
// note is counted but not timed.
func (m *metrics) consumed(msg *Message) {
	if m == nil || msg.pg.shard.stats == nil {
		return
	}
	msg.pg.shard.stats.consumed.Add(1)
	if h := msg.handedAt(); h != nil && m.settle.Enabled(context.Background()) {
		atomic.StoreInt64(h, time.Now().UnixNano())
	}
}

// consumedPage counts the deliveries of page f from index from on, handed out at once
// (Batches, Process), timing the sampled ones as consumed does. The sample's slots between
// their first offset and their last are stepped to rather than looked for (a slot whose offset
// is a record that was not delivered is never read).
func (m *metrics) consumedPage(f *fetched, from int) {
	pg := f.pg
	if m == nil || from >= f.n || pg.shard.stats == nil {
		return
	}
	pg.shard.stats.consumed.Add(int64(f.n - from))
	if pg.handed == nil || !m.settle.Enabled(context.Background()) {
		return
	}
	now := time.Now().UnixNano()
	first, last := f.at(from).off, f.at(f.n-1).off
	if first == pg.lead {
		atomic.StoreInt64(&pg.handed[first/settleSample], now)
	}
	for k := (first + settleSample - 1) / settleSample; k*settleSample <= last; k++ {
		atomic.StoreInt64(&pg.handed[k], now)
	}
}

// settled counts msg's Ack, or its Nack.
func (st *shardStats) settled(ctx context.Context, msg *Message, nack bool) {
	if st == nil {
		return
	}
	if nack {
		st.nacked.Add(1)
	} else {
		st.acked.Add(1)
	}
	if h := msg.handedAt(); h != nil {
		if at := atomic.LoadInt64(h); at != 0 {
			st.m.settle.Record(ctx, time.Since(time.Unix(0, at)).Seconds(), st.timed...)
		}
	}
}

// ackedLate counts an Ack that moved no checkpoint: it came too late (kinesub.records.acked_late).
func (st *shardStats) ackedLate() {
	if st != nil {
		st.late.Add(1)
	}
}

// transition counts a lease of this shard taken or given up; kind is one of the trans…
// values.
func (st *shardStats) transition(kind string) {
	if st == nil {
		return
	}
	st.m.transitions.Add(context.Background(), 1, metric.WithAttributeSet(attribute.NewSet(
		attrSystem.String(systemKinesis), st.m.stream, attrShard.String(st.id), attrTransition.String(kind))))
}

// droppedOutOfRange counts n user records of KPL aggregates dropped for lying outside the
// shard's hash-key range (kinesub.records.dropped).
func (st *shardStats) droppedOutOfRange(n int) {
	if st == nil {
		return
	}
	st.m.dropped.Add(context.Background(), int64(n), metric.WithAttributeSet(attribute.NewSet(
		attrSystem.String(systemKinesis), st.m.stream, attrShard.String(st.id), attrReason.String(reasonOutsideHashRange))))
}

// getRecordsFallback counts a GetRecords call that the direct path handed to the SDK's request
// path, for reason (kinesub.getrecords.fallbacks).
func (m *metrics) getRecordsFallback(ctx context.Context, reason string) {
	if m == nil {
		return
	}
	m.fallbacks.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(
		attrSystem.String(systemKinesis), m.stream, attrReason.String(reason))))
}

// leaseTaken counts a lease that this subscriber started reading.
func (m *metrics) leaseTaken(id string, stolen bool) {
	kind := transAcquired
	if stolen {
		kind = transStolen
	}
	m.shard(id).transition(kind)
}

// checkpointWritten counts a checkpoint write of shard id: ok, fenced (ok false) or error.
func (m *metrics) checkpointWritten(ctx context.Context, id string, ok bool, err error) {
	if m == nil {
		return
	}
	result := "ok"
	switch {
	case err != nil:
		result = "error"
	case !ok:
		result = "fenced"
	}
	m.checkpoints.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(
		attrSystem.String(systemKinesis), m.stream, attrShard.String(id), attrResult.String(result))))
}

// transReleasedOr is the transition of a lease released at Close (released) or for balance
// (handed_back).
func transReleasedOr(handedBack bool) string {
	if handedBack {
		return transHandedBack
	}
	return transReleased
}

// leaseCapacity counts the capacity units a call of the lease store's operation op consumed.
func (m *metrics) leaseCapacity(ctx context.Context, op string, units float64) {
	m.capacity.Add(ctx, units, metric.WithAttributes(attrSystem.String(systemKinesis), m.stream, attrOperation.String(op)))
}

// store returns s with its calls counted (kinesub.requests), the capacity they consume
// (kinesub.lease.consumed_capacity) and the results of its checkpoint writes
// (kinesub.checkpoint.writes) by shard: the key of a shard's lease is prefix and its id.
func (m *metrics) store(s lease.Store, prefix string) lease.Store {
	return telemetry.Store{Store: s, Requests: m.req, Capacity: m.leaseCapacity,
		Checkpointed: func(ctx context.Context, key string, ok bool, err error) {
			m.checkpointWritten(ctx, strings.TrimPrefix(key, prefix), ok, err)
		}}
}

// publisherMetrics are a Publisher's instruments; safe for concurrent use.
type publisherMetrics struct {
	req      *telemetry.Requests
	sent     metric.Int64Counter
	failures metric.Int64Counter
	attrs    metric.MeasurementOption
}

func newPublisherMetrics(mp metric.MeterProvider, stream string) (*publisherMetrics, error) {
	meter := mp.Meter(meterName)
	req, err := telemetry.NewRequests(meter, stream)
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
