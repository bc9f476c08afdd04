// Package direct sends GetRecords requests without the SDK's middleware, and resolves
// Kinesis endpoints once per set of parameters for the SDK's own calls. It imports nothing of
// the kinesub package: the poller calls it and counts its calls through a Recorder.
package direct

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	smithyauth "github.com/aws/smithy-go/auth"
	smithyendpoints "github.com/aws/smithy-go/endpoints"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/gostream/kinesub/internal/recordsjson"
)

// A GetRecords call through the SDK builds the operation's middleware stack anew (about 380
// allocations), resolves its endpoint and auth scheme, signs, and decodes through the
// protocol's schema: on an idle shard, that is most of a poll's CPU. Records sends the
// same request itself, over the client's own HTTP client, credentials, signer and endpoint
// resolver, with the headers the SDK's build step sets (its user agent, invocation ID,
// attempt header and Lambda trace ID, made by the SDK's own middleware), and decodes the
// answer with recordsjson.Decode.
//
// It serves only a client whose request path it reproduces (Check); New refuses any other,
// saying why. A call it cannot make as the SDK would is handed back to the caller with a
// Fallback: made again through the SDK when nothing usable came back (a transport error, a
// body cut short), or answered with the direct path's error and the later calls sent through
// the SDK when the answer is one it does not handle as the SDK does (an undecodable body, an
// error that is not one of GetRecords' own, such as an expired signature, whose clock offset
// the SDK corrects). Tests hold its requests, answers and errors to the SDK's.

// Recorder counts one call: its operation, when it started and how it ended.
type Recorder func(ctx context.Context, op string, start time.Time, err error)

// Records sends GetRecords requests without the SDK's middleware. It is safe for concurrent
// use.
type Records struct {
	http   kinesis.HTTPClient
	creds  aws.CredentialsProvider
	signer kinesis.HTTPSignerV4
	opts   kinesis.Options // for the endpoint parameters
	agent  string          // the SDK's User-Agent for this client
	record Recorder        // nil: not counted
}

// directTarget is the X-Amz-Target of GetRecords.
const directTarget = "Kinesis_20131202.GetRecords"

// Reasons for a Fallback, the values of the fallback metric's reason attribute.
const (
	ReasonCredentials  = "credentials"   // the credentials could not be retrieved; nothing sent
	ReasonEndpoint     = "endpoint"      // the endpoint did not resolve to a SigV4 one; nothing sent
	ReasonRequest      = "request"       // the request could not be built or signed; nothing sent
	ReasonTransport    = "transport"     // the HTTP client returned an error: no answer
	ReasonResponseBody = "response_body" // the answer's body could not be read to its end
	ReasonUnknownError = "unknown_error" // an error answer that is not one of GetRecords' own
	ReasonUndecodable  = "undecodable"   // a success answer the decoder does not read
)

// A Fallback says why a call was not served by the direct path, and what the caller does. The
// zero Fallback: the call was served (its error, if any, is the SDK's).
type Fallback struct {
	Reason string // one of the Reason values; "" when served
	// Again: nothing usable came back (nothing was sent, or no whole answer): the caller makes
	// this call through the SDK, unless its ctx has ended. Otherwise the call's error stands.
	Again bool
	// ForGood: the caller sends its later calls through the SDK too: the direct path would
	// not make them as the SDK does. A Fallback that is Again only (transport, response_body)
	// leaves that to the caller.
	ForGood bool
}

func fallback(reason string) Fallback {
	switch reason {
	case ReasonTransport, ReasonResponseBody:
		return Fallback{Reason: reason, Again: true}
	case ReasonUnknownError, ReasonUndecodable:
		return Fallback{Reason: reason, ForGood: true}
	}
	return Fallback{Reason: reason, Again: true, ForGood: true}
}

// New returns the direct path for client, or an error saying why it does not reproduce the
// SDK's request path for that client (Check). record, when not nil, counts each call sent.
func New(client any, record Recorder) (*Records, error) {
	c, ok := client.(*kinesis.Client)
	if !ok || c == nil {
		return nil, fmt.Errorf("the client is %T, not a *kinesis.Client", client)
	}
	o := c.Options()
	if err := Check(o); err != nil {
		return nil, err
	}
	return &Records{http: o.HTTPClient, creds: o.Credentials, signer: o.HTTPSignerV4, opts: o, agent: userAgent(o), record: record}, nil
}

// userAgent is the User-Agent the SDK's middleware writes for a GetRecords call of a client
// with options o under the poller's one attempt (addClientUserAgent, addCredentialSource,
// addUserAgentAccountIDEndpointMode; no retry-mode feature, as the poller's Retryer is
// wrapped), made once by the SDK's own user-agent middleware.
func userAgent(o kinesis.Options) string {
	ua := awsmiddleware.NewRequestUserAgent()
	if v := kinesisVersion(); v != "" {
		ua.AddSDKAgentKeyValue(awsmiddleware.APIMetadata, "kinesis", v)
	}
	if o.AppID != "" {
		ua.AddSDKAgentKey(awsmiddleware.ApplicationIdentifier, o.AppID)
	}
	switch o.AccountIDEndpointMode {
	case aws.AccountIDEndpointModePreferred:
		ua.AddUserAgentFeature(awsmiddleware.UserAgentFeatureAccountIDModePreferred)
	case aws.AccountIDEndpointModeRequired:
		ua.AddUserAgentFeature(awsmiddleware.UserAgentFeatureAccountIDModeRequired)
	case aws.AccountIDEndpointModeDisabled:
		ua.AddUserAgentFeature(awsmiddleware.UserAgentFeatureAccountIDModeDisabled)
	}
	if src, ok := o.Credentials.(aws.CredentialProviderSource); ok {
		for _, s := range src.ProviderSources() {
			ua.AddCredentialsSource(s)
		}
	}
	req := &smithyhttp.Request{Request: &http.Request{Header: http.Header{}}}
	_, _, _ = ua.HandleBuild(context.Background(), middleware.BuildInput{Request: req}, nopBuild)
	return req.Header.Get("User-Agent")
}

var nopBuild = middleware.BuildHandlerFunc(func(context.Context, middleware.BuildInput) (middleware.BuildOutput, middleware.Metadata, error) {
	return middleware.BuildOutput{}, middleware.Metadata{}, nil
})

// kinesisVersion is the version of the SDK's Kinesis module linked in, as its user agent
// names it ("1.56.13"); "" when the binary does not record it.
var kinesisVersion = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, m := range info.Deps {
		if m.Path != "github.com/aws/aws-sdk-go-v2/service/kinesis" {
			continue
		}
		if m.Replace != nil && m.Replace.Version != "" {
			m = m.Replace
		}
		return strings.TrimPrefix(m.Version, "v")
	}
	return ""
})

// directRequest is GetRecords' request body.
type directRequest struct {
	Limit         *int32  `json:",omitempty"`
	ShardIterator *string `json:",omitempty"`
	StreamARN     *string `json:",omitempty"`
}

// GetRecords makes one GetRecords call, counted by the Recorder as the SDK's calls are (when
// it was sent). A call not served directly returns a Fallback that says why and what the
// caller does; the error is the direct path's, to return when the Fallback is not Again.
func (d *Records) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, limit int) (*kinesis.GetRecordsOutput, Fallback, error) {
	start := time.Now()
	out, reason, sent, err := d.call(ctx, in, limit)
	if d.record != nil && sent {
		d.record(ctx, "GetRecords", start, err)
	}
	if reason == "" {
		return out, Fallback{}, err
	}
	return nil, fallback(reason), err
}

// errNotSent is the error of a call that was not sent.
var errNotSent = errors.New("kinesub: GetRecords not sent directly")

func (d *Records) call(ctx context.Context, in *kinesis.GetRecordsInput, limit int) (out *kinesis.GetRecordsOutput, reason string, sent bool, err error) {
	creds, err := d.creds.Retrieve(ctx)
	if err != nil {
		return nil, ReasonCredentials, false, fmt.Errorf("%w: %w", errNotSent, err) // the SDK reports a credentials failure its own way
	}
	endpoint, name, region, ok := d.endpoint(ctx, in, creds)
	if !ok {
		return nil, ReasonEndpoint, false, errNotSent
	}
	body, err := json.Marshal(directRequest{Limit: in.Limit, ShardIterator: in.ShardIterator, StreamARN: in.StreamARN})
	if err != nil {
		return nil, ReasonRequest, false, fmt.Errorf("%w: %w", errNotSent, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint.URI.String(), bytes.NewReader(body))
	if err != nil {
		return nil, ReasonRequest, false, fmt.Errorf("%w: %w", errNotSent, err)
	}
	if req.URL.Path == "" {
		req.URL.Path = "/"
	}
	if d.opts.EndpointOptions.DisableHTTPS {
		req.URL.Scheme = "http" // as the SDK's disableHTTPS middleware does
	}
	for k := range endpoint.Headers {
		req.Header.Set(k, endpoint.Headers.Get(k))
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", directTarget)
	req.Header.Set("User-Agent", d.agent)
	// The build step's headers, set by the SDK's own middleware: the invocation ID, and the
	// Lambda trace ID (recursion detection); then the header the retry middleware sets for
	// the poller's one attempt.
	sreq := &smithyhttp.Request{Request: req}
	if _, _, err := (awsmiddleware.ClientRequestID{}).HandleBuild(ctx, middleware.BuildInput{Request: sreq}, nopBuild); err != nil {
		return nil, ReasonRequest, false, fmt.Errorf("%w: %w", errNotSent, err)
	}
	if _, _, err := (&awsmiddleware.RecursionDetection{}).HandleBuild(ctx, middleware.BuildInput{Request: sreq}, nopBuild); err != nil {
		return nil, ReasonRequest, false, fmt.Errorf("%w: %w", errNotSent, err)
	}
	req.Header.Set("Amz-Sdk-Request", "attempt=1; max=1")
	sum := sha256.Sum256(body)
	if err := d.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), name, region, time.Now()); err != nil {
		return nil, ReasonRequest, false, fmt.Errorf("%w: %w", errNotSent, err)
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return nil, ReasonTransport, true, directError(&awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: &http.Response{}}, Err: &smithyhttp.RequestSendError{Err: err},
		}})
	}
	defer resp.Body.Close()
	buf, err := recordsjson.ReadBody(resp.Body, resp.ContentLength)
	defer recordsjson.ReleaseBody(buf)
	if err != nil {
		return nil, ReasonResponseBody, true, directError(&smithy.DeserializationError{Err: err})
	}
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		apiErr, known := directAPIError(resp, buf.Bytes())
		err := directError(&awshttp.ResponseError{
			ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: resp}, Err: apiErr},
			RequestID:     resp.Header.Get("X-Amzn-Requestid"),
		})
		if !known {
			return nil, ReasonUnknownError, true, err
		}
		return nil, "", true, err
	}
	out = &kinesis.GetRecordsOutput{}
	hint := 0
	if limit > 0 {
		hint = min(limit, buf.Len()/recordsjson.MinRecordJSON+1)
	}
	if err := recordsjson.DecodeHint(buf.Bytes(), out, hint); err != nil {
		return nil, ReasonUndecodable, true, directError(&smithy.DeserializationError{Err: err})
	}
	return out, "", true, nil
}

// endpoint resolves the call's endpoint as the SDK does (bindEndpointParams), with its SigV4
// signing name and region; ok is false for an endpoint whose auth scheme is not SigV4.
func (d *Records) endpoint(ctx context.Context, in *kinesis.GetRecordsInput, creds aws.Credentials) (e smithyendpoints.Endpoint, name, region string, ok bool) {
	o := &d.opts
	p := kinesis.EndpointParameters{
		UseDualStack:          aws.Bool(o.EndpointOptions.UseDualStackEndpoint == aws.DualStackEndpointStateEnabled),
		UseFIPS:               aws.Bool(o.EndpointOptions.UseFIPSEndpoint == aws.FIPSEndpointStateEnabled),
		Endpoint:              o.BaseEndpoint,
		AccountIdEndpointMode: aws.String(string(o.AccountIDEndpointMode)),
		StreamARN:             in.StreamARN,
		StreamId:              in.StreamId,
		OperationType:         aws.String("data"),
		Region:                aws.String(o.Region),
	}
	if o.AccountIDEndpointMode != aws.AccountIDEndpointModeDisabled && creds.AccountID != "" {
		p.AccountId = aws.String(creds.AccountID)
	}
	resolved, err := sharedEndpoints.ResolveEndpoint(ctx, p)
	if err != nil {
		return e, "", "", false
	}
	name, region = "kinesis", o.Region
	if opts, found := smithyauth.GetAuthOptions(&resolved.Properties); found {
		ok = false
		for _, a := range opts {
			if a.SchemeID != "aws.auth#sigv4" {
				continue
			}
			if v, set := smithyhttp.GetSigV4SigningName(&a.SignerProperties); set {
				name = v
			}
			if v, set := smithyhttp.GetSigV4SigningRegion(&a.SignerProperties); set {
				region = v
			}
			ok = true
			break
		}
		if !ok {
			return e, "", "", false
		}
	}
	return resolved, name, region, true
}

// directError wraps err as the SDK wraps an operation's errors.
func directError(err error) error {
	return &smithy.OperationError{ServiceID: "Kinesis", OperationName: "GetRecords", Err: err}
}

// directAPIError decodes an error answer into the error the SDK returns for it: one of
// GetRecords' own exceptions (known), or a generic API error (not known: the poller goes back
// to the SDK).
func directAPIError(resp *http.Response, body []byte) (error, bool) {
	var e struct {
		Type    string `json:"__type"`
		Code    string `json:"code"`
		Message string `json:"message"`
		Msg     string `json:"Message"`
	}
	_ = json.Unmarshal(body, &e)
	code := resp.Header.Get("X-Amzn-Errortype")
	if code == "" {
		code = e.Type
	}
	if code == "" {
		code = e.Code
	}
	if i := strings.IndexByte(code, ':'); i >= 0 {
		code = code[:i]
	}
	if i := strings.LastIndexByte(code, '#'); i >= 0 {
		code = code[i+1:]
	}
	msg := e.Message
	if msg == "" {
		msg = e.Msg
	}
	var m *string
	if msg != "" {
		m = aws.String(msg)
	}
	switch code {
	case "ExpiredIteratorException":
		return &types.ExpiredIteratorException{Message: m}, true
	case "ProvisionedThroughputExceededException":
		return &types.ProvisionedThroughputExceededException{Message: m}, true
	case "ResourceNotFoundException":
		return &types.ResourceNotFoundException{Message: m}, true
	case "InvalidArgumentException":
		return &types.InvalidArgumentException{Message: m}, true
	case "AccessDeniedException":
		return &types.AccessDeniedException{Message: m}, true
	case "KMSAccessDeniedException":
		return &types.KMSAccessDeniedException{Message: m}, true
	case "KMSDisabledException":
		return &types.KMSDisabledException{Message: m}, true
	case "KMSInvalidStateException":
		return &types.KMSInvalidStateException{Message: m}, true
	case "KMSNotFoundException":
		return &types.KMSNotFoundException{Message: m}, true
	case "KMSOptInRequired":
		return &types.KMSOptInRequired{Message: m}, true
	case "KMSThrottlingException":
		return &types.KMSThrottlingException{Message: m}, true
	case "InternalFailureException":
		return &types.InternalFailureException{Message: m}, true
	}
	if code == "" {
		code = "UnknownError"
	}
	fault := smithy.FaultClient
	if resp.StatusCode >= 500 {
		fault = smithy.FaultServer
	}
	return &smithy.GenericAPIError{Code: code, Message: msg, Fault: fault}, resp.StatusCode >= 500
}
