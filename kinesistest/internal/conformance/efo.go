package conformance

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/kinesistest"
)

// register registers a consumer and waits until it is ACTIVE.
func register(t *testing.T, c *kinesis.Client, stream, name string) (streamARN, consumerARN string) {
	t.Helper()
	sum, err := c.DescribeStreamSummary(ctx(t), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatalf("DescribeStreamSummary: %v", err)
	}
	streamARN = aws.ToString(sum.StreamDescriptionSummary.StreamARN)
	out, err := c.RegisterStreamConsumer(ctx(t), &kinesis.RegisterStreamConsumerInput{StreamARN: aws.String(streamARN), ConsumerName: aws.String(name)})
	if err != nil {
		t.Fatalf("RegisterStreamConsumer: %v", err)
	}
	if out.Consumer.ConsumerStatus != types.ConsumerStatusCreating {
		t.Fatalf("a new consumer is %s, want CREATING", out.Consumer.ConsumerStatus)
	}
	for {
		d, err := c.DescribeStreamConsumer(ctx(t), &kinesis.DescribeStreamConsumerInput{ConsumerARN: out.Consumer.ConsumerARN})
		if err != nil {
			t.Fatalf("DescribeStreamConsumer: %v", err)
		}
		if d.ConsumerDescription.ConsumerStatus == types.ConsumerStatusActive {
			return streamARN, aws.ToString(out.Consumer.ConsumerARN)
		}
		select {
		case <-ctx(t).Done():
			t.Fatal("the consumer never became ACTIVE")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func testConsumers(t *testing.T, b Backend) {
	clk := newClock()
	c := b.Server(t, kinesistest.WithClock(clk.Now), kinesistest.WithStatusDelay(time.Second)).Client()
	name := newStreamClock(t, c, clk, 1)
	sum, err := c.DescribeStreamSummary(ctx(t), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
	if err != nil {
		t.Fatalf("DescribeStreamSummary: %v", err)
	}
	arn := sum.StreamDescriptionSummary.StreamARN
	reg, err := c.RegisterStreamConsumer(ctx(t), &kinesis.RegisterStreamConsumerInput{StreamARN: arn, ConsumerName: aws.String("app")})
	if err != nil {
		t.Fatalf("RegisterStreamConsumer: %v", err)
	}
	status := func() types.ConsumerStatus {
		d, err := c.DescribeStreamConsumer(ctx(t), &kinesis.DescribeStreamConsumerInput{StreamARN: arn, ConsumerName: aws.String("app")})
		if err != nil {
			t.Fatalf("DescribeStreamConsumer: %v", err)
		}
		if aws.ToString(d.ConsumerDescription.ConsumerARN) != aws.ToString(reg.Consumer.ConsumerARN) {
			t.Fatalf("described ARN %s, want %s", aws.ToString(d.ConsumerDescription.ConsumerARN), aws.ToString(reg.Consumer.ConsumerARN))
		}
		return d.ConsumerDescription.ConsumerStatus
	}
	if s := status(); s != types.ConsumerStatusCreating {
		t.Fatalf("before the status delay: %s, want CREATING", s)
	}
	clk.Advance(time.Second)
	if s := status(); s != types.ConsumerStatusActive {
		t.Fatalf("after the status delay: %s, want ACTIVE", s)
	}
	_, err = c.RegisterStreamConsumer(ctx(t), &kinesis.RegisterStreamConsumerInput{StreamARN: arn, ConsumerName: aws.String("app")})
	var inUse *types.ResourceInUseException
	if !errors.As(err, &inUse) {
		t.Fatalf("registering a name twice: %v, want ResourceInUseException", err)
	}
	for _, n := range []string{"b", "c"} {
		if _, err := c.RegisterStreamConsumer(ctx(t), &kinesis.RegisterStreamConsumerInput{StreamARN: arn, ConsumerName: aws.String(n)}); err != nil {
			t.Fatalf("RegisterStreamConsumer %s: %v", n, err)
		}
	}
	var names []string
	p := kinesis.NewListStreamConsumersPaginator(c, &kinesis.ListStreamConsumersInput{StreamARN: arn, MaxResults: aws.Int32(2)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx(t))
		if err != nil {
			t.Fatalf("ListStreamConsumers: %v", err)
		}
		for _, co := range page.Consumers {
			names = append(names, aws.ToString(co.ConsumerName))
		}
	}
	if !slices.Equal(names, []string{"app", "b", "c"}) {
		t.Fatalf("listed %v, want [app b c]", names)
	}
	if _, err := c.DeregisterStreamConsumer(ctx(t), &kinesis.DeregisterStreamConsumerInput{ConsumerARN: reg.Consumer.ConsumerARN}); err != nil {
		t.Fatalf("DeregisterStreamConsumer: %v", err)
	}
	if s := status(); s != types.ConsumerStatusDeleting {
		t.Fatalf("after deregistering: %s, want DELETING", s)
	}
	clk.Advance(time.Second)
	_, err = c.DescribeStreamConsumer(ctx(t), &kinesis.DescribeStreamConsumerInput{ConsumerARN: reg.Consumer.ConsumerARN})
	var nf *types.ResourceNotFoundException
	if !errors.As(err, &nf) {
		t.Fatalf("a deregistered consumer: %v, want ResourceNotFoundException", err)
	}
	_, err = c.DeleteStream(ctx(t), &kinesis.DeleteStreamInput{StreamName: aws.String(name)})
	if !errors.As(err, &inUse) {
		t.Fatalf("DeleteStream with consumers: %v, want ResourceInUseException", err)
	}
}

// newStreamClock creates a stream on a server whose statuses wait on clk.
func newStreamClock(t *testing.T, c *kinesis.Client, clk *clock, n int32) string {
	t.Helper()
	name := testenv.Name(t)
	if _, err := c.CreateStream(ctx(t), &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(n)}); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	clk.Advance(time.Hour)
	return name
}

// subscribe calls SubscribeToShard on a client of its own (see Server.Client) and returns the
// event stream, closed when the test ends.
func subscribe(t *testing.T, srv *kinesistest.Server, consumerARN, shard string, pos types.StartingPosition) *kinesis.SubscribeToShardEventStream {
	t.Helper()
	out, err := srv.Client().SubscribeToShard(ctx(t), &kinesis.SubscribeToShardInput{ConsumerARN: aws.String(consumerARN), ShardId: aws.String(shard), StartingPosition: &pos})
	if err != nil {
		t.Fatalf("SubscribeToShard: %v", err)
	}
	es := out.GetStream()
	t.Cleanup(func() { _ = es.Close() })
	return es
}

// next returns the next event, or nil when the stream ended.
func next(t *testing.T, es *kinesis.SubscribeToShardEventStream) *types.SubscribeToShardEvent {
	t.Helper()
	select {
	case ev, ok := <-es.Events():
		if !ok {
			if err := es.Err(); err != nil {
				t.Fatalf("event stream: %v", err)
			}
			return nil
		}
		e, ok := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent)
		if !ok {
			t.Fatalf("event of type %T", ev)
		}
		return &e.Value
	case <-ctx(t).Done():
		t.Fatal("no event within a minute")
		return nil
	}
}

// collect reads events until it has n records.
func collect(t *testing.T, es *kinesis.SubscribeToShardEventStream, n int) ([]string, *types.SubscribeToShardEvent) {
	t.Helper()
	var got []string
	for {
		ev := next(t, es)
		if ev == nil {
			t.Fatalf("stream ended after %v, want %d records", got, n)
		}
		got = append(got, datas(ev.Records)...)
		if len(got) >= n {
			return got, ev
		}
	}
}

func testSubscribeToShard(t *testing.T, b Backend) {
	srv := b.Server(t)
	c := srv.Client()
	name := newStream(t, c, 1)
	_, consumer := register(t, c, name, "app")
	putRecords(t, c, name, "a", "b")
	es := subscribe(t, srv, consumer, "shardId-000000000000", types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon})
	got, ev := collect(t, es, 2)
	if !slices.Equal(got, []string{"data-a", "data-b"}) {
		t.Fatalf("subscription read %v, want [data-a data-b]", got)
	}
	putRecords(t, c, name, "c")
	got, ev2 := collect(t, es, 1)
	if !slices.Equal(got, []string{"data-c"}) || aws.ToString(ev2.ContinuationSequenceNumber) != aws.ToString(ev2.Records[0].SequenceNumber) {
		t.Fatalf("then %v with continuation %s, want [data-c] and its sequence number", got, aws.ToString(ev2.ContinuationSequenceNumber))
	}
	_ = ev
	_ = es.Close()
	// Resubscribing after the continuation reads on from there: the first subscription is over,
	// so the call is not refused.
	es = subscribeAgain(t, srv, consumer, types.StartingPosition{Type: types.ShardIteratorTypeAfterSequenceNumber, SequenceNumber: ev.ContinuationSequenceNumber})
	got, _ = collect(t, es, 1)
	if !slices.Equal(got, []string{"data-c"}) {
		t.Fatalf("after the continuation %v, want [data-c]", got)
	}
}

// subscribeAgain subscribes once the server has seen the previous subscription end.
func subscribeAgain(t *testing.T, srv *kinesistest.Server, consumer string, pos types.StartingPosition) *kinesis.SubscribeToShardEventStream {
	t.Helper()
	for {
		out, err := srv.Client().SubscribeToShard(ctx(t), &kinesis.SubscribeToShardInput{ConsumerARN: aws.String(consumer), ShardId: aws.String("shardId-000000000000"), StartingPosition: &pos})
		var inUse *types.ResourceInUseException
		if errors.As(err, &inUse) {
			select {
			case <-ctx(t).Done():
				t.Fatal("the closed subscription never ended on the server")
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			t.Fatalf("SubscribeToShard: %v", err)
		}
		es := out.GetStream()
		t.Cleanup(func() { _ = es.Close() })
		return es
	}
}

func testSubscribeTakeover(t *testing.T, b Backend) {
	clk := newClock()
	srv := b.Server(t, kinesistest.WithClock(clk.Now))
	c := srv.Client()
	name := newStream(t, c, 1)
	_, consumer := register(t, c, name, "app")
	pos := types.StartingPosition{Type: types.ShardIteratorTypeLatest}
	first := subscribe(t, srv, consumer, "shardId-000000000000", pos)
	next(t, first) // the subscription is live
	clk.Advance(4 * time.Second)
	_, err := srv.Client().SubscribeToShard(ctx(t), &kinesis.SubscribeToShardInput{ConsumerARN: aws.String(consumer), ShardId: aws.String("shardId-000000000000"), StartingPosition: &pos})
	var inUse *types.ResourceInUseException
	if !errors.As(err, &inUse) {
		t.Fatalf("a second subscription within 5 s: %v, want ResourceInUseException", err)
	}
	clk.Advance(time.Second)
	second := subscribe(t, srv, consumer, "shardId-000000000000", pos)
	next(t, second)
	for ev := next(t, first); ev != nil; ev = next(t, first) {
	}
	putRecords(t, c, name, "a")
	if got, _ := collect(t, second, 1); !slices.Equal(got, []string{"data-a"}) {
		t.Fatalf("the new subscription read %v, want [data-a]", got)
	}
}

func testSubscribeRate(t *testing.T, b Backend) {
	clk := newClock()
	srv := b.Server(t, kinesistest.WithClock(clk.Now), kinesistest.WithLimits(true))
	c := srv.Client()
	name := newStream(t, c, 1)
	_, consumer := register(t, c, name, "app")
	pos := types.StartingPosition{Type: types.ShardIteratorTypeLatest}
	first := subscribe(t, srv, consumer, "shardId-000000000000", pos)
	next(t, first)
	clk.Advance(999 * time.Millisecond)
	_, err := srv.Client().SubscribeToShard(ctx(t), &kinesis.SubscribeToShardInput{ConsumerARN: aws.String(consumer), ShardId: aws.String("shardId-000000000000"), StartingPosition: &pos}, noRetry)
	var le *types.LimitExceededException
	if !errors.As(err, &le) {
		t.Fatalf("a second call within a second: %v, want LimitExceededException", err)
	}
	clk.Advance(5 * time.Second)
	second := subscribe(t, srv, consumer, "shardId-000000000000", pos)
	next(t, second)
	// A call refused because the subscription is live counts toward the rate too.
	clk.Advance(time.Second)
	_, err = srv.Client().SubscribeToShard(ctx(t), &kinesis.SubscribeToShardInput{ConsumerARN: aws.String(consumer), ShardId: aws.String("shardId-000000000000"), StartingPosition: &pos}, noRetry)
	var inUse *types.ResourceInUseException
	if !errors.As(err, &inUse) {
		t.Fatalf("a call 1 s into a live subscription: %v, want ResourceInUseException", err)
	}
	clk.Advance(500 * time.Millisecond)
	_, err = srv.Client().SubscribeToShard(ctx(t), &kinesis.SubscribeToShardInput{ConsumerARN: aws.String(consumer), ShardId: aws.String("shardId-000000000000"), StartingPosition: &pos}, noRetry)
	if !errors.As(err, &le) {
		t.Fatalf("a call 500 ms after a refused one: %v, want LimitExceededException", err)
	}
}

func testSubscribeShardEnd(t *testing.T, b Backend) {
	srv := b.Server(t)
	c := srv.Client()
	name := newStream(t, c, 1)
	_, consumer := register(t, c, name, "app")
	putRecords(t, c, name, "a")
	if _, err := c.SplitShard(ctx(t), &kinesis.SplitShardInput{StreamName: aws.String(name), ShardToSplit: aws.String("shardId-000000000000"), NewStartingHashKey: aws.String("1000")}); err != nil {
		t.Fatalf("SplitShard: %v", err)
	}
	es := subscribe(t, srv, consumer, "shardId-000000000000", types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon})
	var got []string
	var last *types.SubscribeToShardEvent
	for ev := next(t, es); ev != nil; ev = next(t, es) {
		got = append(got, datas(ev.Records)...)
		last = ev
	}
	if !slices.Equal(got, []string{"data-a"}) || last == nil || len(last.ChildShards) != 2 || last.ContinuationSequenceNumber != nil {
		t.Fatalf("read %v, last event %+v; want [data-a] and an end with 2 children and no continuation", got, last)
	}
}

func testSubscribeLifetime(t *testing.T, b Backend) {
	clk := newClock()
	srv := b.Server(t, kinesistest.WithClock(clk.Now), kinesistest.WithSubscriptionLifetime(time.Minute), kinesistest.WithIdleEventInterval(10*time.Millisecond))
	c := srv.Client()
	name := newStream(t, c, 1)
	_, consumer := register(t, c, name, "app")
	es := subscribe(t, srv, consumer, "shardId-000000000000", types.StartingPosition{Type: types.ShardIteratorTypeLatest})
	// Idle events keep coming, with a continuation to resume from.
	for range 3 {
		if ev := next(t, es); ev == nil || len(ev.Records) != 0 || ev.ContinuationSequenceNumber == nil {
			t.Fatalf("idle event %+v, want no records and a continuation", ev)
		}
	}
	clk.Advance(time.Minute)
	for ev := next(t, es); ev != nil; ev = next(t, es) {
	}
}

// nextErr reads events until the stream ends and returns its error, failing if it has none.
func nextErr(t *testing.T, es *kinesis.SubscribeToShardEventStream) error {
	t.Helper()
	for {
		select {
		case _, ok := <-es.Events():
			if ok {
				t.Fatal("an event after the fault")
			}
			if err := es.Err(); err != nil {
				return err
			}
			t.Fatal("the stream ended without an error")
		case <-ctx(t).Done():
			t.Fatal("the stream did not end within a minute")
		}
	}
}

// waitSubscriptions waits until srv serves n subscriptions.
func waitSubscriptions(t *testing.T, srv *kinesistest.Server, n int) {
	t.Helper()
	for srv.Subscriptions() != n {
		select {
		case <-ctx(t).Done():
			t.Fatalf("the server serves %d subscriptions, want %d", srv.Subscriptions(), n)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// testSubscribeFaults: ResetStream and StreamError faults let a subscription send its events,
// then break it, and Subscriptions counts the subscriptions being served. The faults are
// kinesistest's own: the service's failures mid-stream cannot be provoked.
func testSubscribeFaults(t *testing.T, b Backend) {
	shard := "shardId-000000000000"
	// faulted starts a server with the fault, puts record "a" on a one-shard stream and
	// subscribes from its start; the first event must carry "a".
	faulted := func(t *testing.T, kind kinesistest.FaultKind, after int) (*kinesistest.Server, *kinesis.Client, string, *kinesis.SubscribeToShardEventStream) {
		t.Helper()
		srv := b.Server(t, kinesistest.WithFaults(&kinesistest.FaultPlan{Faults: []kinesistest.Fault{
			{Op: "SubscribeToShard", Kind: kind, Probability: 1, AfterEvents: after},
		}}))
		c := srv.Client()
		name := newStream(t, c, 1)
		_, consumer := register(t, c, name, "app")
		putRecords(t, c, name, "a")
		es := subscribe(t, srv, consumer, shard, types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon})
		if got, _ := collect(t, es, 1); !slices.Equal(got, []string{"data-a"}) {
			t.Fatalf("first event %v, want [data-a]", got)
		}
		return srv, c, name, es
	}
	t.Run("StreamError", func(t *testing.T) {
		srv, c, name, es := faulted(t, kinesistest.StreamError, 2)
		if n := srv.Subscriptions(); n != 1 {
			t.Fatalf("Subscriptions() = %d with one live, want 1", n)
		}
		putRecords(t, c, name, "b")
		if got, _ := collect(t, es, 1); !slices.Equal(got, []string{"data-b"}) {
			t.Fatalf("second event %v, want [data-b]", got)
		}
		putRecords(t, c, name, "c")
		var failure *types.InternalFailureException
		if err := nextErr(t, es); !errors.As(err, &failure) {
			t.Fatalf("after 2 events: %v, want InternalFailureException", err)
		}
		waitSubscriptions(t, srv, 0)
	})
	t.Run("ResetStream", func(t *testing.T) {
		srv, c, name, es := faulted(t, kinesistest.ResetStream, 1)
		putRecords(t, c, name, "b")
		var failure *types.InternalFailureException
		if err := nextErr(t, es); errors.As(err, &failure) {
			t.Fatalf("a reset stream: %v, want a stream error", err)
		}
		waitSubscriptions(t, srv, 0)
	})
	t.Run("Invalid", func(t *testing.T) {
		for _, f := range []kinesistest.Fault{
			{Op: "GetRecords", Kind: kinesistest.ResetStream, Probability: 1},
			{Kind: kinesistest.StreamError, Probability: 1},
			{Op: "SubscribeToShard", Kind: kinesistest.StreamError, Probability: 1, AfterEvents: -1},
		} {
			if _, err := kinesistest.Start(kinesistest.WithFaults(&kinesistest.FaultPlan{Faults: []kinesistest.Fault{f}})); err == nil {
				t.Fatalf("Start accepted %+v", f)
			}
		}
	})
}
