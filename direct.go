package kinesub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"github.com/gostream/kinesub/internal/recordsjson"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	smithyauth "github.com/aws/smithy-go/auth"
	smithyendpoints "github.com/aws/smithy-go/endpoints"
	smithymetrics "github.com/aws/smithy-go/metrics"
	"github.com/aws/smithy-go/tracing"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// A GetRecords call through the SDK builds the operation's middleware stack anew (about 380
// allocations), resolves its endpoint and auth scheme, signs, and decodes through the
// protocol's schema: on an idle shard, that is most of a poll's CPU. directRecords sends the
// same request itself, over the client's own HTTP client, credentials, signer and endpoint
// resolver, and decodes the answer with recordsjson.Decode.
//
// It is used only for a client that adds nothing to the SDK's request path: no APIOptions, no
// interceptors, no client log mode, no tracer or meter provider, the default protocol, auth
// schemes and endpoint resolver (newDirectRecords). Any other client is called through the SDK,
// so adding an APIOptions entry to the client is the way to keep every call on the SDK's path.
// A poller also goes back to the SDK for good when the direct path meets what it does not
// handle as the SDK does: an answer it cannot decode, or an error that is not one of
// GetRecords' own (an expired signature, whose clock offset the SDK corrects, for example).
// A test holds its answers and errors to the SDK's.

// directRecords sends GetRecords requests without the SDK's middleware.
type directRecords struct {
	http   kinesis.HTTPClient
	creds  aws.CredentialsProvider
	signer kinesis.HTTPSignerV4
	opts   kinesis.Options // for the endpoint parameters
	agent  string
	r      *requestMetrics // nil: not counted
}

// directTarget is the X-Amz-Target of GetRecords.
const directTarget = "Kinesis_20131202.GetRecords"

// errUseSDK: the direct path cannot make this call; the caller makes it through the SDK.
var errUseSDK = errors.New("kinesub: GetRecords goes through the SDK")

// newDirectRecords returns the direct path for client, or nil when client must be called
// through the SDK.
func newDirectRecords(client any, r *requestMetrics) *directRecords {
	c, ok := client.(*kinesis.Client)
	if !ok || c == nil {
		return nil
	}
	o := c.Options()
	if !directEligible(o) {
		return nil
	}
	agent := "aws-sdk-go-v2/" + aws.SDKVersion + " kinesub"
	if o.AppID != "" {
		agent += " app/" + o.AppID
	}
	return &directRecords{http: o.HTTPClient, creds: o.Credentials, signer: o.HTTPSignerV4, opts: o, agent: agent, r: r}
}

// directEligible reports whether a client's options add nothing to the SDK's request path of
// GetRecords, so that the direct path sends what the SDK would.
func directEligible(o kinesis.Options) bool {
	none := kinesis.NewFromConfig(aws.Config{}).Options() // the defaults, to compare types with
	same := func(a, b any) bool { return a != nil && reflect.TypeOf(a) == reflect.TypeOf(b) }
	switch {
	case len(o.APIOptions) > 0, o.ClientLogMode != 0, o.EndpointResolver != nil,
		o.HTTPClient == nil, o.Credentials == nil, o.HTTPSignerV4 == nil, !plainRegion(o.Region),
		len(o.AuthSchemes) != len(none.AuthSchemes), len(o.AuthSchemePreference) > 0,
		o.AccountIDEndpointMode == aws.AccountIDEndpointModeRequired,
		o.Protocol == nil || o.Protocol.ID() != recordsjson.AWSJSON11,
		!same(o.EndpointResolverV2, none.EndpointResolverV2),
		!same(o.AuthSchemeResolver, none.AuthSchemeResolver),
		interceptors(o.Interceptors) > 0:
		return false
	}
	if _, anon := o.Credentials.(aws.AnonymousCredentials); anon {
		return false
	}
	switch o.TracerProvider.(type) {
	case nil, tracing.NopTracerProvider, *tracing.NopTracerProvider:
	default:
		return false
	}
	switch o.MeterProvider.(type) {
	case nil, smithymetrics.NopMeterProvider, *smithymetrics.NopMeterProvider:
	default:
		return false
	}
	return true
}

// interceptors counts the interceptors a registry holds.
func interceptors(r smithyhttp.InterceptorRegistry) int {
	n := 0
	v := reflect.ValueOf(r)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Slice {
			n += f.Len()
		}
	}
	return n
}

// directRequest is GetRecords' request body.
type directRequest struct {
	Limit         *int32  `json:",omitempty"`
	ShardIterator *string `json:",omitempty"`
	StreamARN     *string `json:",omitempty"`
}

// getRecords makes one GetRecords call, counted in the request metrics as the SDK's calls are.
// errUseSDK (nothing was sent) and the errors it wraps with useSDK set ask the caller to make
// this and every later call through the SDK.
func (d *directRecords) getRecords(ctx context.Context, in *kinesis.GetRecordsInput, limit int) (out *kinesis.GetRecordsOutput, useSDK bool, err error) {
	start := time.Now()
	out, useSDK, err = d.call(ctx, in, limit)
	if d.r != nil && !errors.Is(err, errUseSDK) {
		d.r.record(ctx, "GetRecords", start, err)
	}
	return out, useSDK, err
}

func (d *directRecords) call(ctx context.Context, in *kinesis.GetRecordsInput, limit int) (*kinesis.GetRecordsOutput, bool, error) {
	creds, err := d.creds.Retrieve(ctx)
	if err != nil {
		return nil, true, errUseSDK // the SDK reports a credentials failure its own way
	}
	endpoint, name, region, ok := d.endpoint(ctx, in, creds)
	if !ok {
		return nil, true, errUseSDK
	}
	body, err := json.Marshal(directRequest{Limit: in.Limit, ShardIterator: in.ShardIterator, StreamARN: in.StreamARN})
	if err != nil {
		return nil, true, errUseSDK
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint.URI.String(), bytes.NewReader(body))
	if err != nil {
		return nil, true, errUseSDK
	}
	if req.URL.Path == "" {
		req.URL.Path = "/"
	}
	for k := range endpoint.Headers {
		req.Header.Set(k, endpoint.Headers.Get(k))
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", directTarget)
	req.Header.Set("User-Agent", d.agent)
	sum := sha256.Sum256(body)
	if err := d.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), name, region, time.Now()); err != nil {
		return nil, true, errUseSDK
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return nil, false, directError(&awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: &http.Response{}}, Err: &smithyhttp.RequestSendError{Err: err},
		}})
	}
	defer resp.Body.Close()
	buf, err := recordsjson.ReadBody(resp.Body, resp.ContentLength)
	defer recordsjson.ReleaseBody(buf)
	if err != nil {
		return nil, false, directError(&smithy.DeserializationError{Err: err})
	}
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		apiErr, known := directAPIError(resp, buf.Bytes())
		return nil, !known, directError(&awshttp.ResponseError{
			ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: resp}, Err: apiErr},
			RequestID:     resp.Header.Get("X-Amzn-Requestid"),
		})
	}
	out := &kinesis.GetRecordsOutput{}
	hint := 0
	if limit > 0 {
		hint = min(limit, buf.Len()/recordsjson.MinRecordJSON+1)
	}
	if err := recordsjson.DecodeHint(buf.Bytes(), out, hint); err != nil {
		return nil, true, directError(&smithy.DeserializationError{Err: err})
	}
	return out, false, nil
}

// endpoint resolves the call's endpoint as the SDK does (bindEndpointParams), with its SigV4
// signing name and region; ok is false for an endpoint whose auth scheme is not SigV4.
func (d *directRecords) endpoint(ctx context.Context, in *kinesis.GetRecordsInput, creds aws.Credentials) (e smithyendpoints.Endpoint, name, region string, ok bool) {
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

// plainRegion reports whether r is a region the SDK binds as it is: a host label of lower-case
// letters, digits and dashes that names no FIPS pseudo-region (those the SDK maps).
func plainRegion(r string) bool {
	if r == "" || strings.Contains(r, "fips") || r[0] == '-' || r[len(r)-1] == '-' {
		return false
	}
	for _, c := range r {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
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
