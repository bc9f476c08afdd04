package kinesub

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/direct"
	"github.com/gostream/kinesub/kinesistest"
	"github.com/gostream/kinesub/lease"
)

// TestDirectErrorsMatchSDK: for every error GetRecords answers with, the direct path returns
// what the SDK returns; a dropped connection is a transport fallback (the poller makes the
// call again through the SDK: TestDirectFallsBackOnTransportErrors).
func TestDirectErrorsMatchSDK(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	for _, tc := range []struct {
		name   string
		opts   []kinesistest.Option
		input  func(c *kinesis.Client, it *string) *kinesis.GetRecordsInput
		before func(c *kinesis.Client)
		kind   errKind
		reason string // the direct path's Fallback: "" when the call is served
	}{
		{name: "throttled", kind: errThrottled,
			opts: []kinesistest.Option{kinesistest.WithFaults(&kinesistest.FaultPlan{Seed: 1, Faults: []kinesistest.Fault{{Op: "GetRecords", Kind: kinesistest.Throttle, Probability: 1}}})}},
		{name: "internal failure", kind: errTransient,
			opts: []kinesistest.Option{kinesistest.WithFaults(&kinesistest.FaultPlan{Seed: 1, Faults: []kinesistest.Fault{{Op: "GetRecords", Kind: kinesistest.InternalFailure, Probability: 1}}})}},
		{name: "connection dropped", kind: errTransient, reason: direct.ReasonTransport,
			opts: []kinesistest.Option{kinesistest.WithFaults(&kinesistest.FaultPlan{Seed: 1, Faults: []kinesistest.Fault{{Op: "GetRecords", Kind: kinesistest.DropConnection, Probability: 1}}})}},
		{name: "expired iterator", kind: errExpired,
			opts: []kinesistest.Option{kinesistest.WithClock(clock), kinesistest.WithIteratorLifetime(time.Minute)},
			before: func(*kinesis.Client) {
				mu.Lock()
				now = now.Add(2 * time.Minute)
				mu.Unlock()
			}},
		{name: "invalid iterator", kind: errRejected,
			input: func(_ *kinesis.Client, _ *string) *kinesis.GetRecordsInput {
				return &kinesis.GetRecordsInput{ShardIterator: aws.String("not-an-iterator")}
			}},
		{name: "stream deleted", kind: errGone,
			before: func(c *kinesis.Client) {
				_, err := c.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String("direct")})
				require.NoError(t, err)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := kinesistest.NewServer(tc.opts...)
			t.Cleanup(srv.Close)
			c := srv.Client()
			require.NoError(t, srv.CreateStream(ctx, "direct", 1))
			_, err := srv.Put(ctx, "direct", "k", []byte("v"))
			require.NoError(t, err)
			iter := func() *string {
				out, err := c.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String("direct"), ShardId: aws.String("shardId-000000000000"), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
				require.NoError(t, err)
				return out.ShardIterator
			}
			a, b := iter(), iter()
			if tc.before != nil {
				tc.before(c)
			}
			in := func(it *string) *kinesis.GetRecordsInput {
				if tc.input != nil {
					return tc.input(c, it)
				}
				return &kinesis.GetRecordsInput{ShardIterator: it, Limit: aws.Int32(10)}
			}
			_, want := c.GetRecords(ctx, in(a), noRetry)
			require.Error(t, want)
			d, err := direct.New(c, nil)
			require.NoError(t, err)
			_, fb, got := d.GetRecords(ctx, in(b), 10)
			require.Error(t, got)
			require.Equal(t, tc.reason, fb.Reason)
			require.Equal(t, tc.kind, classify(ctx, want), "the SDK's error: %v", want)
			require.Equal(t, classify(ctx, want), classify(ctx, got), "SDK: %v\ndirect: %v", want, got)
			var wantAPI, gotAPI smithy.APIError
			require.Equal(t, errors.As(want, &wantAPI), errors.As(got, &gotAPI), "SDK: %v\ndirect: %v", want, got)
			if wantAPI != nil {
				require.IsType(t, wantAPI, gotAPI)
				require.Equal(t, wantAPI.ErrorCode(), gotAPI.ErrorCode())
				require.Equal(t, wantAPI.ErrorMessage(), gotAPI.ErrorMessage())
				require.Equal(t, wantAPI.ErrorFault(), gotAPI.ErrorFault())
			}
			var wantResp, gotResp *awshttp.ResponseError
			require.Equal(t, errors.As(want, &wantResp), errors.As(got, &gotResp))
			if wantResp != nil {
				require.Equal(t, wantResp.HTTPStatusCode(), gotResp.HTTPStatusCode())
				require.Equal(t, wantResp.ServiceRequestID() != "", gotResp.ServiceRequestID() != "", "a request id") // ids differ per call
			}
			var wantOp, gotOp *smithy.OperationError
			require.True(t, errors.As(want, &wantOp) && errors.As(got, &gotOp))
			require.Equal(t, wantOp.Service(), gotOp.Service())
			require.Equal(t, wantOp.Operation(), gotOp.Operation())
		})
	}
}

// TestDirectGoesBackToSDK: an answer the direct path does not handle as the SDK does (an error
// that is not one of GetRecords' own, such as an expired signature, or a body it cannot decode)
// gives the SDK's kind of error, the poller makes that call's successors through the SDK, and
// the fallback is counted by its reason.
func TestDirectGoesBackToSDK(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		reason string // of the fallback counted
	}{
		{"signature expired", 400, `{"__type":"InvalidSignatureException","message":"Signature expired"}`, direct.ReasonUnknownError},
		{"unknown 4xx", 403, `{"__type":"com.amazon.coral.service#UnrecognizedClientException","message":"The security token included in the request is invalid."}`, direct.ReasonUnknownError},
		{"undecodable", 200, `{"Records": 5}`, direct.ReasonUndecodable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			calls := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				calls++
				mu.Unlock()
				w.Header().Set("Content-Type", "application/x-amz-json-1.1")
				w.Header().Set("X-Amzn-Requestid", "req-1")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			t.Cleanup(srv.Close)
			c := kinesis.NewFromConfig(aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
				Credentials: credentials.NewStaticCredentialsProvider("AKID", "secret", "")})
			ctx := context.Background()
			in := &kinesis.GetRecordsInput{ShardIterator: aws.String("it"), Limit: aws.Int32(10)}
			_, want := c.GetRecords(ctx, in, noRetry)
			require.Error(t, want)
			meters := newMeters(t)
			m, err := newMetrics(meters.provider, "s")
			require.NoError(t, err)
			p := newPoller(c, directFor(t, c, m, nil), streamRef{name: "s"}, "shardId-000000000000", time.Second, time.Millisecond, time.Millisecond)
			require.NotNil(t, p.direct)
			_, got := p.getRecords(ctx, in, 10)
			require.Error(t, got)
			require.Nil(t, p.direct, "the poller goes back to the SDK")
			require.Equal(t, classify(ctx, want), classify(ctx, got), "SDK: %v\ndirect: %v", want, got)
			var wantAPI, gotAPI smithy.APIError
			require.Equal(t, errors.As(want, &wantAPI), errors.As(got, &gotAPI), "SDK: %v\ndirect: %v", want, got)
			if wantAPI != nil {
				require.Equal(t, wantAPI.ErrorCode(), gotAPI.ErrorCode())
				require.Equal(t, wantAPI.ErrorMessage(), gotAPI.ErrorMessage())
			}
			_, again := p.getRecords(ctx, in, 10)
			require.Equal(t, classify(ctx, want), classify(ctx, again))
			mu.Lock()
			require.Equal(t, 3, calls, "one call each, nothing sent twice")
			mu.Unlock()
			require.EqualValues(t, 1, meters.sum("kinesub.getrecords.fallbacks", string(attrReason), tc.reason), "the fallback counted, once")
			require.EqualValues(t, 1, meters.sum("kinesub.getrecords.fallbacks"))
		})
	}
}

// TestDirectMatchesSDKOnServer: on the test server (kinesalite in the integration suite), the
// client tests use is one the direct path serves, and it reads what the SDK reads.
func TestDirectMatchesSDKOnServer(t *testing.T) {
	s := newStream(t, 1)
	d, err := direct.New(s.c, nil)
	require.NoError(t, err, "the test clients can take the direct path")
	s.publish(500, 13)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shard := s.shardIDs()[0]
	iter := func() *string {
		out, err := s.c.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(s.name), ShardId: aws.String(shard), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
		require.NoError(t, err)
		return out.ShardIterator
	}
	viaSDK, viaDirect := iter(), iter()
	records := 0
	for page := 0; records < 500; page++ {
		require.Less(t, page, 100, "500 records in 100 pages")
		limit := []int{3, 50, 1000}[page%3]
		want, err := s.c.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: viaSDK, Limit: aws.Int32(int32(limit))}, noRetry)
		require.NoError(t, err)
		got, fb, err := d.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: viaDirect, Limit: aws.Int32(int32(limit))}, limit)
		require.NoError(t, err)
		require.Zero(t, fb)
		require.Equal(t, want.Records, got.Records, "page %d", page)
		require.Equal(t, want.NextShardIterator == nil, got.NextShardIterator == nil)
		viaSDK, viaDirect = want.NextShardIterator, got.NextShardIterator
		records += len(got.Records)
	}
	require.Equal(t, 500, records)
}

// directFor returns a direct path for c, as WithDirectGetRecords makes it, counting into m and
// logging to log (either may be nil).
func directFor(t *testing.T, c *kinesis.Client, m *metrics, log *slog.Logger) *directPath {
	t.Helper()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d, err := newDirectPath(&config{directGetRecords: true}, c, m, log)
	require.NoError(t, err)
	require.NotNil(t, d)
	return d
}

// TestDirectGetRecordsRefused: WithDirectGetRecords with a client whose request path the
// direct path does not reproduce makes Subscribe fail before any I/O, with an error wrapping
// ErrInvalidOption that names the option and the setting.
func TestDirectGetRecordsRefused(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	cfg := aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "secret", "")}
	other := kinesis.NewFromConfig(cfg)
	for _, tc := range []struct {
		name string
		cfg  func(*aws.Config)
		o    func(*kinesis.Options)
		want string
	}{
		{name: "adaptive retryer", cfg: func(c *aws.Config) { c.RetryMode = aws.RetryModeAdaptive }, want: "Retryer is adaptive"},
		{name: "adaptive retryer, wrapped", o: func(o *kinesis.Options) { o.Retryer = retry.AddWithMaxAttempts(retry.NewAdaptiveMode(), 3) }, want: "Retryer is adaptive"},
		{name: "custom retryer", cfg: func(c *aws.Config) {
			c.Retryer = func() aws.Retryer { return ownRetryer{retry.NewStandard()} }
		}, want: "Retryer is kinesub.ownRetryer"},
		{name: "auth schemes replaced, same length", o: func(o *kinesis.Options) {
			o.AuthSchemes = []smithyhttp.AuthScheme{ownScheme{other.Options().AuthSchemes[0]}}
		}, want: "auth scheme aws.auth#sigv4 is a kinesub.ownScheme"},
		{name: "auth scheme signing with another signer", o: func(o *kinesis.Options) {
			o.AuthSchemes = other.Options().AuthSchemes
		}, want: "another signer"},
		{name: "APIOptions", o: func(o *kinesis.Options) {
			o.APIOptions = append(o.APIOptions, func(*middleware.Stack) error { return nil })
		}, want: "APIOptions"},
		{name: "RoundTripper of its own", cfg: func(c *aws.Config) {
			c.HTTPClient = &http.Client{Transport: ctxReader{next: http.DefaultTransport}}
		}, want: "RoundTripper"},
		{name: "HTTPClient of its own", cfg: func(c *aws.Config) { c.HTTPClient = ownHTTPClient{} }, want: "HTTPClient is kinesub.ownHTTPClient"},
		{name: "client log mode", cfg: func(c *aws.Config) { c.ClientLogMode = aws.LogRequest }, want: "ClientLogMode"},
		{name: "anonymous", cfg: func(c *aws.Config) { c.Credentials = aws.AnonymousCredentials{} }, want: "no credentials"},
		{name: "FIPS pseudo-region", cfg: func(c *aws.Config) { c.Region = "fips-us-east-1" }, want: "region"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			if tc.cfg != nil {
				tc.cfg(&c)
			}
			var opts []func(*kinesis.Options)
			if tc.o != nil {
				opts = append(opts, tc.o)
			}
			client := kinesis.NewFromConfig(c, opts...)
			_, err := Subscribe(context.Background(), client, "orders", WithLeaseStore(lease.NewMemory()), WithDirectGetRecords())
			require.ErrorIs(t, err, ErrInvalidOption)
			require.ErrorContains(t, err, "WithDirectGetRecords")
			require.ErrorContains(t, err, tc.want)
			require.Zero(t, hits.Load(), "no request sent")
		})
	}
}

type ownRetryer struct{ aws.RetryerV2 }

type ownScheme struct{ smithyhttp.AuthScheme }

type ownHTTPClient struct{}

func (ownHTTPClient) Do(*http.Request) (*http.Response, error) { return nil, errors.New("not used") }

// ctxReader is a RoundTripper that reads the SDK's context values, as tracing and metrics
// transports do: it notes, for every GetRecords request, the operation and service the context
// names and the user agent.
type ctxReader struct {
	next http.RoundTripper
	seen *[]string
	mu   *sync.Mutex
}

func (c ctxReader) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.seen != nil && r.Header.Get("X-Amz-Target") == "Kinesis_20131202.GetRecords" {
		ua := r.Header.Get("User-Agent")
		c.mu.Lock()
		*c.seen = append(*c.seen, middleware.GetServiceID(r.Context())+"/"+middleware.GetOperationName(r.Context())+" "+
			strconv.FormatBool(strings.Contains(ua, "api/kinesis#")))
		c.mu.Unlock()
	}
	return c.next.RoundTrip(r)
}

// TestGetRecordsDefaultIsSDK: without WithDirectGetRecords, every GetRecords call goes through
// the SDK's request path: an HTTP client that reads the SDK's context values finds them on
// each, and the user agent the SDK's middleware writes.
func TestGetRecordsDefaultIsSDK(t *testing.T) {
	srv := kinesistest.NewServer()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, srv.CreateStream(ctx, "sdk", 1))
	_, err := srv.Put(ctx, "sdk", "k", []byte("one"), []byte("two"))
	require.NoError(t, err)
	var (
		mu   sync.Mutex
		seen []string
	)
	cfg := srv.Config()
	cfg.HTTPClient = &http.Client{Transport: ctxReader{next: srv.HTTPClient().Transport, seen: &seen, mu: &mu}}
	sub, err := Subscribe(ctx, kinesis.NewFromConfig(cfg), "sdk", testOpts(lease.NewMemory(), WithInitialPosition(Horizon()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close(context.Background()) })
	require.Equal(t, []string{"one", "two"}, payloads(recv(t, sub, 2, true)))
	require.NoError(t, sub.Close(ctx))
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, seen)
	for _, s := range seen {
		require.Equal(t, "Kinesis/GetRecords true", s)
	}
}

// dropProxy passes requests on to a kinesistest server, and drops the connection of the
// GetRecords requests drop picks by their number (from 1), before answering.
type dropProxy struct {
	*httptest.Server
	mu      sync.Mutex
	n       int // GetRecords requests seen
	dropped int
	drop    func(n int) bool
}

func newDropProxy(t *testing.T, srv *kinesistest.Server, drop func(n int) bool) *dropProxy {
	target, err := url.Parse(srv.URL)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = srv.HTTPClient().Transport
	p := &dropProxy{drop: drop}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Target") == "Kinesis_20131202.GetRecords" {
			p.mu.Lock()
			p.n++
			d := p.drop(p.n)
			if d {
				p.dropped++
			}
			p.mu.Unlock()
			if d {
				_, _ = io.Copy(io.Discard, r.Body)
				if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
					_ = conn.Close()
				}
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// counts returns the GetRecords requests seen and dropped.
func (p *dropProxy) counts() (seen, dropped int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n, p.dropped
}

// clientVia returns a client of the SDK's defaults (its BuildableClient) that reaches srv
// through p.
func (p *dropProxy) client(srv *kinesistest.Server) *kinesis.Client {
	cfg := srv.Config()
	cfg.BaseEndpoint, cfg.HTTPClient = aws.String(p.URL), nil
	return kinesis.NewFromConfig(cfg)
}

// TestDirectFallsBackOnTransportErrors: with WithDirectGetRecords, a GetRecords call whose
// connection drops is made again through the SDK's path, so the reader sees no failed call
// (nothing on Errors, no retry's backoff); the fallback is counted in kinesub.getrecords.fallbacks with reason transport and
// logged once at Warn, and the reader keeps to the direct path: a later direct call dropped is
// fallen back on and counted too (had the reader left the direct path, that call, through
// the SDK, would have failed and counted nothing).
func TestDirectFallsBackOnTransportErrors(t *testing.T) {
	srv := kinesistest.NewServer()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, srv.CreateStream(ctx, "fallback", 1))
	for i := range 3 {
		_, err := srv.Put(ctx, "fallback", "k", []byte(strconv.Itoa(i)))
		require.NoError(t, err)
	}
	// Requests 1 and 4 are dropped: 1 direct (dropped), 2 its fallback through the SDK, 3
	// direct, 4 direct (dropped), 5 its fallback, 6 direct.
	proxy := newDropProxy(t, srv, func(n int) bool { return n == 1 || n == 4 })
	meters := newMeters(t)
	log := &logLines{}
	sub, err := Subscribe(ctx, proxy.client(srv), "fallback", testOpts(lease.NewMemory(), WithInitialPosition(Horizon()),
		WithDirectGetRecords(), WithMeterProvider(meters.provider), WithLogger(slog.New(log)))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close(context.Background()) })
	require.Equal(t, []string{"0", "1", "2"}, payloads(recv(t, sub, 3, true)))
	eventually(t, 30*time.Second, "six GetRecords calls", func() bool { n, _ := proxy.counts(); return n >= 6 })
	require.NoError(t, sub.Close(ctx))
	for done := false; !done; {
		select {
		case err, ok := <-sub.Errors():
			var se *ShardError
			require.False(t, ok && errors.As(err, &se) && se.Op == OpGetRecords, "a GetRecords call failed for the reader: %v", err)
			done = !ok
		default:
			done = true
		}
	}
	seen, dropped := proxy.counts()
	require.Equal(t, 2, dropped)
	require.EqualValues(t, 2, meters.sum("kinesub.getrecords.fallbacks", string(attrReason), direct.ReasonTransport),
		"each dropped call counted (%d seen)", seen)
	pts, unit := meters.collect("kinesub.getrecords.fallbacks")
	require.Equal(t, "{call}", unit)
	for _, p := range pts {
		require.Equal(t, direct.ReasonTransport, p.attrs[string(attrReason)])
		require.Equal(t, "fallback", p.attrs[string(attrDestination)])
	}
	logged := log.matching(slog.LevelWarn, "GetRecords fell back")
	require.Len(t, logged, 1, "the first fallback of a reason is logged: %q", log.all())
	require.Contains(t, logged[0], "reason="+direct.ReasonTransport)
	require.Contains(t, logged[0], logShard+"=shardId-000000000000")
	require.False(t, log.has(slog.LevelWarn, "GetRecords: direct calls keep failing"), "the reader kept to the direct path")
	// Every call sent is counted, the direct ones included (a call cut off by Close may not have
	// reached the proxy).
	require.GreaterOrEqual(t, meters.sum("kinesub.requests", string(attrOperation), "GetRecords"), float64(seen))
	require.GreaterOrEqual(t, meters.sum("kinesub.requests", string(attrOperation), "GetRecords", string(attrOutcome), outcomeError), float64(dropped))
}

// TestDirectKeepsToSDKAfterRepeatedTransportErrors: a poller whose direct calls fail in
// transport three times in a row while the SDK's calls made again succeed sends its later
// calls through the SDK, and says so once; a direct call that succeeds in between starts the
// count again; a call that fails both ways counts nothing against the direct path.
func TestDirectKeepsToSDKAfterRepeatedTransportErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		drop     []int // GetRecords requests dropped, by number
		calls    int
		errs     int  // calls that fail
		keepsSDK bool // the poller ends on the SDK's path
		strikes  int
	}{
		{name: "three in a row", drop: []int{1, 3, 5, 7}, calls: 4, keepsSDK: true, errs: 1},
		{name: "a success between", drop: []int{1, 4, 6}, calls: 4, strikes: 2},
		{name: "both ways fail", drop: []int{1, 2, 3, 4}, calls: 3, errs: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := kinesistest.NewServer()
			t.Cleanup(srv.Close)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			require.NoError(t, srv.CreateStream(ctx, "strikes", 1))
			proxy := newDropProxy(t, srv, func(n int) bool { return slices.Contains(tc.drop, n) })
			c := proxy.client(srv)
			meters := newMeters(t)
			m, err := newMetrics(meters.provider, "strikes")
			require.NoError(t, err)
			log := &logLines{}
			d := directFor(t, c, m, slog.New(log))
			p := newPoller(c, d, streamRef{name: "strikes"}, "shardId-000000000000", 10*time.Second, time.Millisecond, time.Millisecond)
			require.NoError(t, p.open(ctx, Horizon()))
			errs := 0
			for range tc.calls {
				if _, err := p.next(ctx, 10); err != nil {
					errs++
				}
			}
			require.Equal(t, tc.errs, errs)
			require.Equal(t, tc.keepsSDK, p.direct == nil)
			require.Equal(t, tc.strikes, p.strikes)
			_, dropped := proxy.counts()
			require.Equal(t, len(tc.drop), dropped)
			if tc.keepsSDK {
				require.Len(t, log.matching(slog.LevelWarn, "GetRecords: direct calls keep failing"), 1)
				require.EqualValues(t, 3, meters.sum("kinesub.getrecords.fallbacks", string(attrReason), direct.ReasonTransport))
			} else {
				require.False(t, log.has(slog.LevelWarn, "GetRecords: direct calls keep failing"))
			}
		})
	}
}

// TestDirectSubscribeReads: on the test server (kinesalite in the integration suite),
// WithDirectGetRecords reads every record, in order, with no fallback.
func TestDirectSubscribeReads(t *testing.T) {
	s := newStream(t, 2)
	s.publish(300, 7)
	meters := newMeters(t)
	sub := subscribeT(t, s, testOpts(lease.NewMemory(), WithInitialPosition(Horizon()), WithDirectGetRecords(), WithMeterProvider(meters.provider))...)
	var order orderChecker
	for _, m := range recv(t, sub, 300, true) {
		order.see(t, m)
	}
	require.Zero(t, meters.sum("kinesub.getrecords.fallbacks"))
	require.Positive(t, meters.sum("kinesub.requests", string(attrOperation), "GetRecords", string(attrOutcome), outcomeOK))
}
