package direct

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/aws/smithy-go/tracing"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/kinesistest"
)

// noRetry turns the SDK's retries off, as the poller does: each call is sent once.
func noRetry(o *kinesis.Options) { o.RetryMaxAttempts = 1 }

// TestCheck: New serves a client whose request path the direct path reproduces, and refuses
// any other with an error that says what it does not reproduce.
func TestCheck(t *testing.T) {
	srv := kinesistest.NewServer()
	t.Cleanup(srv.Close)
	other := kinesis.NewFromConfig(srv.Config()) // its auth scheme signs with its own signer
	for name, o := range map[string]func(*kinesis.Options){
		"plain":            func(*kinesis.Options) {},
		"DisableHTTPS":     func(o *kinesis.Options) { o.EndpointOptions.DisableHTTPS = true },
		"RetryMaxAttempts": func(o *kinesis.Options) { o.RetryMaxAttempts = 5 },
		"standard Retryer wrapped": func(o *kinesis.Options) {
			o.Retryer = retry.AddWithMaxBackoffDelay(retry.AddWithMaxAttempts(retry.NewStandard(), 2), time.Second)
		},
		"BuildableClient": func(o *kinesis.Options) {
			tr := srv.HTTPClient().Transport.(*http.Transport)
			o.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) { t.TLSClientConfig = tr.TLSClientConfig })
		},
		"AppID": func(o *kinesis.Options) { o.AppID = "orders" },
	} {
		_, err := New(kinesis.NewFromConfig(srv.Config(), o), nil)
		require.NoError(t, err, name)
	}
	for _, tc := range []struct {
		name string
		o    func(*kinesis.Options)
		want string
	}{
		{"APIOptions", func(o *kinesis.Options) {
			o.APIOptions = append(o.APIOptions, func(*middleware.Stack) error { return nil })
		}, "APIOptions"},
		{"ClientLogMode", func(o *kinesis.Options) { o.ClientLogMode = aws.LogRequest }, "ClientLogMode"},
		{"EndpointResolverV2", func(o *kinesis.Options) {
			o.EndpointResolverV2 = &countingResolver{next: kinesis.NewDefaultEndpointResolverV2()}
		}, "EndpointResolverV2"},
		{"anonymous", func(o *kinesis.Options) { o.Credentials = aws.AnonymousCredentials{} }, "anonymous"},
		{"account ID required", func(o *kinesis.Options) {
			o.AccountIDEndpointMode = aws.AccountIDEndpointModeRequired
		}, "AccountIDEndpointMode"},
		{"FIPS region", func(o *kinesis.Options) { o.Region = "fips-us-east-1" }, "region"},
		{"interceptor", func(o *kinesis.Options) { o.Interceptors.AddBeforeTransmit(beforeTransmit{}) }, "interceptors"},
		{"auth scheme preference", func(o *kinesis.Options) { o.AuthSchemePreference = []string{"sigv4"} }, "AuthSchemePreference"},
		{"adaptive Retryer", func(o *kinesis.Options) { o.Retryer = retry.NewAdaptiveMode() }, "adaptive"},
		{"wrapped adaptive Retryer", func(o *kinesis.Options) {
			o.Retryer = retry.AddWithMaxAttempts(retry.NewAdaptiveMode(), 1)
		}, "adaptive"},
		{"custom Retryer", func(o *kinesis.Options) { o.Retryer = ownRetryer{retry.NewStandard()} }, "direct.ownRetryer"},
		{"auth scheme replaced, same length", func(o *kinesis.Options) {
			o.AuthSchemes = []smithyhttp.AuthScheme{ownScheme{other.Options().AuthSchemes[0]}}
		}, "auth scheme aws.auth#sigv4 is a direct.ownScheme"},
		{"auth scheme of another signer", func(o *kinesis.Options) {
			o.AuthSchemes = other.Options().AuthSchemes
		}, "another signer"},
		{"auth scheme list empty", func(o *kinesis.Options) { o.AuthSchemes = []smithyhttp.AuthScheme{} }, "auth schemes"},
		{"RoundTripper", func(o *kinesis.Options) {
			o.HTTPClient = &http.Client{Transport: roundTripper(http.DefaultTransport.RoundTrip)}
		}, "RoundTripper"},
		{"HTTPClient of its own", func(o *kinesis.Options) { o.HTTPClient = ownClient{srv.HTTPClient()} }, "direct.ownClient"},
		{"TracerProvider", func(o *kinesis.Options) { o.TracerProvider = ownTracer{} }, "TracerProvider"},
	} {
		_, err := New(kinesis.NewFromConfig(srv.Config(), tc.o), nil)
		require.ErrorContains(t, err, tc.want, tc.name)
	}
	cfg := srv.Config()
	cfg.RetryMode = aws.RetryModeAdaptive
	_, err := New(kinesis.NewFromConfig(cfg), nil)
	require.ErrorContains(t, err, "adaptive", "RetryMode adaptive")
	_, err = New(struct{}{}, nil)
	require.ErrorContains(t, err, "not a *kinesis.Client")
}

type ownRetryer struct{ aws.RetryerV2 }

type ownScheme struct{ smithyhttp.AuthScheme }

type ownClient struct{ c *http.Client }

func (c ownClient) Do(r *http.Request) (*http.Response, error) { return c.c.Do(r) }

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type ownTracer struct{ tracing.NopTracerProvider }

type beforeTransmit struct{}

func (beforeTransmit) BeforeTransmit(context.Context, *smithyhttp.InterceptorContext) error {
	return nil
}

// TestMatchesSDK: the direct path's answers are the SDK's: the same records (aggregates,
// large and small payloads, many keys), positions, lag and child shards, read to a split
// shard's end; and the same errors, by type, code, message, HTTP status and how the reader
// classifies them.
func TestMatchesSDK(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The server's clock moves only between puts, so that both ways of reading see one lag.
	var mu sync.Mutex
	now := time.Now()
	srv := kinesistest.NewServer(kinesistest.WithClock(func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}))
	t.Cleanup(srv.Close)
	c := srv.Client()
	d, err := New(c, nil)
	require.NoError(t, err)
	require.NoError(t, srv.CreateStream(ctx, "direct", 1))
	for i := range 300 {
		mu.Lock()
		now = now.Add(time.Millisecond)
		mu.Unlock()
		size := 1 + i%7*100
		if i%50 == 0 {
			size = 200 << 10
		}
		_, err := srv.Put(ctx, "direct", fmt.Sprintf("key-%d", i%37), bytes.Repeat([]byte{byte(i)}, size))
		require.NoError(t, err)
	}
	_, err = srv.Put(ctx, "direct", "agg", append([]byte{0xF3, 0x89, 0x9A, 0xC2}, "a KPL aggregate, passed on as it is"...))
	require.NoError(t, err)
	shard := "shardId-000000000000"
	_, err = c.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String("direct"), ShardToSplit: aws.String(shard), NewStartingHashKey: aws.String("170141183460469231731687303715884105728")})
	require.NoError(t, err)

	iter := func() *string {
		out, err := c.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String("direct"), ShardId: aws.String(shard), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
		require.NoError(t, err)
		return out.ShardIterator
	}
	viaSDK, viaDirect := iter(), iter()
	pages, records := 0, 0
	for viaSDK != nil {
		require.NotNil(t, viaDirect)
		limit := []int{1, 7, 100, 10000}[pages%4]
		want, err := c.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: viaSDK, Limit: aws.Int32(int32(limit))}, noRetry)
		require.NoError(t, err)
		got, fb, err := d.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: viaDirect, Limit: aws.Int32(int32(limit))}, limit)
		require.NoError(t, err)
		require.Zero(t, fb)
		require.Equal(t, want.Records, got.Records, "page %d", pages)
		require.Equal(t, aws.ToInt64(want.MillisBehindLatest), aws.ToInt64(got.MillisBehindLatest))
		require.Equal(t, want.MillisBehindLatest == nil, got.MillisBehindLatest == nil)
		require.Equal(t, want.ChildShards, got.ChildShards)
		if want.NextShardIterator == nil {
			require.Len(t, got.ChildShards, 2, "the split shard's end names its children")
		}
		require.Equal(t, want.NextShardIterator == nil, got.NextShardIterator == nil)
		viaSDK, viaDirect = want.NextShardIterator, got.NextShardIterator
		pages, records = pages+1, records+len(got.Records)
		if len(got.Records) == 0 && got.NextShardIterator != nil && records == 301 {
			break // at the tip of an open shard
		}
	}
	require.Equal(t, 301, records)
	require.GreaterOrEqual(t, pages, 4)
	require.Nil(t, viaSDK, "read to the split shard's end")
}
