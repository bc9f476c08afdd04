package efoevents

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/recordsjson/recordsjsontest"
	"github.com/gostream/kinesub/internal/testenv"
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
		HTTPClient: recordsjsontest.Doer(func(r *http.Request) (*http.Response, error) {
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
	out, err = streamClient(t, msgs...).SubscribeToShard(context.Background(), in, Options(fast, stop))
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
		require.Equal(t, fmt.Sprintf("%T", recordsjsontest.UnwrapAll(sdk.err)), fmt.Sprintf("%T", recordsjsontest.UnwrapAll(ours.err)))
		require.Equal(t, sdk.err.Error(), ours.err.Error())
	}
}

// genEvent is a generated GetRecords answer made a SubscribeToShardEvent's payload.
func genEvent(rng *rand.Rand) string {
	return strings.ReplaceAll(recordsjsontest.GenAnswer(rng), `"NextShardIterator"`, `"ContinuationSequenceNumber"`)
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

// fallBackStreams are streams of an event, or two, and a message kinesub leaves to the SDK
// (exceptions, errors, unknown events, bad checksums, headers and JSON it does not read, a
// stream cut short).
func fallBackStreams(t testing.TB) map[string][][]byte {
	ev1 := shardEvent(t, `{"Records":[{"SequenceNumber":"1","PartitionKey":"a","Data":"eA==","ApproximateArrivalTimestamp":1.7e9}],"ContinuationSequenceNumber":"1","MillisBehindLatest":0}`)
	ev2 := shardEvent(t, `{"Records":[],"ContinuationSequenceNumber":"2","MillisBehindLatest":5}`)
	corrupt := func(b []byte, i int) []byte {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		return c
	}
	return map[string][][]byte{
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
}

// TestEventsFallBack: messages kinesub leaves to the SDK get the SDK's events and errors, in
// order with the events read before and after them.
func TestEventsFallBack(t *testing.T) {
	for name, msgs := range fallBackStreams(t) {
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
	srv := kinesistest.NewServer(kinesistest.WithIdleEventInterval(50*time.Millisecond), kinesistest.WithStatusDelay(0))
	t.Cleanup(srv.Close)
	c := srv.Client()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, srv.CreateStream(ctx, "events", 1))
	sum, err := c.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("events")})
	require.NoError(t, err)
	reg, err := c.RegisterStreamConsumer(ctx, &kinesis.RegisterStreamConsumerInput{
		StreamARN: sum.StreamDescriptionSummary.StreamARN, ConsumerName: aws.String("events")})
	require.NoError(t, err)
	for i := range 20 {
		_, err := srv.Put(ctx, "events", fmt.Sprintf("key-%d", i%2), fmt.Appendf(nil, "record-%d", i))
		require.NoError(t, err)
	}
	fast, stop := make(chan *types.SubscribeToShardEvent), make(chan struct{})
	out, err := c.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{ConsumerARN: reg.Consumer.ConsumerARN,
		ShardId: aws.String("shardId-000000000000"), StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon}},
		Options(fast, stop))
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
	deadline := time.Now().Add(10 * time.Second) // a failure bound only
	for srv.Subscriptions() != 0 || testenv.EventStreamReaders() != 0 {
		require.True(t, time.Now().Before(deadline), "the subscription and its reader ended: %d subscriptions, %d readers", srv.Subscriptions(), testenv.EventStreamReaders())
		time.Sleep(5 * time.Millisecond) // polls the condition
	}
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

// repairEvents returns a copy of stream, a fuzzer's input, whose messages pass the checks that
// repair names, so that the fuzzer reaches headers and payloads past checksums it cannot
// compute: repair&4 makes a message's total length that is too short or runs past the end the
// rest of the stream, repair&8 brings a headers length longer than its message allows within
// it, repair&1 rewrites each prelude's checksum and repair&2 each message's.
func repairEvents(stream []byte, repair uint8) []byte {
	out := bytes.Clone(stream)
	for b := out; len(b) >= eventPrelude; {
		total := binary.BigEndian.Uint32(b[0:4])
		if repair&4 != 0 && len(b) >= eventOverhead && (total < eventOverhead || uint64(total) > uint64(len(b))) {
			total = uint32(len(b))
			binary.BigEndian.PutUint32(b[0:4], total)
		}
		if h := binary.BigEndian.Uint32(b[4:8]); repair&8 != 0 && total >= eventOverhead && h > total-eventOverhead {
			binary.BigEndian.PutUint32(b[4:8], h%(total-eventOverhead+1))
		}
		if repair&1 != 0 {
			binary.BigEndian.PutUint32(b[8:12], crc32.ChecksumIEEE(b[:8]))
		}
		if total < eventOverhead || uint64(total) > uint64(len(b)) {
			break
		}
		if repair&2 != 0 {
			binary.BigEndian.PutUint32(b[total-4:total], crc32.ChecksumIEEE(b[:total-4]))
		}
		b = b[total:]
	}
	return out
}

// eventSeeds adds the streams of TestEventsFallBack and generated events to a fuzz target's
// corpus, as they are and with all repairs.
func eventSeeds(f *testing.F) {
	streams := fallBackStreams(f)
	for _, name := range slices.Sorted(maps.Keys(streams)) {
		stream := bytes.Join(streams[name], nil)
		f.Add(stream, uint8(0))
		f.Add(stream, uint8(15))
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for range 5 {
		f.Add(shardEvent(f, genEvent(rng)), uint8(15))
	}
	f.Add(eventMessage(f, "", "", eventstream.StringValue("")), uint8(0))
	f.Add([]byte{}, uint8(0))
}

// typeHeader returns a type header of an SDK-decoded message as eventHeaders returns it: its
// string value, nil when there is none. ok is false when its value is not a string.
func typeHeader(m eventstream.Message, name string) (value []byte, ok bool) {
	switch v := m.Headers.Get(name).(type) {
	case nil:
		return nil, true
	case eventstream.StringValue:
		return append([]byte{}, v...), true
	default:
		return nil, false
	}
}

// FuzzEventFrames holds kinesub's reading of event-stream messages (preludes, checksums,
// headers, payloads) to the SDK's eventstream decoder, message by message along a stream.
// Every message kinesub takes, the SDK decodes alike: same length, same message and event
// types, same payload; so every message the SDK refuses, kinesub leaves to it. And every
// message the SDK's encoder could have written, whose type headers are strings, kinesub takes:
// it leaves to the SDK only messages it never sends (a type header that is not a string, a
// duplicate header, a lone byte ending the headers), which the SDK then reads as usual.
func FuzzEventFrames(f *testing.F) {
	eventSeeds(f)
	f.Fuzz(func(t *testing.T, stream []byte, repair uint8) {
		stream = repairEvents(stream, repair)
		p := &eventsProtocol{br: bufio.NewReaderSize(bytes.NewReader(stream), eventBuffer)}
		in := bytes.NewReader(stream)
		dec := eventstream.NewDecoder()
		for n := 0; ; n++ {
			raw, whole, err := p.read()
			var msgType, eventType, payload []byte
			taken := err == nil && whole
			if taken {
				msgType, eventType, payload, taken = eventFrame(raw)
			}
			left := in.Len()
			m, sdkErr := dec.Decode(in, nil)
			if sdkErr != nil {
				if taken {
					t.Fatalf("message %d: kinesub takes a message the SDK refuses: %v", n, sdkErr)
				}
				return
			}
			if !whole || err != nil {
				t.Fatalf("message %d: kinesub refuses the prelude of a message the SDK reads (%v)", n, err)
			}
			if !taken {
				var canonical bytes.Buffer
				headersEnd := eventPrelude + int(binary.BigEndian.Uint32(raw[4:8]))
				_, mtOK := typeHeader(m, ":message-type")
				_, etOK := typeHeader(m, ":event-type")
				if eventstream.EncodeHeaders(&canonical, m.Headers) == nil && bytes.Equal(canonical.Bytes(), raw[eventPrelude:headersEnd]) && mtOK && etOK {
					t.Fatalf("message %d: kinesub leaves to the SDK a message the SDK's encoder writes: %x", n, raw)
				}
				return
			}
			require.Equal(t, len(raw), left-in.Len(), "message %d: length", n)
			for _, h := range []struct {
				name string
				ours []byte
			}{{":message-type", msgType}, {":event-type", eventType}} {
				sdk, _ := typeHeader(m, h.name)
				if (sdk == nil) != (h.ours == nil) || !bytes.Equal(sdk, h.ours) {
					t.Fatalf("message %d: %s: the SDK reads %q, kinesub %q", n, h.name, sdk, h.ours)
				}
			}
			require.Equal(t, string(m.Payload), string(payload), "message %d: payload", n)
		}
	})
}

// FuzzEventStream reads the fuzzer's streams, repaired as FuzzEventFrames repairs them, as a
// subscription reads them, through the SDK alone and through kinesub: the same events in the
// same order, and the same end.
func FuzzEventStream(f *testing.F) {
	eventSeeds(f)
	f.Fuzz(func(t *testing.T, stream []byte, repair uint8) {
		sdk, ours := readBoth(t, repairEvents(stream, repair))
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
			out, err := client.SubscribeToShard(context.Background(), in, Options(fast, stop))
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
