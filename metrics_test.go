package kinesub

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/gostream/kinesub/internal/faultproxy"
	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// meters is an OpenTelemetry SDK provider with a manual reader: what an application that
// exports kinesub's metrics would see, collected on demand.
type meters struct {
	t        *testing.T
	provider *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
}

func newMeters(t *testing.T) *meters {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return &meters{t: t, provider: mp, reader: r}
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
	var pts []point
	unit := ""
	attrs := func(s attribute.Set) map[string]string {
		out := map[string]string{}
		for _, kv := range s.ToSlice() {
			out[string(kv.Key)] = kv.Value.Emit()
		}
		return out
	}
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
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					pts = append(pts, point{attrs(p.Attributes), p.Value})
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					pts = append(pts, point{attrs(p.Attributes), float64(p.Value)})
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					pts = append(pts, point{attrs(p.Attributes), p.Value})
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					pts = append(pts, point{attrs(p.Attributes), float64(p.Count)})
				}
			default:
				m.t.Fatalf("metric %s: unexpected data %T", name, md.Data)
			}
		}
	}
	return pts, unit
}

// sum adds up the points of metric name whose attributes include every pair of match.
func (m *meters) sum(name string, match ...string) float64 {
	m.t.Helper()
	pts, _ := m.collect(name)
	total := 0.0
	for _, p := range pts {
		if matches(p.attrs, match) {
			total += p.value
		}
	}
	return total
}

// byShard returns the points of metric name whose attributes include match, by shard id.
func (m *meters) byShard(name string, match ...string) map[string]float64 {
	m.t.Helper()
	pts, _ := m.collect(name)
	out := map[string]float64{}
	for _, p := range pts {
		if matches(p.attrs, match) {
			out[p.attrs[string(attrShard)]] += p.value
		}
	}
	return out
}

func matches(attrs map[string]string, match []string) bool {
	for i := 0; i+1 < len(match); i += 2 {
		if attrs[match[i]] != match[i+1] {
			return false
		}
	}
	return true
}

func keys(m map[string]float64) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestMetricsConsumeAndAck publishes and consumes 500 records on two shards with one meter
// provider, and checks what an operator's dashboard would show: every record sent, delivered
// and acked once, both leases held, the lag of both shards, checkpoints written, the calls
// made, and both leases released at Close.
func TestMetricsConsumeAndAck(t *testing.T) {
	done := noLeaks(t)
	const records = 500
	mt := newMeters(t)
	s := newStream(t, 2)
	pub, err := NewPublisher(s.c, s.name, WithPublishMeterProvider(mt.provider))
	require.NoError(t, err)
	recs := make([]Record, records)
	for i := range recs {
		recs[i] = Record{PartitionKey: "key-" + string(rune('a'+i%8)), Data: []byte("payload")}
	}
	require.NoError(t, pub.PublishBatch(context.Background(), recs))
	require.EqualValues(t, records, mt.sum("messaging.client.sent.messages", string(attrDestination), s.name))
	require.Zero(t, mt.sum("kinesub.publish.failures"))
	require.Positive(t, mt.sum("kinesub.requests", string(attrOperation), "PutRecords", string(attrOutcome), outcomeOK))

	sub, err := Subscribe(context.Background(), s.c, s.name,
		testOpts(lease.NewMemory(), WithStartAt(Horizon()), WithMeterProvider(mt.provider))...)
	require.NoError(t, err)
	got := recv(t, sub, records, true)
	require.Len(t, got, records)
	require.NoError(t, sub.Commit(context.Background()))

	shards := s.shardIDs()
	sort.Strings(shards)
	base := []string{string(attrSystem), systemKinesis, string(attrDestination), s.name}
	eventually(t, 30*time.Second, "all consumed", func() bool {
		return mt.sum("messaging.client.consumed.messages", base...) == records
	})
	require.EqualValues(t, records, mt.sum("kinesub.records.acked", base...))
	require.Zero(t, mt.sum("kinesub.records.nacked"))
	require.Equal(t, shards, keys(mt.byShard("messaging.client.consumed.messages")), "records of both shards consumed")
	require.EqualValues(t, 2, mt.sum("kinesub.leases.held", base...))
	behind := mt.byShard("kinesub.shard.millis_behind_latest", base...)
	require.Equal(t, shards, keys(behind), "lag reported for both shards")
	pts, unit := mt.collect("kinesub.shard.millis_behind_latest")
	require.Equal(t, "ms", unit)
	for _, p := range pts {
		require.GreaterOrEqual(t, p.value, 0.0)
	}
	require.Zero(t, mt.sum("kinesub.in_flight", base...), "everything acked")
	require.GreaterOrEqual(t, mt.sum("kinesub.checkpoint.writes", string(attrResult), "ok"), 1.0)
	require.Zero(t, mt.sum("kinesub.checkpoint.writes", string(attrResult), "fenced"))
	timed := mt.sum("kinesub.message.settle.duration", base...)
	require.Positive(t, timed)
	require.LessOrEqual(t, timed, float64(records))
	for _, op := range []string{"DescribeStreamSummary", "ListShards", "GetShardIterator", "GetRecords", "lease.Acquire", "lease.List", "lease.Checkpoint"} {
		require.Positive(t, mt.sum("kinesub.requests", string(attrOperation), op, string(attrOutcome), outcomeOK), op)
		require.Positive(t, mt.sum("kinesub.request.duration", string(attrOperation), op), op)
	}
	require.EqualValues(t, 2, mt.sum("kinesub.lease.transitions", string(attrTransition), transAcquired))

	require.NoError(t, sub.Close(context.Background()))
	require.Equal(t, map[string]float64{shards[0]: 1, shards[1]: 1},
		mt.byShard("kinesub.lease.transitions", string(attrTransition), transReleased), "both leases released at Close")
	require.Zero(t, mt.sum("kinesub.leases.held"), "a closed subscriber reports no held lease")
	pts, _ = mt.collect("messaging.client.consumed.messages")
	require.Empty(t, pts, "a closed subscriber's observed counters are no longer reported")
	require.EqualValues(t, records, mt.sum("messaging.client.sent.messages"), "the publisher's are")
	done()
}

// TestMetricsThrottledRequests throttles about half of the GetRecords calls at a proxy in
// front of Kinesis: every throttle the proxy answered is counted as a throttled GetRecords
// request, none as an error.
func TestMetricsThrottledRequests(t *testing.T) {
	mt := newMeters(t)
	s := newStream(t, 2)
	s.publish(400, 8)
	kp := newFaultProxy(t, testenv.KinesisEndpointVar, faultproxy.Plan{
		Seed:   7,
		Rate:   0.5,
		Ops:    []string{targetGetRecords},
		Faults: []faultproxy.Fault{{Kind: faultproxy.Throttle, Weight: 1}},
	})
	sub, err := Subscribe(context.Background(), kinesisThrough(t, kp), s.name,
		testOpts(lease.NewMemory(), WithStartAt(Horizon()), WithBatchSize(50), WithMeterProvider(mt.provider))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close(context.Background()) })
	var oc orderChecker
	require.Equal(t, 400, consume(t, sub, &oc, s.expected(), 2*time.Minute))

	// Stop faulting; then every throttle the proxy answered reaches the subscriber as one
	// throttled GetRecords request (a call may still be on its way back).
	kp.SetRate(0)
	faulted := kp.Stats()["Throttle/"+targetGetRecords]
	require.Positive(t, faulted)
	op := []string{string(attrOperation), "GetRecords", string(attrOutcome)}
	eventually(t, 30*time.Second, "every throttle counted", func() bool {
		return mt.sum("kinesub.requests", append(op, outcomeThrottled)...) == float64(faulted)
	})
	require.EqualValues(t, faulted, mt.sum("kinesub.request.duration", append(op, outcomeThrottled)...))
	require.Positive(t, mt.sum("kinesub.requests", append(op, outcomeOK)...))
	require.Zero(t, mt.sum("kinesub.requests", append(op, outcomeError)...), "a throttle is not an error")
	require.NoError(t, sub.Close(context.Background()))
}

// TestMetricsStolenAndLost has a second subscriber steal a lease from the first: the thief
// counts the shard as stolen, its previous owner as lost, and each holds one lease.
func TestMetricsStolenAndLost(t *testing.T) {
	f := newFakeStream("metrics-steal", 4)
	store := lease.NewMemory()
	ma, mb := newMeters(t), newMeters(t)
	// A live peer holds two of the four shards, a the other two: with b, the shares are 1 or
	// 2, and b, holding none, steals one from a (the first by name of the owners at the
	// ceiling), which keeps its share and hands nothing back.
	holdAsPeer(t, store, f.stream, "c", peerLive, f.shards[2].id, f.shards[3].id)
	const ttl = 3 * time.Second
	subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithMeterProvider(ma.provider), WithLeaseTTL(ttl),
		WithBalanceInterval(time.Hour))...)
	eventually(t, 30*time.Second, "a holds two shards", func() bool { return ma.sum("kinesub.leases.held") == 2 })

	subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("b"), WithMeterProvider(mb.provider),
		WithLeaseTTL(ttl), WithBalanceInterval(20*time.Millisecond))...)
	eventually(t, 30*time.Second, "b steals a shard and a loses it", func() bool {
		return mb.sum("kinesub.lease.transitions", string(attrTransition), transStolen) >= 1 &&
			ma.sum("kinesub.lease.transitions", string(attrTransition), transLost) >= 1
	})
	eventually(t, 30*time.Second, "what b stole, a lost", func() bool {
		stolen := mb.byShard("kinesub.lease.transitions", string(attrTransition), transStolen)
		lost := ma.byShard("kinesub.lease.transitions", string(attrTransition), transLost)
		return slices.Equal(keys(stolen), keys(lost))
	})
	// a may also hand one back to b, which b then takes free.
	eventually(t, 30*time.Second, "b holds what it stole or took", func() bool {
		return mb.sum("kinesub.leases.held") == mb.sum("kinesub.lease.transitions", string(attrTransition), transStolen)+
			mb.sum("kinesub.lease.transitions", string(attrTransition), transAcquired)
	})
}

// TestMetricsNacks counts Nacks by requeue, on a fake stream.
func TestMetricsNacks(t *testing.T) {
	f := newFakeStream("metrics-nack", 1)
	f.add(0, time.Now(), "a", "b", "c", "d")
	mt := newMeters(t)
	sub := subscribeFake(t, f, fakeOpts(WithStartAt(Horizon()), WithMeterProvider(mt.provider))...)
	got := recv(t, sub, 4, false)
	require.NoError(t, got[0].Ack(context.Background()))
	require.NoError(t, got[1].Ack(context.Background()))
	require.NoError(t, got[2].Nack(context.Background()))
	require.NoError(t, got[3].Nack(context.Background()))
	require.ErrorIs(t, got[3].Ack(context.Background()), ErrAlreadySettled)
	// The dispatcher counts a record once its hand-off returns, which may be after the
	// consumer received it.
	eventually(t, 30*time.Second, "4 consumed", func() bool { return mt.sum("messaging.client.consumed.messages") == 4 })
	require.EqualValues(t, 2, mt.sum("kinesub.records.acked"))
	require.EqualValues(t, 2, mt.sum("kinesub.records.nacked"))
	require.EqualValues(t, 2, mt.sum("kinesub.in_flight"), "a nacked record stays unsettled")
}

// TestMeterProviderOptionRejectsNil checks that a nil provider is refused before any I/O.
func TestMeterProviderOptionRejectsNil(t *testing.T) {
	_, err := subscribe(context.Background(), newFakeStream("s", 1), "s", WithMeterProvider(nil))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "WithMeterProvider")
	_, err = newPublisher(newFakeStream("s", 1), "s", WithPublishMeterProvider(nil))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "WithPublishMeterProvider")
}

// TestMetricsCheckpointResults counts checkpoint writes through the metered store by result,
// and every store call by operation.
func TestMetricsCheckpointResults(t *testing.T) {
	mt := newMeters(t)
	m, err := newMetrics(mt.provider, "s")
	require.NoError(t, err)
	store := m.store(lease.NewMemory(), "s/")
	ctx := context.Background()
	ok, err := store.Acquire(ctx, "s/shard-1", "a", time.Minute)
	require.True(t, ok)
	require.NoError(t, err)
	a := lease.Tenure{Owner: "a", Counter: 1}
	ok, err = store.Checkpoint(ctx, "s/shard-1", a, lease.Checkpoint{Sequence: "1"})
	require.True(t, ok)
	require.NoError(t, err)
	ok, err = store.Checkpoint(ctx, "s/shard-1", lease.Tenure{Owner: "b", Counter: 1}, lease.Checkpoint{Sequence: "2"})
	require.False(t, ok)
	require.NoError(t, err)
	_, err = store.Checkpoint(ctx, "s/shard-1", a, lease.Checkpoint{})
	require.ErrorIs(t, err, lease.ErrInvalidArgument)

	for result, want := range map[string]float64{"ok": 1, "fenced": 1, "error": 1} {
		require.Equal(t, map[string]float64{"shard-1": want},
			mt.byShard("kinesub.checkpoint.writes", string(attrResult), result, string(attrDestination), "s"), result)
	}
	require.EqualValues(t, 1, mt.sum("kinesub.requests", string(attrOperation), "lease.Acquire", string(attrOutcome), outcomeOK))
	require.EqualValues(t, 2, mt.sum("kinesub.requests", string(attrOperation), "lease.Checkpoint", string(attrOutcome), outcomeOK),
		"a fenced write is a call that worked")
	require.EqualValues(t, 1, mt.sum("kinesub.requests", string(attrOperation), "lease.Checkpoint", string(attrOutcome), outcomeError))
}

// TestMetricsPublishFailures counts the records a Publisher could not write.
func TestMetricsPublishFailures(t *testing.T) {
	mt := newMeters(t)
	f := newFakeStream("s", 1) // refuses every put
	pub, err := newPublisher(f, "s", WithPublishMeterProvider(mt.provider))
	require.NoError(t, err)
	_, err = pub.Publish(context.Background(), "k", []byte("x"), nil)
	require.Error(t, err)
	err = pub.PublishBatch(context.Background(), []Record{{PartitionKey: "k", Data: []byte("a")}, {PartitionKey: "k", Data: []byte("b")}})
	var perr *PublishError
	require.ErrorAs(t, err, &perr)
	require.EqualValues(t, 3, mt.sum("kinesub.publish.failures", string(attrDestination), "s"))
	require.Zero(t, mt.sum("messaging.client.sent.messages"))
	require.EqualValues(t, 1, mt.sum("kinesub.requests", string(attrOperation), "PutRecord", string(attrOutcome), outcomeError))
	require.EqualValues(t, 1, mt.sum("kinesub.requests", string(attrOperation), "PutRecords", string(attrOutcome), outcomeError))
}

// TestMetricsPullStyles: records pulled with All and Batches count as consumed when yielded,
// and a Batch.Ack counts each record it settles as acked.
func TestMetricsPullStyles(t *testing.T) {
	f := newFakeStream("metrics-pull", 1)
	addNumbered(f, 0, 0, 100)
	mt := newMeters(t)
	sub := subscribeFake(t, f, fakeOpts(WithStartAt(Horizon()), WithBatchSize(30), WithMeterProvider(mt.provider))...)
	ctx := context.Background()
	n := 0
	for m, err := range sub.All(ctx) {
		require.NoError(t, err)
		require.NoError(t, m.Ack(ctx))
		if n++; n == 10 {
			break
		}
	}
	require.EqualValues(t, 10, mt.sum("messaging.client.consumed.messages"))
	for b, err := range sub.Batches(ctx) {
		require.NoError(t, err)
		require.NoError(t, b.Ack(ctx))
		require.NoError(t, b.Ack(ctx), "a second Ack settles nothing more")
		if n += len(b.Messages()); n == 100 {
			break
		}
	}
	require.EqualValues(t, 100, mt.sum("messaging.client.consumed.messages"))
	require.EqualValues(t, 100, mt.sum("kinesub.records.acked"))
}

// TestMetricsLeaseCapacity: with the DynamoDB store, the capacity its calls consumed is counted
// by operation: the table listed, the leases taken, the heartbeat renewed (a Steal of its own
// row) and read.
func TestMetricsLeaseCapacity(t *testing.T) {
	mt := newMeters(t)
	s := newStream(t, 2)
	sub, err := Subscribe(context.Background(), s.c, s.name, testOpts(dynamoStore(t), WithMeterProvider(mt.provider))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close(context.Background()) })
	for _, op := range []string{"lease.List", "lease.Acquire", "lease.Steal", "lease.Read"} {
		eventually(t, 30*time.Second, op+" capacity counted", func() bool {
			return mt.sum("kinesub.lease.consumed_capacity", string(attrOperation), op) > 0
		})
	}
	require.NoError(t, sub.Close(context.Background()))
}

// TestSettleSampleFollowsPages: the settle duration times the first delivery of every page and
// one in settleSample of the rest, so a shard receiving a record at a time has each one timed
// and a busy shard's pages of thousands only a sample, whichever way they are consumed.
func TestSettleSampleFollowsPages(t *testing.T) {
	mt := newMeters(t)
	m, err := newMetrics(mt.provider, "orders")
	require.NoError(t, err)
	w := &worker{stats: m.shard("shardId-000000000000")}
	// page returns a page of size deliveries, the first at offset lead (the records before it
	// were not delivered: an aggregate that could not be read, say).
	page := func(size, lead int) (*fetched, []*Message) {
		f := newFetched(&shardPage{shard: w, lead: uint32(lead)}, size)
		for i := range size {
			f.add().off = uint32(lead + i)
		}
		f.seal(lead+size, true)
		return f, f.messages(0)
	}
	timed := func(ms []*Message) int {
		n := 0
		for _, m := range ms {
			if h := m.handedAt(); h != nil && *h != 0 {
				n++
			}
		}
		return n
	}
	// One at a time (Messages, All).
	single, large := 0, 0
	for range 100 {
		_, ms := page(1, 0)
		m.consumed(ms[0])
		single += timed(ms)
		_, ms = page(1, 3)
		m.consumed(ms[0])
		single += timed(ms)
	}
	require.Equal(t, 200, single, "a record a page: every one timed")
	for range 2 {
		_, ms := page(10_000, 0)
		for _, msg := range ms {
			m.consumed(msg)
		}
		large += timed(ms)
	}
	require.InDelta(t, 2+20_000/settleSample, large, 2, "pages of 10,000: their first deliveries and one in settleSample")
	// A page at once (Batches).
	batched := 0
	for range 2 {
		f, ms := page(10_000, 0)
		m.consumedPage(f, 0)
		batched += timed(ms)
	}
	require.InDelta(t, 2+20_000/settleSample, batched, 2)
	f, ms := page(300, 3)
	m.consumedPage(f, 0)
	require.Equal(t, 2, timed(ms), "a page whose first delivery is at offset 3: it and the one at offset 256")
	f, ms = page(600, 0)
	for _, msg := range ms[:100] {
		m.consumed(msg)
	}
	m.consumedPage(f, 100)
	require.Equal(t, 3, timed(ms), "a page taken one at a time, then the rest at once: offsets 0, 256 and 512")
}

// TestMetricsAckedLate: an Ack that comes after its shard's lease was lost moves no checkpoint,
// and kinesub.records.acked_late counts it, so that a service can see acks that did not count.
func TestMetricsAckedLate(t *testing.T) {
	f := newFakeStream("metrics-late", 1)
	f.add(0, time.Now(), "a", "b", "c")
	mt := newMeters(t)
	sub := subscribeFake(t, f, fakeOpts(WithStartAt(Horizon()), WithMeterProvider(mt.provider))...)
	got := recv(t, sub, 3, false)
	ctx := context.Background()
	require.NoError(t, got[0].Ack(ctx))
	ws, _ := sub.table.held()
	require.Len(t, ws, 1)
	w := ws[0]
	w.lose("lost in a test")
	eventually(t, 5*time.Second, "the shard lost", func() bool { return w.state() == stateLost })
	require.ErrorIs(t, got[1].Ack(ctx), ErrAckedLate)
	require.EqualValues(t, 1, mt.sum("kinesub.records.acked_late"))
	require.EqualValues(t, 2, mt.sum("kinesub.records.acked"))
}
