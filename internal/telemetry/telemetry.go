// Package telemetry counts the calls kinesub makes by wrapping the two things it calls: the
// Kinesis client (Kinesis) and the lease store (Store). Each call becomes one kinesub.requests
// count and one kinesub.request.duration measurement (Requests), named by the Kinesis
// operation or by "lease." and the store method, with its outcome: ok, throttled or error.
//
// The root package makes its other instruments itself (metrics.go) and learns what the store
// wrapper sees through Store's callbacks: the capacity a call consumed and the result of each
// checkpoint write. This package imports nothing of the root. The names, units and attributes
// are those of docs/metrics.md; dashboards and alerts are written against them, so they do not
// change.
package telemetry

import (
	"context"
	"errors"
	"sync"
	"time"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Attribute keys of the request instruments, which the root's instruments carry too.
const (
	AttrSystem      = attribute.Key("messaging.system")
	AttrDestination = attribute.Key("messaging.destination.name")
	AttrOperation   = attribute.Key("kinesub.operation")
	AttrOutcome     = attribute.Key("kinesub.outcome")
)

// SystemKinesis is the value of messaging.system.
const SystemKinesis = "aws_kinesis"

// Values of kinesub.outcome.
const (
	OutcomeOK        = "ok"
	OutcomeThrottled = "throttled"
	OutcomeError     = "error"
)

// DurationBuckets are the bucket bounds of kinesub's duration histograms, in seconds: from a
// millisecond (an in-memory store) to a minute (a consumer stuck on a record).
var DurationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Requests counts the calls made to Kinesis and to the lease store of one stream, by operation
// and outcome. It is safe for concurrent use.
type Requests struct {
	requests metric.Int64Counter
	duration metric.Float64Histogram
	stream   attribute.KeyValue

	mu   sync.Mutex
	sets map[[2]string]metric.MeasurementOption // (operation, outcome) → attributes
}

// NewRequests makes the request instruments of stream from meter.
func NewRequests(meter metric.Meter, stream string) (*Requests, error) {
	r := &Requests{stream: AttrDestination.String(stream), sets: map[[2]string]metric.MeasurementOption{}}
	var errRequests, errDuration error
	r.requests, errRequests = meter.Int64Counter("kinesub.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Calls made to Kinesis and to the lease store, by operation and outcome."))
	r.duration, errDuration = meter.Float64Histogram("kinesub.request.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of the calls made to Kinesis and to the lease store."),
		metric.WithExplicitBucketBoundaries(DurationBuckets...))
	return r, errors.Join(errRequests, errDuration)
}

// Record counts one call of op that started at start and returned err.
func (r *Requests) Record(ctx context.Context, op string, start time.Time, err error) {
	d := time.Since(start).Seconds()
	attrs := r.attrs(op, Outcome(err))
	r.requests.Add(ctx, 1, attrs)
	r.duration.Record(ctx, d, attrs)
}

func (r *Requests) attrs(op, out string) metric.MeasurementOption {
	k := [2]string{op, out}
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.sets[k]
	if !ok {
		a = metric.WithAttributeSet(attribute.NewSet(AttrSystem.String(SystemKinesis), r.stream,
			AttrOperation.String(op), AttrOutcome.String(out)))
		r.sets[k] = a
	}
	return a
}

// Outcome classifies a call's error: the throttling exceptions of Kinesis and DynamoDB are
// "throttled", any other error "error".
func Outcome(err error) string {
	if err == nil {
		return OutcomeOK
	}
	var (
		kThrottle *types.ProvisionedThroughputExceededException
		kLimit    *types.LimitExceededException
		kKMS      *types.KMSThrottlingException
		dThrottle *ddbtypes.ProvisionedThroughputExceededException
		dLimit    *ddbtypes.RequestLimitExceeded
		dThrottl2 *ddbtypes.ThrottlingException
	)
	switch {
	case errors.As(err, &kThrottle), errors.As(err, &kLimit), errors.As(err, &kKMS),
		errors.As(err, &dThrottle), errors.As(err, &dLimit), errors.As(err, &dThrottl2):
		return OutcomeThrottled
	}
	return OutcomeError
}
