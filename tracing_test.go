package kinesub

import (
	"bytes"
	"context"
	"errors"
	"github.com/gostream/kinesub/internal/envelope"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/gostream/kinesub/kinesistest"
	"github.com/gostream/kinesub/lease"
)

// traced is a kinesistest stream of one shard with a recording tracer provider.
type traced struct {
	srv    *kinesistest.Server
	stream string
	rec    *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
}

func newTraced(t *testing.T, stream string) *traced {
	t.Helper()
	srv := kinesistest.NewServer()
	t.Cleanup(srv.Close)
	require.NoError(t, srv.CreateStream(context.Background(), stream, 1))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &traced{srv: srv, stream: stream, rec: rec, tp: tp}
}

func (tr *traced) subscribe(t *testing.T, opts ...Option) *Subscriber {
	t.Helper()
	opts = append([]Option{WithLeaseStore(lease.NewMemory()), WithStartAt(Horizon()),
		WithPollInterval(10 * time.Millisecond), WithTracerProvider(tr.tp)}, opts...)
	sub, err := Subscribe(context.Background(), tr.srv.Client(), tr.stream, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close(context.Background()) })
	return sub
}

// ended returns the ended spans named name.
func (tr *traced) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tr.rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attrsOf(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// requireAttrs checks the attributes every span of operation op on stream carries.
func requireAttrs(t *testing.T, s sdktrace.ReadOnlySpan, stream, op string) map[attribute.Key]attribute.Value {
	t.Helper()
	a := attrsOf(s)
	require.Equal(t, "aws_kinesis", a["messaging.system"].AsString(), s.Name())
	require.Equal(t, stream, a["messaging.destination.name"].AsString(), s.Name())
	require.Equal(t, op, a["messaging.operation.type"].AsString(), s.Name())
	return a
}

// TestTracingPublishToProcess: a producer's trace continues into Process's handler across the
// stream. Publish and PublishBatch each start a producer span whose context every record of the
// call carries; each handler call runs in a process span, a child of the record's producer
// span, carried by the handler's ctx and ended when the handler returns, with the record's
// sequence number and shard; a failed attempt's span records the error.
func TestTracingPublishToProcess(t *testing.T) {
	tr := newTraced(t, "traced-process")
	ctx := context.Background()
	pub, err := NewPublisher(tr.srv.Client(), tr.stream, WithPublishTracerProvider(tr.tp))
	require.NoError(t, err)
	seq, err := pub.Publish(ctx, "k1", []byte("one"), map[string]string{"message-id": "m1"})
	require.NoError(t, err)
	require.NoError(t, pub.PublishBatch(ctx, []Record{{PartitionKey: "k2", Data: []byte("two")}, {PartitionKey: "k3", Data: []byte("three")}}))

	sends := tr.ended("send " + tr.stream)
	require.Len(t, sends, 2)
	for _, s := range sends {
		require.Equal(t, trace.SpanKindProducer, s.SpanKind())
		requireAttrs(t, s, tr.stream, "send")
	}
	require.Equal(t, seq, attrsOf(sends[0])["messaging.message.id"].AsString())
	require.Equal(t, int64(2), attrsOf(sends[1])["messaging.batch.message_count"].AsInt64())
	producerOf := map[string]trace.SpanContext{"one": sends[0].SpanContext(), "two": sends[1].SpanContext(), "three": sends[1].SpanContext()}

	sub := tr.subscribe(t)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	handled := map[string]int{}
	inHandler := map[string]trace.SpanContext{}
	failOnce := true
	err = sub.Process(pctx, func(hctx context.Context, m *Message) error {
		d := string(m.Data())
		handled[d]++
		inHandler[d] = trace.SpanContextFromContext(hctx)
		if d == "two" && failOnce {
			failOnce = false
			return errors.New("try again")
		}
		if handled["one"] == 1 && handled["two"] == 2 && handled["three"] == 1 {
			cancel()
		}
		return nil
	}, WithConcurrency(1), WithRetryBackoff(time.Millisecond, time.Millisecond))
	require.ErrorIs(t, err, context.Canceled, "Process returns its ctx's cause")
	require.Equal(t, map[string]int{"one": 1, "two": 2, "three": 1}, handled)

	procs := tr.ended("process " + tr.stream)
	require.Len(t, procs, 4) // "two" twice
	failed := 0
	for _, s := range procs {
		require.Equal(t, trace.SpanKindConsumer, s.SpanKind())
		a := requireAttrs(t, s, tr.stream, "process")
		require.Equal(t, "shardId-000000000000", a["messaging.destination.partition.id"].AsString())
		require.NotEmpty(t, a["messaging.message.id"].AsString())
		var data string
		for d, sc := range inHandler {
			if sc.SpanID() == s.SpanContext().SpanID() {
				data = d
			}
		}
		if data == "" { // the first attempt of "two": its handler's span was replaced by the retry's
			data = "two"
			require.Equal(t, codes.Error, s.Status().Code)
			require.Equal(t, "try again", s.Status().Description)
			failed++
		} else {
			require.Equal(t, codes.Unset, s.Status().Code, data)
		}
		require.Equal(t, producerOf[data].TraceID(), s.SpanContext().TraceID(), data)
		require.Equal(t, producerOf[data].SpanID(), s.Parent().SpanID(), data)
		require.True(t, s.Parent().IsRemote(), data)
	}
	require.Equal(t, 1, failed)
	require.Empty(t, tr.ended("receive "+tr.stream), "Process makes process spans only")
}

// TestTracingPublishToMessages: a record delivered to Messages, All or Batches has a receive
// span, linked to its producer's span, ended at its Ack or Nack (or Batch.Ack) and not before.
func TestTracingPublishToMessages(t *testing.T) {
	for _, style := range []string{"messages", "all", "batches"} {
		t.Run(style, func(t *testing.T) {
			tr := newTraced(t, "traced-"+style)
			ctx := context.Background()
			pub, err := NewPublisher(tr.srv.Client(), tr.stream, WithPublishTracerProvider(tr.tp))
			require.NoError(t, err)
			require.NoError(t, pub.PublishBatch(ctx, []Record{{PartitionKey: "k", Data: []byte("a")}, {PartitionKey: "k", Data: []byte("b")}}))
			send := tr.ended("send " + tr.stream)
			require.Len(t, send, 1)

			sub := tr.subscribe(t)
			var got []*Message
			switch style {
			case "messages":
				for len(got) < 2 {
					m, ok := <-sub.Messages()
					require.True(t, ok)
					got = append(got, m)
				}
			case "all":
				for m, err := range sub.All(ctx) {
					require.NoError(t, err)
					if got = append(got, m); len(got) == 2 {
						break
					}
				}
			case "batches":
				for b, err := range sub.Batches(ctx) {
					require.NoError(t, err)
					if got = append(got, b.Messages()...); len(got) == 2 {
						break
					}
				}
			}
			require.Empty(t, tr.ended("receive "+tr.stream), "no span ends before its record is settled")
			if style == "batches" {
				require.NoError(t, got[0].Nack(ctx))
				require.NoError(t, (&Batch{msgs: got}).Ack(ctx))
			} else {
				require.NoError(t, got[0].Nack(ctx))
				require.NoError(t, got[1].Ack(ctx))
			}
			recv := tr.ended("receive " + tr.stream)
			require.Len(t, recv, 2)
			for i, s := range recv {
				require.Equal(t, trace.SpanKindConsumer, s.SpanKind())
				a := requireAttrs(t, s, tr.stream, "receive")
				require.Equal(t, got[i].SequenceNumber(), a["messaging.message.id"].AsString())
				require.Equal(t, got[i].ShardID(), a["messaging.destination.partition.id"].AsString())
				require.Equal(t, []string{"nack", "ack"}[i], a["kinesub.settled"].AsString())
				require.False(t, s.Parent().IsValid(), "a receive span is a root")
				require.Len(t, s.Links(), 1)
				require.Equal(t, send[0].SpanContext().TraceID(), s.Links()[0].SpanContext.TraceID())
				require.Equal(t, send[0].SpanContext().SpanID(), s.Links()[0].SpanContext.SpanID())
			}
		})
	}
}

// TestPublishWithoutTracerWritesDataAsGiven: without WithPublishTracerProvider a record is
// stored byte for byte as given (no envelope when it has no headers); with it, the record
// carries the trace context in its envelope, its own headers are kept, and the caller's map is
// left as it was.
func TestPublishWithoutTracerWritesDataAsGiven(t *testing.T) {
	tr := newTraced(t, "traced-plain")
	ctx := context.Background()
	client := tr.srv.Client()
	plain, err := NewPublisher(client, tr.stream)
	require.NoError(t, err)
	tracing, err := NewPublisher(client, tr.stream, WithPublishTracerProvider(tr.tp))
	require.NoError(t, err)
	data := []byte("exactly these bytes")
	headers := map[string]string{"message-id": "m1", "TraceParent": "stale"}
	_, err = plain.Publish(ctx, "k", data, nil)
	require.NoError(t, err)
	require.NoError(t, plain.PublishBatch(ctx, []Record{{PartitionKey: "k", Data: data}}))
	_, err = tracing.Publish(ctx, "k", data, headers)
	require.NoError(t, err)
	require.NoError(t, tracing.PublishBatch(ctx, []Record{{PartitionKey: "k", Data: data}}))
	require.Equal(t, map[string]string{"message-id": "m1", "TraceParent": "stale"}, headers)

	it, err := client.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(tr.stream),
		ShardId: aws.String("shardId-000000000000"), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
	require.NoError(t, err)
	out, err := client.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
	require.NoError(t, err)
	require.Len(t, out.Records, 4)
	require.Equal(t, data, out.Records[0].Data, "Publish without a tracer")
	require.Equal(t, data, out.Records[1].Data, "PublishBatch without a tracer")
	sends := tr.ended("send " + tr.stream)
	require.Len(t, sends, 2)
	for i, r := range out.Records[2:] {
		require.True(t, bytes.HasPrefix(r.Data, []byte(envelope.Magic)))
		h, payload := envelope.Decode(r.Data)
		require.Equal(t, data, payload)
		sc := sends[i].SpanContext()
		want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
		require.Equal(t, want, h["traceparent"])
		if i == 0 {
			require.Equal(t, "m1", h["message-id"])
			require.Len(t, h, 2, "the caller's TraceParent is replaced")
		} else {
			require.Equal(t, []string{"traceparent"}, slices.Collect(maps.Keys(h)))
		}
	}
}

// TestTracerProviderNil: a nil provider is an invalid option, for both.
func TestTracerProviderNil(t *testing.T) {
	srv := kinesistest.NewServer()
	t.Cleanup(srv.Close)
	_, err := Subscribe(context.Background(), srv.Client(), "s", WithLeaseStore(lease.NewMemory()), WithTracerProvider(nil))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "WithTracerProvider")
	var tp *sdktrace.TracerProvider
	_, err = NewPublisher(srv.Client(), "s", WithPublishTracerProvider(tp))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "WithPublishTracerProvider")
}

// TestTracingAbandonedAndPanic: the receive span of a record the Messages dispatcher had
// started handing out (its send waiting for the consumer), and that a Seek takes back before
// the consumer received it, ends as abandoned; a handler that panics ends its process span with
// an error status.
func TestTracingAbandonedAndPanic(t *testing.T) {
	tr := newTraced(t, "traced-abandoned")
	ctx := context.Background()
	pub, err := NewPublisher(tr.srv.Client(), tr.stream, WithPublishTracerProvider(tr.tp))
	require.NoError(t, err)
	recs := make([]Record, 20)
	for i := range recs {
		recs[i] = Record{PartitionKey: "k", Data: []byte{byte('a' + i)}}
	}
	require.NoError(t, pub.PublishBatch(ctx, recs))

	sub := tr.subscribe(t)
	msgs := sub.Messages()
	started := func() int {
		n := 0
		for _, s := range tr.rec.Started() {
			if s.Name() == "receive "+tr.stream {
				n++
			}
		}
		return n
	}
	eventually(t, 30*time.Second, "the dispatcher hands a record out", func() bool { return started() >= 1 })
	require.NoError(t, sub.Seeker().Seek(ctx, Horizon()))
	abandoned := 0
	for _, s := range tr.ended("receive " + tr.stream) {
		require.Equal(t, "abandoned", attrsOf(s)["kinesub.settled"].AsString())
		abandoned++
	}
	require.Positive(t, abandoned, "records taken back by the seek")
	// The records come again, from the horizon, with new spans.
	m := <-msgs
	require.Equal(t, "a", string(m.Data()))
	require.NoError(t, m.Ack(ctx))
	require.NoError(t, sub.Close(ctx))

	// A panicking handler.
	tr2 := newTraced(t, "traced-panic")
	_, err = tr2.srv.Put(ctx, tr2.stream, "k", []byte("boom"))
	require.NoError(t, err)
	sub2 := tr2.subscribe(t)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	panicked := false
	require.ErrorIs(t, sub2.Process(pctx, func(context.Context, *Message) error {
		if !panicked {
			panicked = true
			panic("boom")
		}
		cancel()
		return nil
	}, WithConcurrency(1), WithRetryBackoff(time.Millisecond, time.Millisecond)), context.Canceled)
	procs := tr2.ended("process " + tr2.stream)
	require.Len(t, procs, 2)
	require.Equal(t, codes.Error, procs[0].Status().Code)
	require.Equal(t, "handler panicked", procs[0].Status().Description)
	require.Equal(t, codes.Unset, procs[1].Status().Code)
}
