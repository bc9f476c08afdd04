package kinesub

import (
	"context"
	"errors"
	"reflect"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing follows OpenTelemetry's messaging semantic conventions. They name no system for
// Kinesis: kinesub uses "aws_kinesis", after "aws_sqs". The producer's span context travels in
// each record's header envelope as W3C trace context ("traceparent", "tracestate"), written only
// when the Publisher traces, so that a Publisher without a tracer provider writes exactly the
// records it was given.
//
// Off by default: a Subscriber's hooks test one pointer (shardEnv.tracer) per record and
// allocate nothing; a Publisher's one pointer per call.

const tracerName = meterName

// The attributes of spans, besides messaging.system and messaging.destination.name (metrics.go).
const (
	attrPartition   = attribute.Key("messaging.destination.partition.id") // the shard id
	attrOpType      = attribute.Key("messaging.operation.type")
	attrMessageID   = attribute.Key("messaging.message.id") // the sequence number
	attrBatchCount  = attribute.Key("messaging.batch.message_count")
	attrSubSequence = attribute.Key("kinesub.sub_sequence_number") // a KPL user record's position
	attrSettled     = attribute.Key("kinesub.settled")             // ack, nack, or abandoned
)

// W3C trace context, the propagator of the header envelope.
var traceContext = propagation.TraceContext{}

// tracer starts the spans of one Subscriber or Publisher, on one stream.
type tracer struct {
	t      trace.Tracer
	stream string
	// The span names and the attributes every span of a kind carries, made once.
	sendName, receiveName, processName    string
	sendAttrs, receiveAttrs, processAttrs []attribute.KeyValue
}

// newTracer returns the tracer of stream, or nil (tracing off) for a nil provider.
func newTracer(tp trace.TracerProvider, stream string) *tracer {
	if tp == nil {
		return nil
	}
	base := func(op string) []attribute.KeyValue {
		return []attribute.KeyValue{attrSystem.String(systemKinesis), attrDestination.String(stream), attrOpType.String(op)}
	}
	return &tracer{
		t: tp.Tracer(tracerName), stream: stream,
		sendName: "send " + stream, receiveName: "receive " + stream, processName: "process " + stream,
		sendAttrs: base("send"), receiveAttrs: base("receive"), processAttrs: base("process"),
	}
}

// isNilProvider reports whether tp is nil or a nil pointer in the interface.
func isNilProvider(tp trace.TracerProvider) bool {
	v := reflect.ValueOf(tp)
	return tp == nil || v.Kind() == reflect.Pointer && v.IsNil()
}

// ---- Publishing ----

// traceHeaders is the trace context a Publisher writes into each record of a call: nil when it
// does not trace (or the span context is not valid), which leaves records as they were given.
type traceHeaders map[string]string

// startSend starts the producer span of a Publish (records 0) or PublishBatch call and returns
// its context and the headers that carry it.
func (t *tracer) startSend(ctx context.Context, records int) (context.Context, trace.Span, traceHeaders) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(t.sendAttrs...)}
	if records > 0 {
		opts = append(opts, trace.WithAttributes(attrBatchCount.Int(records)))
	}
	ctx, span := t.t.Start(ctx, t.sendName, opts...)
	h := traceHeaders{}
	traceContext.Inject(ctx, propagation.MapCarrier(h))
	if len(h) == 0 {
		h = nil
	}
	return ctx, span, h
}

// startPublish starts the producer span of a Publish call and returns its context and the
// record's headers with the span's trace context.
func (t *tracer) startPublish(ctx context.Context, headers map[string]string) (context.Context, trace.Span, map[string]string) {
	ctx, span, tc := t.startSend(ctx, 0)
	return ctx, span, tc.add(headers)
}

// endPublish ends the span of a Publish call that wrote the record as sequence.
func endPublish(span trace.Span, sequence string, err error) {
	if err == nil {
		span.SetAttributes(attrMessageID.String(sequence))
	}
	endSpan(span, err)
}

// add returns headers with the trace context added, in a copy: the caller's map is left alone.
// A header of the caller's with the name of one it adds (in any case) is replaced. With no trace
// context it returns headers itself.
func (h traceHeaders) add(headers map[string]string) map[string]string {
	if h == nil {
		return headers
	}
	out := make(map[string]string, len(headers)+len(h))
	for name, value := range headers {
		if _, ours := h[strings.ToLower(name)]; !ours {
			out[name] = value
		}
	}
	for name, value := range h {
		out[name] = value
	}
	return out
}

// endSpan ends span with the outcome err of its call.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// ---- Consuming ----

// producerContext returns the span context the producer wrote into m's headers; not valid when
// there is none.
func producerContext(m *Message) trace.SpanContext {
	h := m.Headers()
	if h["traceparent"] == "" {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(traceContext.Extract(context.Background(), propagation.MapCarrier(h)))
}

// recordAttrs are the attributes of m's own.
func recordAttrs(m *Message) []attribute.KeyValue {
	a := []attribute.KeyValue{attrMessageID.String(m.SequenceNumber()), attrPartition.String(m.ShardID())}
	if sub := m.SubSequenceNumber(); sub > 0 {
		a = append(a, attrSubSequence.Int(sub))
	}
	return a
}

// tracing returns the tracer of w's subscription, nil when it does not trace.
func (w *worker) tracing() *tracer { return w.env.tracing() }

// tracing returns the subscription's tracer, nil when it does not trace.
func (env *shardEnv) tracing() *tracer {
	if !tracingBuilt || env == nil { // env: nil for a worker of a unit test
		return nil
	}
	return env.tracer
}

// traceHandOutPage starts the receive spans of the deliveries of f from index from on, handed
// out together (Batches). The spans end when each is settled (Message.settle, Batch.Ack).
func traceHandOutPage(f *fetched, from int) {
	if t := f.pg.shard.tracing(); t != nil {
		for i := from; i < f.n; i++ {
			t.receive(f.at(i))
		}
	}
}

// receive starts m's receive span, a root linked to the producer's span, as m is handed out
// (handoff.take for Messages and All). m is not yet seen by the consumer: the goroutine that
// hands it out writes it. The span ends when m is settled (Message.settle, Batch.Ack) or taken
// back unseen (abandonSpan).
func (t *tracer) receive(m *Message) {
	x := m.extra()
	if x.span != nil {
		return
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithNewRoot(),
		trace.WithAttributes(t.receiveAttrs...), trace.WithAttributes(recordAttrs(m)...)}
	if psc := producerContext(m); psc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: psc}))
	}
	_, x.span = t.t.Start(context.Background(), t.receiveName, opts...)
}

// endReceive ends m's receive span, if it has one, as settled by Ack (nack false) or Nack,
// with the settle's error.
func (m *Message) endReceive(nack bool, err error) {
	if m.x == nil || m.x.span == nil || errors.Is(err, ErrAlreadySettled) {
		return
	}
	how := "ack"
	if nack {
		how = "nack"
	}
	m.x.span.SetAttributes(attrSettled.String(how))
	endSpan(m.x.span, err)
}

// abandonSpan ends the receive span of m, taken back before the consumer saw it (a seek, a lost
// lease, Close).
func abandonSpan(m *Message) {
	if m.x != nil && m.x.span != nil {
		m.x.span.SetAttributes(attrSettled.String("abandoned"))
		m.x.span.End()
	}
}

// traceProcess runs handle on m in a process span, a child of the producer's span when the
// record carries its context, ended when handle returns (or panics). handle's ctx carries the
// span, so that what it starts is the span's child.
func (t *tracer) process(ctx context.Context, m *Message, handle func(context.Context, *Message) error) (err error) {
	parent := ctx
	if psc := producerContext(m); psc.IsValid() {
		parent = trace.ContextWithRemoteSpanContext(ctx, psc)
	}
	_, span := t.t.Start(parent, t.processName, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(t.processAttrs...), trace.WithAttributes(recordAttrs(m)...))
	returned := false
	defer func() {
		if !returned {
			span.SetStatus(codes.Error, "handler panicked")
		}
		endSpan(span, err)
	}()
	err = handle(trace.ContextWithSpan(ctx, span), m)
	returned = true
	return err
}
