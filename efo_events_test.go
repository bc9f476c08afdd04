package kinesub

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/kinesistest"
)

// eventMessage encodes one event-stream message with the given headers (name, value pairs)
// and payload.
func eventMessage(t testing.TB, payload string, headers ...any) []byte {
	t.Helper()
	var msg eventstream.Message
	for i := 0; i < len(headers); i += 2 {
		var v eventstream.Value
		switch x := headers[i+1].(type) {
		case string:
			v = eventstream.StringValue(x)
		case eventstream.Value:
			v = x
		default:
			t.Fatalf("header value %T", x)
		}
		msg.Headers.Set(headers[i].(string), v)
	}
	msg.Payload = []byte(payload)
	var b bytes.Buffer
	require.NoError(t, eventstream.NewEncoder().Encode(&b, msg))
	return b.Bytes()
}

// shardEvent encodes a SubscribeToShardEvent message with payload.
func shardEvent(t testing.TB, payload string) []byte {
	return eventMessage(t, payload, ":message-type", "event", ":event-type", "SubscribeToShardEvent", ":content-type", "application/json")
}

// streamClient is a Kinesis client whose SubscribeToShard calls are answered over HTTP/2
// with an initial response followed by msgs.
func streamClient(t testing.TB, msgs ...[]byte) *kinesis.Client {
	body := eventMessage(t, "{}", ":message-type", "event", ":event-type", "initial-response", ":content-type", "application/json")
	for _, m := range msgs {
		body = append(body, m...)
	}
	return kinesis.New(kinesis.Options{
		Region:      "us-east-1",
		Credentials: aws.AnonymousCredentials{},
		HTTPClient: httpDoer(func(r *http.Request) (*http.Response, error) {
			return &http.Response{
				StatusCode: 200, Proto: "HTTP/2.0", ProtoMajor: 2, Request: r,
				Header: http.Header{"Content-Type": {"application/vnd.amazon.eventstream"}},
				Body:   io.NopCloser(bytes.NewReader(body)), ContentLength: -1,
			}, nil
		}),
		RetryMaxAttempts: 1,
	})
}

// streamed is what a subscription delivered: its events (a SubscribeToShardEvent's value, or
// another member of the union) in order, and its stream's error.
type streamed struct {
	events []any
	err    error
	fast   int // events that came through eventsProtocol's channel
}

// readBoth reads the stream msgs make through the SDK alone and through eventsProtocol, as
// fanOut reads it: SubscribeToShardEvents on its channel, the rest on the SDK's.
func readBoth(t testing.TB, msgs ...[]byte) (sdk, ours streamed) {
	t.Helper()
	in := &kinesis.SubscribeToShardInput{ConsumerARN: aws.String("arn:aws:kinesis:us-east-1:123456789012:stream/s/consumer/c:1"), ShardId: aws.String("shardId-000000000000"),
		StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeLatest}}
	member := func(ev types.SubscribeToShardEventStream) any {
		if m, ok := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent); ok {
			return m.Value
		}
		return ev
	}
	out, err := streamClient(t, msgs...).SubscribeToShard(context.Background(), in)
	require.NoError(t, err)
	for ev := range out.GetStream().Events() {
		sdk.events = append(sdk.events, member(ev))
	}
	sdk.err = out.GetStream().Err()
	_ = out.GetStream().Close()

	fast, stop := make(chan *types.SubscribeToShardEvent), make(chan struct{})
	defer close(stop)
	out, err = streamClient(t, msgs...).SubscribeToShard(context.Background(), in, fanOutEvents(fast, stop))
	require.NoError(t, err)
	defer out.GetStream().Close()
	timeout := time.After(10 * time.Second) // a failure bound only: the stream is in memory
	for {
		select {
		case ev := <-fast:
			ours.events = append(ours.events, *ev)
			ours.fast++
			continue
		case ev, ok := <-out.GetStream().Events():
			if ok {
				ours.events = append(ours.events, member(ev))
				continue
			}
		case <-timeout:
			t.Fatal("the stream did not end")
		}
		break
	}
	ours.err = out.GetStream().Err()
	return sdk, ours
}

// requireSame fails unless both reads delivered the same events and ended alike.
func requireSame(t testing.TB, sdk, ours streamed) {
	t.Helper()
	require.Equal(t, sdk.events, ours.events)
	require.Equal(t, sdk.err == nil, ours.err == nil, "sdk: %v; ours: %v", sdk.err, ours.err)
	if sdk.err != nil {
		require.Equal(t, fmt.Sprintf("%T", unwrapAll(sdk.err)), fmt.Sprintf("%T", unwrapAll(ours.err)))
		require.Equal(t, sdk.err.Error(), ours.err.Error())
	}
}

// genEvent is a generated GetRecords answer made a SubscribeToShardEvent's payload.
func genEvent(rng *rand.Rand) string {
	return strings.ReplaceAll(genAnswer(rng), `"NextShardIterator"`, `"ContinuationSequenceNumber"`)
}

// TestEventsDecodeAsSDK holds kinesub's reading of SubscribeToShard events to the SDK's on
// generated streams of generated events: the same events, in the same order.
func TestEventsDecodeAsSDK(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for n := range 100 {
		var msgs [][]byte
		var payloads []string
		for range 1 + rng.IntN(5) {
			p := genEvent(rng)
			payloads = append(payloads, p)
			msgs = append(msgs, shardEvent(t, p))
		}
		sdk, ours := readBoth(t, msgs...)
		require.NoError(t, sdk.err, "stream %d", n)
		require.Len(t, sdk.events, len(msgs), "stream %d", n)
		requireSame(t, sdk, ours)
		require.Equal(t, len(msgs), ours.fast, "stream %d: every event decoded by kinesub", n)
	}
}

// TestEventsFallBack: messages kinesub leaves to the SDK (exceptions, errors, unknown events,
// bad checksums, headers and JSON it does not read, a stream cut short) get the SDK's events
// and errors, in order with the events read before and after them.
func TestEventsFallBack(t *testing.T) {
	ev1 := shardEvent(t, `{"Records":[{"SequenceNumber":"1","PartitionKey":"a","Data":"eA==","ApproximateArrivalTimestamp":1.7e9}],"ContinuationSequenceNumber":"1","MillisBehindLatest":0}`)
	ev2 := shardEvent(t, `{"Records":[],"ContinuationSequenceNumber":"2","MillisBehindLatest":5}`)
	corrupt := func(b []byte, i int) []byte {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		return c
	}
	cases := map[string][][]byte{
		"in use": {ev1, eventMessage(t, `{"message":"another subscription"}`,
			":message-type", "exception", ":exception-type", "ResourceInUseException", ":content-type", "application/json")},
		"internal failure": {ev1, ev2, eventMessage(t, `{"message":"boom"}`,
			":message-type", "exception", ":exception-type", "InternalFailureException", ":content-type", "application/json")},
		"unknown exception": {ev1, eventMessage(t, `{"message":"new"}`,
			":message-type", "exception", ":exception-type", "SomethingNewException", ":content-type", "application/json")},
		"error message":   {ev1, eventMessage(t, "", ":message-type", "error", ":error-code", "InternalError", ":error-message", "oops")},
		"unknown event":   {ev1, eventMessage(t, `{"x":1}`, ":message-type", "event", ":event-type", "SomethingNew", ":content-type", "application/json"), ev2},
		"bad message crc": {ev1, corrupt(ev2, len(ev2)-20)},
		"bad prelude crc": {ev1, corrupt(ev2, 9)},
		"zero length":     {ev1, make([]byte, 16)},
		"cut short":       {ev1, ev2[:len(ev2)-3]},
		"cut in prelude":  {ev1, ev2[:5]},
		"escaped member":  {ev1, shardEvent(t, `{"Rec\u006frds":[{"SequenceNumber":"3"}],"ContinuationSequenceNumber":"3"}`), ev2},
		"bad json":        {ev1, shardEvent(t, `{"Records":[`), ev2},
		"empty payload":   {ev1, shardEvent(t, ""), ev2},
		"message type not a string": {ev1, eventMessage(t, `{"Records":[]}`,
			":message-type", eventstream.Int32Value(1), ":event-type", "SubscribeToShardEvent"), ev2},
		"other headers": {ev1, eventMessage(t, `{"Records":[],"ContinuationSequenceNumber":"9"}`,
			":message-type", "event", ":event-type", "SubscribeToShardEvent", "a", eventstream.BoolValue(true),
			"b", eventstream.BoolValue(false), "c", eventstream.Int8Value(3), "d", eventstream.Int16Value(4),
			"e", eventstream.Int64Value(5), "f", eventstream.BytesValue([]byte{1, 2}),
			"g", eventstream.TimestampValue(time.UnixMilli(1700000000000)), "h", eventstream.UUIDValue{1, 2, 3}), ev2},
		"header order": {ev1, append(eventMessage(t, `{"Records":[]}`, ":message-type", "event", ":event-type", "SubscribeToShardEvent"),
			eventMessage(t, `{"Records":[]}`, ":event-type", "SubscribeToShardEvent", ":message-type", "event")...), ev2},
	}
	for name, msgs := range cases {
		t.Run(name, func(t *testing.T) {
			sdk, ours := readBoth(t, msgs...)
			requireSame(t, sdk, ours)
			require.NotEmpty(t, sdk.events)
			require.Positive(t, ours.fast, "the first event decoded by kinesub")
		})
	}
}

// TestEventsLarge: events larger than the read buffer and than the buffer kept between events
// decode as the SDK's, and so do the small ones after them.
func TestEventsLarge(t *testing.T) {
	event := func(records int) []byte {
		var b strings.Builder
		b.WriteString(`{"Records":[`)
		for i := range records {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"SequenceNumber":"%d","PartitionKey":"k","Data":"%s"}`, i, strings.Repeat("QUFB", 128))
		}
		fmt.Fprintf(&b, `],"ContinuationSequenceNumber":"%d","MillisBehindLatest":0}`, records)
		return shardEvent(t, b.String())
	}
	big, mid := event(3000), event(30)
	require.Greater(t, len(big), maxKeptMessage)
	require.Greater(t, len(mid), eventBuffer)
	small := shardEvent(t, `{"Records":[],"ContinuationSequenceNumber":"3000","MillisBehindLatest":0}`)
	sdk, ours := readBoth(t, big, small, big, mid, small)
	require.NoError(t, sdk.err)
	requireSame(t, sdk, ours)
	require.Len(t, sdk.events, 5)
	require.Equal(t, 5, ours.fast)
}

// TestEventsOverHTTP2: against kinesistest, over TLS and HTTP/2 with the SDK's own transport,
// the events of a subscription come through kinesub's decoding, records and continuations
// intact, and ending the subscription ends the SDK's reader.
func TestEventsOverHTTP2(t *testing.T) {
	s, srv := newFanOutStream(t, 1, kinesistest.WithStatusDelay(0))
	reg, err := s.c.RegisterStreamConsumer(context.Background(), &kinesis.RegisterStreamConsumerInput{
		StreamARN: aws.String(streamARN(t, s)), ConsumerName: aws.String("events")})
	require.NoError(t, err)
	s.publish(20, 2)
	fast, stop := make(chan *types.SubscribeToShardEvent), make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, err := s.c.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{ConsumerARN: reg.Consumer.ConsumerARN,
		ShardId: aws.String(s.shardIDs()[0]), StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon}},
		fanOutEvents(fast, stop))
	require.NoError(t, err)
	var got []string
	last := ""
	timeout := time.After(10 * time.Second) // a failure bound only
	for len(got) < 20 {
		select {
		case ev := <-fast:
			for _, r := range ev.Records {
				got = append(got, string(r.Data))
				last = aws.ToString(r.SequenceNumber)
			}
			if len(ev.Records) > 0 {
				require.Equal(t, last, aws.ToString(ev.ContinuationSequenceNumber))
			}
		case ev, ok := <-out.GetStream().Events():
			t.Fatalf("an event left to the SDK: %T %v (stream error: %v)", ev, ok, out.GetStream().Err())
		case <-timeout:
			t.Fatalf("%d of 20 records", len(got))
		}
	}
	require.Len(t, got, 20)
	close(stop)
	cancel()
	_ = out.GetStream().Close()
	eventually(t, 10*time.Second, "the subscription and its reader ended", func() bool {
		return srv.Subscriptions() == 0 && eventStreamReaders() == 0
	})
}

// TestEventsFastPathTaken: kinesub decodes ordinary events itself, and the SDK's channel stays
// idle until the stream ends.
func TestEventsFastPathTaken(t *testing.T) {
	raw := shardEvent(t, `{"Records":[{"SequenceNumber":"7","PartitionKey":"k","Data":"eA=="}],"ContinuationSequenceNumber":"7","MillisBehindLatest":0}`)
	ev := decodeEventMessage(raw)
	require.NotNil(t, ev)
	require.Equal(t, "7", aws.ToString(ev.ContinuationSequenceNumber))
	require.Equal(t, []byte("x"), ev.Records[0].Data)
	require.Nil(t, decodeEventMessage(eventMessage(t, `{"message":"x"}`, ":message-type", "exception", ":exception-type", "ResourceInUseException")))
}

// FuzzEventsDecode holds the reading of an event's payload to the SDK's on arbitrary JSON.
func FuzzEventsDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 10 {
		f.Add(genEvent(rng))
	}
	f.Fuzz(func(t *testing.T, payload string) {
		sdk, ours := readBoth(t, shardEvent(t, payload))
		requireSame(t, sdk, ours)
	})
}

// BenchmarkDecodeEvent reads single-record events, as a subscription receives them while
// records trickle in, through the SDK and through kinesub.
func BenchmarkDecodeEvent(b *testing.B) {
	const n = 1000
	var msgs [][]byte
	for i := range n {
		msgs = append(msgs, shardEvent(b, fmt.Sprintf(`{"Records":[{"SequenceNumber":"49%042d","ApproximateArrivalTimestamp":1.764760000123E9,"Data":"%s","PartitionKey":"key-%d"}],"ContinuationSequenceNumber":"49%042d","MillisBehindLatest":0}`,
			i, strings.Repeat("QUFB", 33), i, i)))
	}
	in := &kinesis.SubscribeToShardInput{ConsumerARN: aws.String("arn:aws:kinesis:us-east-1:123456789012:stream/s/consumer/c:1"), ShardId: aws.String("shardId-000000000000"),
		StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeLatest}}
	client := streamClient(b, msgs...)
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			out, err := client.SubscribeToShard(context.Background(), in)
			require.NoError(b, err)
			got := 0
			for range out.GetStream().Events() {
				got++
			}
			require.Equal(b, n, got)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
	})
	b.Run("kinesub", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			fast, stop := make(chan *types.SubscribeToShardEvent), make(chan struct{})
			out, err := client.SubscribeToShard(context.Background(), in, fanOutEvents(fast, stop))
			require.NoError(b, err)
			got := 0
		read:
			for {
				select {
				case <-fast:
					got++
				case _, ok := <-out.GetStream().Events():
					if !ok {
						break read
					}
				}
			}
			close(stop)
			require.Equal(b, n, got)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
	})
}
