package kinesub

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/direct"
	"github.com/gostream/kinesub/kinesistest"
)

// TestDirectErrorsMatchSDK: for every error GetRecords answers with, the direct path returns
// what the SDK returns, and a poller goes back to the SDK for good after an error that is not
// GetRecords' own.
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
		sdkOK  bool // the poller keeps the direct path
	}{
		{name: "throttled", kind: errThrottled, sdkOK: true,
			opts: []kinesistest.Option{kinesistest.WithFaults(&kinesistest.FaultPlan{Seed: 1, Faults: []kinesistest.Fault{{Op: "GetRecords", Kind: kinesistest.Throttle, Probability: 1}}})}},
		{name: "internal failure", kind: errTransient, sdkOK: true,
			opts: []kinesistest.Option{kinesistest.WithFaults(&kinesistest.FaultPlan{Seed: 1, Faults: []kinesistest.Fault{{Op: "GetRecords", Kind: kinesistest.InternalFailure, Probability: 1}}})}},
		{name: "connection dropped", kind: errTransient, sdkOK: true,
			opts: []kinesistest.Option{kinesistest.WithFaults(&kinesistest.FaultPlan{Seed: 1, Faults: []kinesistest.Fault{{Op: "GetRecords", Kind: kinesistest.DropConnection, Probability: 1}}})}},
		{name: "expired iterator", kind: errExpired, sdkOK: true,
			opts: []kinesistest.Option{kinesistest.WithClock(clock), kinesistest.WithIteratorLifetime(time.Minute)},
			before: func(*kinesis.Client) {
				mu.Lock()
				now = now.Add(2 * time.Minute)
				mu.Unlock()
			}},
		{name: "invalid iterator", kind: errRejected, sdkOK: true,
			input: func(_ *kinesis.Client, _ *string) *kinesis.GetRecordsInput {
				return &kinesis.GetRecordsInput{ShardIterator: aws.String("not-an-iterator")}
			}},
		{name: "stream deleted", kind: errGone, sdkOK: true,
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
			d := direct.New(c, nil)
			_, useSDK, got := d.GetRecords(ctx, in(b), 10)
			require.Error(t, got)
			require.Equal(t, !tc.sdkOK, useSDK)
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
// gives the SDK's kind of error, and the poller makes that call's successors through the SDK.
func TestDirectGoesBackToSDK(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"signature expired", 400, `{"__type":"InvalidSignatureException","message":"Signature expired"}`},
		{"unknown 4xx", 403, `{"__type":"com.amazon.coral.service#UnrecognizedClientException","message":"The security token included in the request is invalid."}`},
		{"undecodable", 200, `{"Records": 5}`},
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
			c := kinesis.NewFromConfig(aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), HTTPClient: srv.Client(),
				Credentials: credentials.NewStaticCredentialsProvider("AKID", "secret", "")})
			ctx := context.Background()
			in := &kinesis.GetRecordsInput{ShardIterator: aws.String("it"), Limit: aws.Int32(10)}
			_, want := c.GetRecords(ctx, in, noRetry)
			require.Error(t, want)
			p := newPoller(c, direct.New(c, nil), streamRef{name: "s"}, "shardId-000000000000", time.Second, time.Millisecond, time.Millisecond)
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
		})
	}
}

// TestDirectMatchesSDKOnServer: on the test server (kinesalite in the integration suite), the
// client tests use is one the direct path serves, and it reads what the SDK reads.
func TestDirectMatchesSDKOnServer(t *testing.T) {
	s := newStream(t, 1)
	d := direct.New(s.c, nil)
	require.NotNil(t, d, "the test clients take the direct path, so every test that reads exercises it")
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
		got, useSDK, err := d.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: viaDirect, Limit: aws.Int32(int32(limit))}, limit)
		require.NoError(t, err)
		require.False(t, useSDK)
		require.Equal(t, want.Records, got.Records, "page %d", page)
		require.Equal(t, want.NextShardIterator == nil, got.NextShardIterator == nil)
		viaSDK, viaDirect = want.NextShardIterator, got.NextShardIterator
		records += len(got.Records)
	}
	require.Equal(t, 500, records)
}
