package direct

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/smithy-go/middleware"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/recordsjson"
)

// sent is one request as a server received it.
type sent struct {
	method, host, path, query, proto string
	header                           http.Header
	body                             string
}

// recorder is a Kinesis endpoint that keeps every request and answers each with an empty page.
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []sent
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.reqs = append(r.reqs, sent{req.Method, req.Host, req.URL.Path, req.URL.RawQuery, req.Proto, req.Header.Clone(), string(b)})
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_, _ = w.Write([]byte(`{"Records":[],"NextShardIterator":"next","MillisBehindLatest":0}`))
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *recorder) last(t *testing.T) sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	require.NotEmpty(t, r.reqs)
	return r.reqs[len(r.reqs)-1]
}

var (
	amzDate = regexp.MustCompile(`^\d{8}T\d{6}Z$`)
	uuid    = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	sigPart = regexp.MustCompile(`, Signature=[0-9a-f]{64}$`)
)

// TestRequestMatchesSDK: the direct path sends the request the SDK sends for the poller's
// GetRecords call (one attempt, the records decoder, the cached endpoints), field by field:
// method, host, path, query, protocol, body, and every header, the signature's scope and
// signed headers included; only the signing time, the signature and the invocation ID (a new
// UUID per call) differ between two requests. With a session token, a stream ARN, an
// application ID, DisableHTTPS, an endpoint with a path, an account ID endpoint mode, and the
// Lambda trace ID.
func TestRequestMatchesSDK(t *testing.T) {
	srv := newRecorder(t)
	ctx := context.Background()
	arn := aws.String("arn:aws:kinesis:us-east-1:123456789012:stream/orders")
	for _, tc := range []struct {
		name   string
		cfg    func(*aws.Config)
		o      func(*kinesis.Options)
		in     kinesis.GetRecordsInput
		lambda bool
	}{
		{name: "plain", in: kinesis.GetRecordsInput{ShardIterator: aws.String("it-1"), Limit: aws.Int32(10)}},
		{name: "session token and stream ARN", in: kinesis.GetRecordsInput{ShardIterator: aws.String("it/2+=="), Limit: aws.Int32(10000), StreamARN: arn},
			cfg: func(c *aws.Config) {
				c.Credentials = credentials.NewStaticCredentialsProvider("AKID", "secret", "session-token/with+chars==")
			}},
		{name: "no limit", in: kinesis.GetRecordsInput{ShardIterator: aws.String("it-3")}},
		{name: "AppID", cfg: func(c *aws.Config) { c.AppID = "orders-billing" }, in: kinesis.GetRecordsInput{ShardIterator: aws.String("it-4"), Limit: aws.Int32(1)}},
		{name: "DisableHTTPS", o: func(o *kinesis.Options) {
			o.BaseEndpoint = aws.String(strings.Replace(srv.URL, "http://", "https://", 1))
			o.EndpointOptions.DisableHTTPS = true
		}, in: kinesis.GetRecordsInput{ShardIterator: aws.String("it-5"), Limit: aws.Int32(10), StreamARN: arn}},
		{name: "endpoint with a path", o: func(o *kinesis.Options) { o.BaseEndpoint = aws.String(srv.URL + "/kinesis") },
			in: kinesis.GetRecordsInput{ShardIterator: aws.String("it-6"), Limit: aws.Int32(10)}},
		{name: "account ID endpoint mode", cfg: func(c *aws.Config) {
			c.AccountIDEndpointMode = aws.AccountIDEndpointModePreferred
			c.Credentials = credentials.StaticCredentialsProvider{Value: aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "secret", AccountID: "123456789012"}}
		}, in: kinesis.GetRecordsInput{ShardIterator: aws.String("it-7"), Limit: aws.Int32(10), StreamARN: arn}},
		{name: "Lambda trace ID", lambda: true, in: kinesis.GetRecordsInput{ShardIterator: aws.String("it-8"), Limit: aws.Int32(10)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.lambda {
				t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "consumer")
				t.Setenv("_X_AMZN_TRACE_ID", "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1 ü")
			} else {
				require.Empty(t, os.Getenv("_X_AMZN_TRACE_ID"))
			}
			cfg := aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
				Credentials: credentials.NewStaticCredentialsProvider("AKID", "secret", "")}
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			var opts []func(*kinesis.Options)
			if tc.o != nil {
				opts = append(opts, tc.o)
			}
			c := kinesis.NewFromConfig(cfg, opts...)
			d, err := New(c, nil)
			require.NoError(t, err)
			limit := int(aws.ToInt32(tc.in.Limit))
			in := tc.in
			_, err = c.GetRecords(ctx, &in, noRetry, recordsjson.UpTo(limit), CachedEndpoints)
			require.NoError(t, err)
			want := srv.last(t)
			in = tc.in
			_, fb, err := d.GetRecords(ctx, &in, limit)
			require.NoError(t, err)
			require.Zero(t, fb)
			got := srv.last(t)

			require.Equal(t, want.method, got.method)
			require.Equal(t, want.host, got.host)
			require.Equal(t, want.path, got.path)
			require.Equal(t, want.query, got.query)
			require.Equal(t, want.proto, got.proto)
			require.JSONEq(t, want.body, got.body)
			require.Equal(t, want.body, got.body, "the same bytes")
			names := func(h http.Header) []string {
				var ks []string
				for k := range h {
					ks = append(ks, k)
				}
				slices.Sort(ks)
				return ks
			}
			require.Equal(t, names(want.header), names(got.header), "the same headers")
			for k, v := range want.header {
				g := got.header[k]
				switch k {
				case "X-Amz-Date":
					require.Regexp(t, amzDate, v[0])
					require.Regexp(t, amzDate, g[0])
				case "Amz-Sdk-Invocation-Id":
					require.Regexp(t, uuid, v[0])
					require.Regexp(t, uuid, g[0])
					require.NotEqual(t, v[0], g[0], "a new ID per call")
				case "Authorization":
					require.Regexp(t, sigPart, v[0])
					require.Regexp(t, sigPart, g[0])
					require.Equal(t, sigPart.ReplaceAllString(v[0], ""), sigPart.ReplaceAllString(g[0], ""), "the same scope and signed headers")
				default:
					require.Equal(t, v, g, "header %s", k)
				}
			}
			if tc.lambda {
				require.NotEmpty(t, got.header.Get("X-Amzn-Trace-Id"))
			}
			if cfg.Credentials != nil {
				creds, err := cfg.Credentials.Retrieve(ctx)
				require.NoError(t, err)
				require.Equal(t, creds.SessionToken, got.header.Get("X-Amz-Security-Token"))
			}
		})
	}
}

// TestGetRecordsMiddleware: the SDK's GetRecords middleware, as the poller's calls run it, is
// the list in testdata/getrecords_middleware.txt, against which the direct path's request was
// last checked. An SDK upgrade that adds, removes or moves a middleware fails here: check what
// the change does to the request (TestRequestMatchesSDK, and Check for settings the new
// middleware reads), then write the new list (go test -run TestGetRecordsMiddleware
// -update-middleware).
func TestGetRecordsMiddleware(t *testing.T) {
	srv := newRecorder(t)
	c := kinesis.NewFromConfig(aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "secret", "")})
	var list string
	capture := func(o *kinesis.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			list = s.String()
			return nil
		})
	}
	_, err := c.GetRecords(context.Background(), &kinesis.GetRecordsInput{ShardIterator: aws.String("it"), Limit: aws.Int32(10)},
		noRetry, recordsjson.UpTo(10), CachedEndpoints, capture)
	require.NoError(t, err)
	const file = "testdata/getrecords_middleware.txt"
	if *updateMiddleware {
		require.NoError(t, os.WriteFile(file, []byte(list), 0o644))
	}
	want, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, string(want), list, "the SDK's GetRecords middleware changed: see the test's comment")
}
