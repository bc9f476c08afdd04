package telemetry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// meters is an SDK provider with a manual reader, and the Requests of stream "s" made from it.
type meters struct {
	t      *testing.T
	reader *sdkmetric.ManualReader
	req    *Requests
}

func newMeters(t *testing.T) *meters {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	req, err := NewRequests(mp.Meter("test"), "s")
	require.NoError(t, err)
	return &meters{t: t, reader: r, req: req}
}

// point is one data point of a collected metric: its attributes and its value (a histogram's
// count).
type point struct {
	attrs map[string]string
	value float64
}

// collect returns the data points of the metric called name, and its unit.
func (m *meters) collect(name string) ([]point, string) {
	m.t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(m.t, m.reader.Collect(context.Background(), &rm))
	attrs := func(s attribute.Set) map[string]string {
		out := map[string]string{}
		for _, kv := range s.ToSlice() {
			out[string(kv.Key)] = kv.Value.Emit()
		}
		return out
	}
	var pts []point
	unit := ""
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			if md.Name != name {
				continue
			}
			unit = md.Unit
			switch d := md.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					pts = append(pts, point{attrs(p.Attributes), float64(p.Value)})
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					pts = append(pts, point{attrs(p.Attributes), float64(p.Count)})
				}
			default:
				m.t.Fatalf("%s: unexpected data %T", name, md.Data)
			}
		}
	}
	return pts, unit
}

// counts returns kinesub.requests by operation and outcome ("op/outcome").
func (m *meters) counts() map[string]float64 {
	m.t.Helper()
	pts, _ := m.collect("kinesub.requests")
	out := map[string]float64{}
	for _, p := range pts {
		out[p.attrs[string(AttrOperation)]+"/"+p.attrs[string(AttrOutcome)]] += p.value
	}
	return out
}

// TestOutcome classifies errors as a request's outcome: the throttling exceptions of Kinesis
// and DynamoDB, however wrapped, are "throttled".
func TestOutcome(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, OutcomeOK},
		{&types.ProvisionedThroughputExceededException{}, OutcomeThrottled},
		{fmt.Errorf("GetRecords: %w", &types.LimitExceededException{}), OutcomeThrottled},
		{&types.KMSThrottlingException{}, OutcomeThrottled},
		{fmt.Errorf("lease: renew: %w", &ddbtypes.ProvisionedThroughputExceededException{}), OutcomeThrottled},
		{&ddbtypes.RequestLimitExceeded{}, OutcomeThrottled},
		{&ddbtypes.ThrottlingException{}, OutcomeThrottled},
		{&types.ExpiredIteratorException{}, OutcomeError},
		{&ddbtypes.ConditionalCheckFailedException{}, OutcomeError},
		{context.DeadlineExceeded, OutcomeError},
	} {
		require.Equal(t, tc.want, Outcome(tc.err), "%T %v", tc.err, tc.err)
	}
}

// TestRequests: each call is one kinesub.requests count and one kinesub.request.duration
// measurement, with the names, units and attributes of docs/metrics.md.
func TestRequests(t *testing.T) {
	mt := newMeters(t)
	ctx := context.Background()
	start := time.Now()
	mt.req.Record(ctx, "GetRecords", start, nil)
	mt.req.Record(ctx, "GetRecords", start, nil)
	mt.req.Record(ctx, "GetRecords", start, &types.ProvisionedThroughputExceededException{})
	mt.req.Record(ctx, "lease.Renew", start, errors.New("down"))

	want := []point{
		{map[string]string{"messaging.system": "aws_kinesis", "messaging.destination.name": "s",
			"kinesub.operation": "GetRecords", "kinesub.outcome": "ok"}, 2},
		{map[string]string{"messaging.system": "aws_kinesis", "messaging.destination.name": "s",
			"kinesub.operation": "GetRecords", "kinesub.outcome": "throttled"}, 1},
		{map[string]string{"messaging.system": "aws_kinesis", "messaging.destination.name": "s",
			"kinesub.operation": "lease.Renew", "kinesub.outcome": "error"}, 1},
	}
	pts, unit := mt.collect("kinesub.requests")
	require.Equal(t, "{request}", unit)
	require.ElementsMatch(t, want, pts)
	pts, unit = mt.collect("kinesub.request.duration")
	require.Equal(t, "s", unit)
	require.ElementsMatch(t, want, pts)
}
