package direct

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	smithymetrics "github.com/aws/smithy-go/metrics"
	"github.com/aws/smithy-go/tracing"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/gostream/kinesub/internal/recordsjson"
)

// Check returns nil when the direct path sends what the SDK would for a client with options
// o, or an error that says which setting it does not reproduce and why. What it accepts:
//
//   - No APIOptions, interceptors, client log mode, tracer or meter provider, v1 endpoint
//     resolver or auth scheme preference: each adds work to the SDK's request path that the
//     direct path skips.
//   - The SDK's default protocol, endpoint resolver and auth scheme resolver, and its auth
//     schemes themselves: SigV4 alone, signing with the client's HTTPSignerV4 and credentials.
//   - The SDK's standard Retryer, also wrapped by retry.AddWithMaxAttempts,
//     AddWithMaxBackoffDelay or AddWithErrorCodes: with the one attempt the poller makes, it
//     decides nothing. The adaptive Retryer (RetryMode adaptive) waits on its client-side
//     rate limiter before every attempt, and a Retryer of another type may do anything before
//     one: both are refused.
//   - An HTTPClient that is the SDK's BuildableClient (the default, and what
//     config.LoadDefaultConfig makes), or an *http.Client whose Transport is nil or an
//     *http.Transport. Both read nothing of a request's context but its deadline, so they
//     behave alike whoever sends. Any other client or RoundTripper (tracing, metrics, signing
//     proxies) may read the context values the SDK's middleware sets (the operation's name,
//     its signing name and region), which a direct request does not carry: it is refused.
//   - Signed requests (not anonymous credentials), in a plain region (not a FIPS
//     pseudo-region the SDK maps), without an account ID required in the endpoint.
//
// DisableHTTPS is reproduced: the request goes over http, as the SDK's disableHTTPS
// middleware sends it.
func Check(o kinesis.Options) error {
	none := kinesis.NewFromConfig(aws.Config{}).Options() // the defaults, to compare types with
	same := func(a, b any) bool { return a != nil && reflect.TypeOf(a) == reflect.TypeOf(b) }
	switch {
	case len(o.APIOptions) > 0:
		return fmt.Errorf("the client has %d APIOptions entries, middleware a direct request would skip", len(o.APIOptions))
	case interceptors(o.Interceptors) > 0:
		return fmt.Errorf("the client has interceptors, which a direct request would skip")
	case o.ClientLogMode != 0:
		return fmt.Errorf("the client's ClientLogMode logs its requests, which a direct request would not")
	case o.EndpointResolver != nil:
		return fmt.Errorf("the client has a v1 EndpointResolver, which a direct request would not ask")
	case !same(o.EndpointResolverV2, none.EndpointResolverV2):
		return fmt.Errorf("the client's EndpointResolverV2 is %T, not the SDK's default, which a direct request would not ask", o.EndpointResolverV2)
	case !same(o.AuthSchemeResolver, none.AuthSchemeResolver):
		return fmt.Errorf("the client's AuthSchemeResolver is %T, not the SDK's default", o.AuthSchemeResolver)
	case len(o.AuthSchemePreference) > 0:
		return fmt.Errorf("the client sets AuthSchemePreference; a direct request signs with SigV4 only")
	case o.Protocol == nil || o.Protocol.ID() != recordsjson.AWSJSON11:
		return fmt.Errorf("the client's protocol is not the SDK's awsJson1_1")
	case o.Credentials == nil:
		return fmt.Errorf("the client has no credentials (or anonymous ones): the SDK sends its calls unsigned, a direct request is signed")
	case o.HTTPSignerV4 == nil:
		return fmt.Errorf("the client has no HTTPSignerV4")
	case o.AccountIDEndpointMode == aws.AccountIDEndpointModeRequired:
		return fmt.Errorf("the client's AccountIDEndpointMode is required, which a direct request does not check")
	case !plainRegion(o.Region):
		return fmt.Errorf("the client's region %q is not one the SDK binds as it is (a FIPS pseudo-region, or not a region name)", o.Region)
	}
	if _, anon := o.Credentials.(aws.AnonymousCredentials); anon {
		return fmt.Errorf("the client's credentials are anonymous: the SDK sends such calls unsigned")
	}
	if err := checkAuthSchemes(o); err != nil {
		return err
	}
	if err := checkRetryer(o.Retryer); err != nil {
		return err
	}
	if err := checkHTTPClient(o.HTTPClient); err != nil {
		return err
	}
	switch o.TracerProvider.(type) {
	case nil, tracing.NopTracerProvider, *tracing.NopTracerProvider:
	default:
		return fmt.Errorf("the client has a TracerProvider (%T): a direct request makes no SDK spans", o.TracerProvider)
	}
	switch o.MeterProvider.(type) {
	case nil, smithymetrics.NopMeterProvider, *smithymetrics.NopMeterProvider:
	default:
		return fmt.Errorf("the client has a MeterProvider (%T): a direct request records no SDK metrics", o.MeterProvider)
	}
	return nil
}

// checkAuthSchemes compares the client's auth schemes with those the SDK makes for it
// (resolveAuthSchemes): the same schemes, of the same types, SigV4 signing with the client's
// own HTTPSignerV4 and logging nothing. A list of the same length that swaps a scheme, its
// type or its signer is refused.
func checkAuthSchemes(o kinesis.Options) error {
	want := kinesis.NewFromConfig(aws.Config{}).Options().AuthSchemes
	if len(o.AuthSchemes) != len(want) {
		return fmt.Errorf("the client's auth schemes (%s) are not the SDK's (%s)", schemeIDs(o.AuthSchemes), schemeIDs(want))
	}
	for i, s := range o.AuthSchemes {
		w := want[i]
		if s == nil || s.SchemeID() != w.SchemeID() {
			return fmt.Errorf("the client's auth schemes (%s) are not the SDK's (%s)", schemeIDs(o.AuthSchemes), schemeIDs(want))
		}
		if reflect.TypeOf(s) != reflect.TypeOf(w) {
			return fmt.Errorf("the client's auth scheme %s is a %T, not the SDK's %T", s.SchemeID(), s, w)
		}
		sig, wsig := s.Signer(), w.Signer()
		if sig == nil || reflect.TypeOf(sig) != reflect.TypeOf(wsig) {
			return fmt.Errorf("the client's %s auth scheme signs with %T, not the SDK's %T", s.SchemeID(), sig, wsig)
		}
		// The SDK's SigV4 adapter: its Signer must be the client's HTTPSignerV4, which a
		// direct request signs with, and it must not log.
		v := reflect.ValueOf(sig)
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			continue
		}
		if f := v.FieldByName("Signer"); f.IsValid() && f.CanInterface() {
			if !sameValue(f.Interface(), o.HTTPSignerV4) {
				return fmt.Errorf("the client's %s auth scheme signs with another signer than its HTTPSignerV4", s.SchemeID())
			}
		}
		if f := v.FieldByName("LogSigning"); f.IsValid() && f.Kind() == reflect.Bool && f.Bool() {
			return fmt.Errorf("the client's %s auth scheme logs its signing, which a direct request would not", s.SchemeID())
		}
	}
	return nil
}

func schemeIDs(ss []smithyhttp.AuthScheme) string {
	ids := make([]string, len(ss))
	for i, s := range ss {
		if s == nil {
			ids[i] = "nil"
			continue
		}
		ids[i] = s.SchemeID()
	}
	return strings.Join(ids, ", ")
}

// sameValue reports whether a and b are the same value: equal, when their type is comparable.
func sameValue(a, b any) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if reflect.TypeOf(a) != reflect.TypeOf(b) || !reflect.TypeOf(a).Comparable() {
		return false
	}
	return a == b
}

// The types of the SDK's standard Retryer and of the wrappers that change only what it decides
// after a failed attempt.
var (
	standardRetryer = reflect.TypeOf(retry.NewStandard())
	retryWrappers   = map[reflect.Type]bool{
		reflect.TypeOf(retry.AddWithMaxAttempts(retry.NewStandard(), 1)):     true,
		reflect.TypeOf(retry.AddWithMaxBackoffDelay(retry.NewStandard(), 1)): true,
		reflect.TypeOf(retry.AddWithErrorCodes(retry.NewStandard(), "x")):    true,
	}
)

// checkRetryer accepts the SDK's standard Retryer, as the client built it or wrapped by the
// retry package's wrappers that decide only about retries (each embeds the Retryer it wraps as
// its first field).
func checkRetryer(r aws.Retryer) error {
	for range 8 {
		if r == nil {
			return nil // the SDK makes its standard one
		}
		t := reflect.TypeOf(r)
		if t == standardRetryer {
			return nil
		}
		if !retryWrappers[t] {
			break
		}
		inner, ok := reflect.ValueOf(r).Elem().Field(0).Interface().(aws.Retryer)
		if !ok {
			break
		}
		r = inner
	}
	if _, adaptive := r.(*retry.AdaptiveMode); adaptive {
		return fmt.Errorf("the client's Retryer is adaptive (RetryMode adaptive): it rate-limits every attempt on the client, which a direct request would bypass")
	}
	return fmt.Errorf("the client's Retryer is %T, not the SDK's standard one: a direct request would not call it", r)
}

// checkHTTPClient accepts the SDK's BuildableClient and an *http.Client over the standard
// library's transport; see Check.
func checkHTTPClient(c kinesis.HTTPClient) error {
	switch c := c.(type) {
	case nil:
		return fmt.Errorf("the client has no HTTPClient")
	case *awshttp.BuildableClient:
		return nil
	case *http.Client:
		switch c.Transport.(type) {
		case nil, *http.Transport:
			return nil
		}
		return fmt.Errorf("the client's HTTP transport is %T: a RoundTripper of its own may read the SDK's request context (operation, signing), which a direct request does not carry", c.Transport)
	}
	return fmt.Errorf("the client's HTTPClient is %T, neither the SDK's BuildableClient nor an *http.Client over an *http.Transport: it may read the SDK's request context (operation, signing), which a direct request does not carry", c)
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
