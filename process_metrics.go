package kinesub

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// processMetrics are Process's instruments, made from the subscriber's meter (metrics.go) and
// listed in the README with the others. Its methods do nothing on a nil *processMetrics (a
// Subscriber assembled by hand in a test). Failures and dead letters are rare and counted as
// they happen; the running handlers are observed when the provider collects; the wait of a
// record behind its key is timed on a sample (waitSample), as the settle duration is.
type processMetrics struct {
	failures metric.Int64Counter
	dead     metric.Int64Counter
	wait     metric.Float64Histogram
	running  metric.Int64ObservableGauge
	reg      metric.Registration
	waitOn   bool
	ctx      context.Context
}

func newProcessMetrics(m *metrics, running func() int) (*processMetrics, error) {
	if m == nil {
		return nil, nil
	}
	pm := &processMetrics{ctx: context.Background()}
	var e1, e2, e3, e4 error
	pm.running, e1 = m.meter.Int64ObservableGauge("kinesub.process.running", metric.WithUnit("{handler}"),
		metric.WithDescription("Handlers that Process is running now, across shards."))
	pm.failures, e2 = m.meter.Int64Counter("kinesub.process.failures", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts of Process's handler or dead-letter function that failed (an error or a panic)."))
	pm.dead, e3 = m.meter.Int64Counter("kinesub.records.dead_lettered", metric.WithUnit("{message}"),
		metric.WithDescription("Records that Process gave to the dead-letter function, which took them."))
	pm.wait, e4 = m.meter.Float64Histogram("kinesub.process.key_wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a record waited in Process behind an earlier record of its order key."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	if err := errors.Join(e1, e2, e3, e4); err != nil {
		return nil, fmt.Errorf("kinesub: metrics: %w", err)
	}
	all := metric.WithAttributeSet(attribute.NewSet(attrSystem.String(systemKinesis), m.stream))
	reg, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(pm.running, int64(running()), all)
		return nil
	}, pm.running)
	if err != nil {
		return nil, fmt.Errorf("kinesub: metrics: %w", err)
	}
	pm.reg = reg
	pm.waitOn = pm.wait.Enabled(pm.ctx)
	return pm, nil
}

// shardAttrs returns the attributes of m's shard.
func shardAttrs(m *Message) (metric.MeasurementOption, bool) {
	w := m.shard()
	if w == nil || w.stats == nil {
		return nil, false
	}
	return w.stats.attrs, true
}

// failed counts a failed attempt of m.
func (pm *processMetrics) failed(m *Message) {
	if pm == nil {
		return
	}
	if a, ok := shardAttrs(m); ok {
		pm.failures.Add(pm.ctx, 1, a)
	}
}

// deadLettered counts m taken by the dead-letter function.
func (pm *processMetrics) deadLettered(m *Message) {
	if pm == nil {
		return
	}
	if a, ok := shardAttrs(m); ok {
		pm.dead.Add(pm.ctx, 1, a)
	}
}

// waitTimed reports whether the key wait is measured at all.
func (pm *processMetrics) waitTimed() bool { return pm != nil && pm.waitOn }

// keyWait records how long j waited behind its key.
func (pm *processMetrics) keyWait(j *job, d time.Duration) {
	if pm == nil {
		return
	}
	if a, ok := shardAttrs(j.m); ok {
		pm.wait.Record(pm.ctx, d.Seconds(), a)
	}
}

// stop ends the running handlers' reports.
func (pm *processMetrics) stop() {
	if pm != nil && pm.reg != nil {
		_ = pm.reg.Unregister()
	}
}
