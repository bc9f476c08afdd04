package kinesub

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

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
		HTTPClient: httpDoer(func(r *http.Request) (*http.Response, error) {
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

type httpDoer func(*http.Request) (*http.Response, error)

func (f httpDoer) Do(r *http.Request) (*http.Response, error) { return f(r) }

// decodeBoth decodes body with the SDK's decoder and with kinesub's, and returns both.
func decodeBoth(t *testing.T, status int, body string) (sdk, ours *kinesis.GetRecordsOutput, sdkErr, ourErr error) {
	t.Helper()
	client := answerClient(status, &body)
	in := &kinesis.GetRecordsInput{ShardIterator: aws.String("it")}
	sdk, sdkErr = client.GetRecords(context.Background(), in)
	ours, ourErr = client.GetRecords(context.Background(), in, fastRecords)
	// As the poller calls, with a limit (here a small one: the arrays made for it grow).
	limited, limitedErr := client.GetRecords(context.Background(), in, fastRecordsUpTo(2))
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
		body := genAnswer(rng)
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
				require.Equal(t, fmt.Sprintf("%T", unwrapAll(sdkErr)), fmt.Sprintf("%T", unwrapAll(ourErr)))
				return
			}
			require.Equal(t, sdk, ours)
		})
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
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

func genAnswer(rng *rand.Rand) string {
	var b strings.Builder
	ws := func() {
		if rng.IntN(4) == 0 {
			b.WriteString([]string{" ", "\n", "\t", "\r\n  "}[rng.IntN(4)])
		}
	}
	members := []func(){}
	if rng.IntN(10) > 0 {
		members = append(members, func() {
			b.WriteString(`"Records"`)
			ws()
			b.WriteString(":")
			ws()
			if rng.IntN(20) == 0 {
				b.WriteString("null")
				return
			}
			b.WriteString("[")
			n := rng.IntN(6)
			if rng.IntN(10) == 0 {
				n = 300 + rng.IntN(300) // more than one block of strings and payloads
			}
			for i := range n {
				if i > 0 {
					b.WriteString(",")
				}
				ws()
				genRecord(rng, &b, ws)
			}
			ws()
			b.WriteString("]")
		})
	}
	if rng.IntN(5) > 0 {
		members = append(members, func() { b.WriteString(`"NextShardIterator":` + genValue(rng, genText(rng))) })
	}
	if rng.IntN(5) > 0 {
		members = append(members, func() {
			b.WriteString(`"MillisBehindLatest":`)
			if rng.IntN(10) == 0 {
				b.WriteString("null")
			} else {
				b.WriteString(strconv.FormatInt(rng.Int64N(1<<40), 10))
			}
		})
	}
	if rng.IntN(4) == 0 {
		members = append(members, func() {
			b.WriteString(`"ChildShards":[`)
			for i := range rng.IntN(3) {
				if i > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, `{"ShardId":%q,"ParentShards":[%q,%q],"HashKeyRange":{"StartingHashKey":"0","EndingHashKey":"340282366920938463463374607431768211455"%s}%s}`,
					"shardId-00000000000"+strconv.Itoa(i), "shardId-000000000000", "shardId-000000000001", genUnknown(rng), genUnknown(rng))
			}
			b.WriteString("]")
		})
	}
	if rng.IntN(4) == 0 {
		members = append(members, func() { b.WriteString(`"SomethingNew":{"a":[1,2.5e3,true,false,null,"x\"y"],"b":{}}`) })
	}
	rng.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	ws()
	b.WriteString("{")
	for i, m := range members {
		if i > 0 {
			b.WriteString(",")
		}
		ws()
		m()
		ws()
	}
	b.WriteString("}")
	ws()
	return b.String()
}

func genRecord(rng *rand.Rand, b *strings.Builder, ws func()) {
	var fields []string
	if rng.IntN(20) > 0 {
		fields = append(fields, `"SequenceNumber":`+genValue(rng, `"4960`+strconv.FormatUint(rng.Uint64(), 10)+strconv.FormatUint(rng.Uint64(), 10)+`"`))
	}
	if rng.IntN(20) > 0 {
		fields = append(fields, `"PartitionKey":`+genValue(rng, genText(rng)))
	}
	if rng.IntN(20) > 0 {
		fields = append(fields, `"ApproximateArrivalTimestamp":`+genValue(rng, genTime(rng)))
	}
	if rng.IntN(20) > 0 {
		size := rng.IntN(200)
		if rng.IntN(10) == 0 {
			size = rng.IntN(5000) // past the shared blocks' piece size
		}
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		fields = append(fields, `"Data":`+genValue(rng, `"`+base64.StdEncoding.EncodeToString(data)+`"`))
	}
	if rng.IntN(3) == 0 {
		fields = append(fields, `"EncryptionType":`+genValue(rng, []string{`"NONE"`, `"KMS"`}[rng.IntN(2)]))
	}
	if rng.IntN(5) == 0 {
		fields = append(fields, `"Unknown":`+[]string{`{"x":[{}]}`, `[]`, `12`, `-1.5E-3`, `"s\\\""`, `true`}[rng.IntN(6)])
	}
	rng.Shuffle(len(fields), func(i, j int) { fields[i], fields[j] = fields[j], fields[i] })
	b.WriteString("{")
	for i, f := range fields {
		if i > 0 {
			b.WriteString(",")
		}
		ws()
		b.WriteString(f)
	}
	ws()
	b.WriteString("}")
}

// genValue is v, or now and then null.
func genValue(rng *rand.Rand, v string) string {
	if rng.IntN(15) == 0 {
		return "null"
	}
	return v
}

func genUnknown(rng *rand.Rand) string {
	if rng.IntN(3) == 0 {
		return `,"New":[null,{"k":"v"}]`
	}
	return ""
}

// genText is a JSON string: plain, with escapes, non-ASCII, invalid UTF-8 or empty.
func genText(rng *rand.Rand) string {
	parts := []string{"key-", "é", `\"`, `\\`, `\/`, `\u00e9`, `\ud83d\ude00`, `\ud800`, "\xff", "😀", `\n`, `\t`, "x", "12345"}
	var b bytes.Buffer
	b.WriteByte('"')
	for range rng.IntN(8) {
		if rng.IntN(2) == 0 {
			b.WriteString("k")
			continue
		}
		b.WriteString(parts[rng.IntN(len(parts))])
	}
	b.WriteByte('"')
	return b.String()
}

// genTime is an arrival timestamp in epoch seconds, in one of the forms JSON allows.
func genTime(rng *rand.Rand) string {
	ms := 1_500_000_000_000 + rng.Int64N(400_000_000_000)
	sec := float64(ms) / 1000
	switch rng.IntN(5) {
	case 0:
		return strconv.FormatInt(ms/1000, 10)
	case 1:
		return strconv.FormatFloat(sec, 'E', -1, 64)
	case 2:
		return strconv.FormatFloat(sec, 'e', 12, 64)
	case 3:
		return fmt.Sprintf("%d.%03d", ms/1000, ms%1000)
	}
	_ = time.Second
	return strconv.FormatFloat(sec+rng.Float64()/1000, 'f', -1, 64)
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
	}{{"sdk", nil}, {"kinesub", []func(*kinesis.Options){fastRecords}}} {
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
		f.Add(genAnswer(rng))
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
