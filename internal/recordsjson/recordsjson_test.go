package recordsjson

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"github.com/gostream/kinesub/internal/recordsjson/recordsjsontest"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/smithy-go/middleware"
	"github.com/stretchr/testify/require"
)

// answerClient is a Kinesis client whose every call is answered with body and status.
func answerClient(status int, body *string) *kinesis.Client {
	return kinesis.New(kinesis.Options{
		Region:      "us-east-1",
		Credentials: aws.AnonymousCredentials{},
		HTTPClient: recordsjsontest.Doer(func(r *http.Request) (*http.Response, error) {
			return &http.Response{
				StatusCode: status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: r,
				Header:        http.Header{"Content-Type": {"application/x-amz-json-1.1"}},
				Body:          io.NopCloser(strings.NewReader(*body)),
				ContentLength: int64(len(*body)),
			}, nil
		}),
		RetryMaxAttempts: 1,
	})
}

// decodeBoth decodes body with the SDK's decoder and with kinesub's, and returns both.
func decodeBoth(t *testing.T, status int, body string) (sdk, ours *kinesis.GetRecordsOutput, sdkErr, ourErr error) {
	t.Helper()
	client := answerClient(status, &body)
	in := &kinesis.GetRecordsInput{ShardIterator: aws.String("it")}
	sdk, sdkErr = client.GetRecords(context.Background(), in)
	ours, ourErr = client.GetRecords(context.Background(), in, Fast)
	// As the poller calls, with a limit (here a small one: the arrays made for it grow).
	limited, limitedErr := client.GetRecords(context.Background(), in, UpTo(2))
	for _, o := range []*kinesis.GetRecordsOutput{sdk, ours, limited} {
		if o != nil {
			o.ResultMetadata = middleware.Metadata{}
		}
	}
	require.Equal(t, ourErr == nil, limitedErr == nil, "with and without a limit: %v; %v", ourErr, limitedErr)
	require.Equal(t, ours, limited, "with and without a limit")
	return sdk, ours, sdkErr, ourErr
}

// TestRecordsDecodeAsSDK holds kinesub's GetRecords decoder to the SDK's on generated answers:
// escapes, non-ASCII and invalid UTF-8 text, payloads small and large, timestamps in every
// form, null and missing fields, unknown members, white space, child shards.
func TestRecordsDecodeAsSDK(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 300 {
		body := recordsjsontest.GenAnswer(rng)
		sdk, ours, sdkErr, ourErr := decodeBoth(t, 200, body)
		require.NoError(t, sdkErr, "answer %d: %s", n, body)
		require.NoError(t, ourErr, "answer %d: %s", n, body)
		require.Equal(t, sdk, ours, "answer %d: %s", n, body)
	}
}

// TestRecordsDecodeFallsBack: what the decoder does not read (malformed JSON, bad base64,
// a timestamp as a string, an escaped member name, an error answer) gets the SDK's result and
// error.
func TestRecordsDecodeFallsBack(t *testing.T) {
	cases := map[string]struct {
		status int
		body   string
	}{
		"truncated":        {200, `{"Records":[{"SequenceNumber":"1"`},
		"trailing garbage": {200, `{"Records":[]} x`},
		"bad base64":       {200, `{"Records":[{"Data":"!!!!"}]}`},
		"timestamp string": {200, `{"Records":[{"ApproximateArrivalTimestamp":"1700000000"}]}`},
		"escaped member":   {200, `{"Rec\u006frds":[{"SequenceNumber":"1"}],"NextShardIterator":"n"}`},
		"float millis":     {200, `{"Records":[],"MillisBehindLatest":1.5}`},
		"not an object":    {200, `[1,2]`},
		"control in text":  {200, "{\"Records\":[{\"PartitionKey\":\"0123456789\x01\"}]}"},
		"control at start": {200, "{\"Records\":[{\"PartitionKey\":\"\x1f\"}]}"},
		"control escaped":  {200, "{\"Records\":[{\"PartitionKey\":\"\\n\x1f\"}]}"},
		"empty":            {200, ``},
		"throttled":        {400, `{"__type":"ProvisionedThroughputExceededException","message":"Rate exceeded for shard"}`},
		"expired":          {400, `{"__type":"ExpiredIteratorException","message":"Iterator expired"}`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			sdk, ours, sdkErr, ourErr := decodeBoth(t, c.status, c.body)
			require.Equal(t, sdkErr == nil, ourErr == nil, "sdk: %v; ours: %v", sdkErr, ourErr)
			if sdkErr != nil {
				require.Equal(t, fmt.Sprintf("%T", recordsjsontest.UnwrapAll(sdkErr)), fmt.Sprintf("%T", recordsjsontest.UnwrapAll(ourErr)))
				return
			}
			require.Equal(t, sdk, ours)
		})
	}
}

// TestRecordsDecodePayloadsApart: a payload decoded into a shared block can be appended to
// without touching the next record's.
func TestRecordsDecodePayloadsApart(t *testing.T) {
	body := `{"Records":[{"Data":"` + base64.StdEncoding.EncodeToString([]byte("aa")) + `"},{"Data":"` +
		base64.StdEncoding.EncodeToString([]byte("bb")) + `"}]}`
	_, ours, _, err := decodeBoth(t, 200, body)
	require.NoError(t, err)
	_ = append(ours.Records[0].Data, 'x', 'x')
	require.Equal(t, []byte("bb"), ours.Records[1].Data)
}

// BenchmarkDecodeRecords decodes a page of 10,000 records of 100 bytes with the SDK's decoder
// and with kinesub's, through the client (request signing and all) as a GetRecords call does.
func BenchmarkDecodeRecords(b *testing.B) {
	var body strings.Builder
	body.WriteString(`{"Records":[`)
	for i := range 10000 {
		if i > 0 {
			body.WriteString(",")
		}
		fmt.Fprintf(&body, `{"SequenceNumber":"49%042d","ApproximateArrivalTimestamp":1.764760000123E9,"Data":%q,"PartitionKey":"key-%d"}`,
			i, base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{byte(i)}, 100)), i%1024)
	}
	body.WriteString(`],"NextShardIterator":"AAAAAAAAAAE=","MillisBehindLatest":0}`)
	text := body.String()
	client := answerClient(200, &text)
	in := &kinesis.GetRecordsInput{ShardIterator: aws.String("it")}
	for _, bc := range []struct {
		name string
		opts []func(*kinesis.Options)
	}{{"sdk", nil}, {"kinesub", []func(*kinesis.Options){Fast}}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.GetRecords(context.Background(), in, bc.opts...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*10000), "ns/record")
		})
	}
}

// FuzzRecordsDecode holds the decoder to the SDK's on arbitrary answers: either both fail, or
// both give the same output.
func FuzzRecordsDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		f.Add(recordsjsontest.GenAnswer(rng))
	}
	f.Add(`{"Records":[{"Data":"","SequenceNumber":"1","PartitionKey":"\u00e9"}],"NextShardIterator":null}`)
	f.Fuzz(func(t *testing.T, body string) {
		sdk, ours, sdkErr, ourErr := decodeBoth(t, 200, body)
		if (sdkErr == nil) != (ourErr == nil) {
			t.Fatalf("sdk: %v; ours: %v", sdkErr, ourErr)
		}
		if sdkErr == nil {
			require.Equal(t, sdk, ours)
		}
	})
}
