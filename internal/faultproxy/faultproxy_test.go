package faultproxy_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"go.uber.org/goleak"

	"github.com/gostream/kinesub/internal/faultproxy"
	"github.com/gostream/kinesub/internal/testenv"
)

const (
	opGetRecords       = "Kinesis_20131202.GetRecords"
	opGetShardIterator = "Kinesis_20131202.GetShardIterator"
	opPutRecord        = "Kinesis_20131202.PutRecord"
	opListShards       = "Kinesis_20131202.ListShards"
	opDescribeSummary  = "Kinesis_20131202.DescribeStreamSummary"
	opUpdateItem       = "DynamoDB_20120810.UpdateItem"
	opGetItem          = "DynamoDB_20120810.GetItem"
	opPutItem          = "DynamoDB_20120810.PutItem"
	opDescribeTable    = "DynamoDB_20120810.DescribeTable"
)

// newProxy starts a proxy in front of the emulator named by the endpoint variable and closes it
// when the test ends.
func newProxy(t *testing.T, endpointVar string, plan faultproxy.Plan) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(os.Getenv(endpointVar), plan)
	if err != nil {
		t.Fatalf("faultproxy.New: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// kinesisVia returns a Kinesis client that talks through p and does not retry, so each call
// is one request and its error is the proxy's answer.
func kinesisVia(direct *kinesis.Client, p *faultproxy.Proxy) *kinesis.Client {
	return kinesis.New(direct.Options(), func(o *kinesis.Options) {
		o.BaseEndpoint = aws.String(p.URL())
		o.RetryMaxAttempts = 1
	})
}

func dynamoDBVia(direct *dynamodb.Client, p *faultproxy.Proxy) *dynamodb.Client {
	return dynamodb.New(direct.Options(), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(p.URL())
		o.RetryMaxAttempts = 1
	})
}

func isA[T error](err error) bool {
	var target T
	return errors.As(err, &target)
}

func checkStats(t *testing.T, p *faultproxy.Proxy, want map[string]int) {
	t.Helper()
	if got := p.Stats(); !maps.Equal(got, want) {
		t.Errorf("Stats() = %v, want %v", got, want)
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// kinesisStream creates a one-shard stream holding one record and returns an iterator at its
// start.
func kinesisStream(t *testing.T, k *kinesis.Client) (stream, iterator string) {
	t.Helper()
	ctx := ctxFor(t)
	stream = testenv.Name(t)
	testenv.CreateStream(t, k, stream, 1)
	if _, err := k.PutRecord(ctx, &kinesis.PutRecordInput{
		StreamName: aws.String(stream), PartitionKey: aws.String("k"), Data: []byte("first"),
	}); err != nil {
		t.Fatalf("PutRecord: %v", err)
	}
	return stream, shardIterator(t, k, stream)
}

func shardIterator(t *testing.T, k *kinesis.Client, stream string) string {
	t.Helper()
	out, err := k.GetShardIterator(ctxFor(t), &kinesis.GetShardIteratorInput{
		StreamName: aws.String(stream), ShardId: aws.String("shardId-000000000000"),
		ShardIteratorType: types.ShardIteratorTypeTrimHorizon,
	})
	if err != nil {
		t.Fatalf("GetShardIterator: %v", err)
	}
	return aws.ToString(out.ShardIterator)
}

// dynamoDBTable creates a table keyed by the string "pk" holding {pk: "a", version: 1}.
func dynamoDBTable(t *testing.T, d *dynamodb.Client) string {
	t.Helper()
	ctx := ctxFor(t)
	table := testenv.Name(t)
	if _, err := d.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: ddbtypes.KeyTypeHash}},
		BillingMode:          ddbtypes.BillingModePayPerRequest,
	}); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	t.Cleanup(func() {
		_, _ = d.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
	w := dynamodb.NewTableExistsWaiter(d, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 10*time.Millisecond, 100*time.Millisecond
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, 10*time.Second); err != nil {
		t.Fatalf("wait for table: %v", err)
	}
	if _, err := d.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item("a", 1)}); err != nil {
		t.Fatalf("PutItem: %v", err)
	}
	return table
}

func item(pk string, version int) map[string]ddbtypes.AttributeValue {
	return map[string]ddbtypes.AttributeValue{
		"pk":      &ddbtypes.AttributeValueMemberS{Value: pk},
		"version": &ddbtypes.AttributeValueMemberN{Value: strconv.Itoa(version)},
	}
}

func key(pk string) map[string]ddbtypes.AttributeValue {
	return map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: pk}}
}

// casVersion sets version to to, on condition that it is from: the lease store's kind of write.
func casVersion(table, pk string, from, to int) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:           aws.String(table),
		Key:                 key(pk),
		UpdateExpression:    aws.String("SET version = :to"),
		ConditionExpression: aws.String("version = :from"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
			":from": &ddbtypes.AttributeValueMemberN{Value: strconv.Itoa(from)},
			":to":   &ddbtypes.AttributeValueMemberN{Value: strconv.Itoa(to)},
		},
	}
}

// versionOf reads the item's version straight from the emulator, bypassing the proxy.
func versionOf(t *testing.T, d *dynamodb.Client, table, pk string) string {
	t.Helper()
	out, err := d.GetItem(ctxFor(t), &dynamodb.GetItemInput{TableName: aws.String(table), Key: key(pk), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatalf("GetItem: %v", err)
	}
	v, ok := out.Item["version"].(*ddbtypes.AttributeValueMemberN)
	if !ok {
		t.Fatalf("item %s has no numeric version: %v", pk, out.Item)
	}
	return v.Value
}

// TestKinesisFaultsAreTypedErrors checks that each injected Kinesis fault reaches the caller
// as the SDK's typed exception, that the standard retryer treats it as the real one, and that
// the request never reached the emulator.
func TestKinesisFaultsAreTypedErrors(t *testing.T) {
	t.Parallel()
	direct := testenv.Kinesis(t)
	stream, iter := kinesisStream(t, direct)

	getRecords := func(ctx context.Context, c *kinesis.Client) error {
		_, err := c.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String(iter)})
		return err
	}
	for _, tc := range []struct {
		name      string
		kind      faultproxy.Kind
		op        string
		call      func(context.Context, *kinesis.Client) error
		typed     func(error) bool
		retryable bool
	}{
		{"throttle GetRecords", faultproxy.Throttle, opGetRecords, getRecords,
			isA[*types.ProvisionedThroughputExceededException], true},
		{"throttle PutRecord", faultproxy.Throttle, opPutRecord, func(ctx context.Context, c *kinesis.Client) error {
			_, err := c.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(stream), PartitionKey: aws.String("k"), Data: []byte("x")})
			return err
		}, isA[*types.ProvisionedThroughputExceededException], true},
		{"throttle ListShards", faultproxy.Throttle, opListShards, func(ctx context.Context, c *kinesis.Client) error {
			_, err := c.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
			return err
		}, isA[*types.LimitExceededException], true},
		{"expired iterator", faultproxy.ExpiredIterator, opGetRecords, getRecords,
			isA[*types.ExpiredIteratorException], false},
		{"internal failure", faultproxy.InternalFailure, opGetRecords, getRecords,
			isA[*types.InternalFailureException], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProxy(t, testenv.KinesisEndpointVar, faultproxy.Plan{
				Rate: 1, Faults: []faultproxy.Fault{{Kind: tc.kind, Weight: 1}},
			})
			err := tc.call(ctxFor(t), kinesisVia(direct, p))
			if !tc.typed(err) {
				t.Fatalf("got %T %v, want the typed exception", err, err)
			}
			if got := retry.NewStandard().IsErrorRetryable(err); got != tc.retryable {
				t.Errorf("standard retryer: retryable = %v, want %v", got, tc.retryable)
			}
			checkStats(t, p, map[string]int{tc.kind.String(): 1, tc.kind.String() + "/" + tc.op: 1})
		})
	}

	// The iterator was never consumed upstream: the record is still there.
	out, err := direct.GetRecords(ctxFor(t), &kinesis.GetRecordsInput{ShardIterator: aws.String(iter)})
	if err != nil {
		t.Fatalf("GetRecords after faults: %v", err)
	}
	if len(out.Records) != 1 || string(out.Records[0].Data) != "first" {
		t.Fatalf("records after faults = %v, want only %q (a faulted PutRecord must not write)", out.Records, "first")
	}
}

func TestDynamoDBFaultsAreTypedErrors(t *testing.T) {
	t.Parallel()
	direct := testenv.DynamoDB(t)
	table := dynamoDBTable(t, direct)

	for _, tc := range []struct {
		name      string
		kind      faultproxy.Kind
		op        string
		call      func(context.Context, *dynamodb.Client) error
		typed     func(error) bool
		retryable bool
	}{
		{"throttle UpdateItem", faultproxy.Throttle, opUpdateItem, func(ctx context.Context, c *dynamodb.Client) error {
			_, err := c.UpdateItem(ctx, casVersion(table, "a", 1, 2))
			return err
		}, isA[*ddbtypes.ProvisionedThroughputExceededException], true},
		{"throttle DescribeTable", faultproxy.Throttle, opDescribeTable, func(ctx context.Context, c *dynamodb.Client) error {
			_, err := c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
			return err
		}, isA[*ddbtypes.ThrottlingException], true},
		{"internal server error", faultproxy.InternalFailure, opGetItem, func(ctx context.Context, c *dynamodb.Client) error {
			_, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key("a")})
			return err
		}, isA[*ddbtypes.InternalServerError], true},
		{"conditional check failed", faultproxy.ConditionalCheckFailed, opUpdateItem, func(ctx context.Context, c *dynamodb.Client) error {
			_, err := c.UpdateItem(ctx, casVersion(table, "a", 1, 2))
			return err
		}, isA[*ddbtypes.ConditionalCheckFailedException], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProxy(t, testenv.DynamoDBEndpointVar, faultproxy.Plan{
				Rate: 1, Faults: []faultproxy.Fault{{Kind: tc.kind, Weight: 1}},
			})
			err := tc.call(ctxFor(t), dynamoDBVia(direct, p))
			if !tc.typed(err) {
				t.Fatalf("got %T %v, want the typed exception", err, err)
			}
			if got := retry.NewStandard().IsErrorRetryable(err); got != tc.retryable {
				t.Errorf("standard retryer: retryable = %v, want %v", got, tc.retryable)
			}
			checkStats(t, p, map[string]int{tc.kind.String(): 1, tc.kind.String() + "/" + tc.op: 1})
		})
	}
	// None of the faulted writes reached the emulator; the same write straight to it succeeds.
	if got := versionOf(t, direct, table, "a"); got != "1" {
		t.Fatalf("version after faulted writes = %s, want 1", got)
	}
	if _, err := direct.UpdateItem(ctxFor(t), casVersion(table, "a", 1, 2)); err != nil {
		t.Fatalf("the same write sent directly: %v", err)
	}
}

// A ConditionalCheckFailed fault applies only to conditional writes; others pass through.
func TestConditionalCheckFailedOnlyOnConditionalWrites(t *testing.T) {
	t.Parallel()
	direct := testenv.DynamoDB(t)
	table := dynamoDBTable(t, direct)
	p := newProxy(t, testenv.DynamoDBEndpointVar, faultproxy.Plan{
		Rate: 1, Faults: []faultproxy.Fault{{Kind: faultproxy.ConditionalCheckFailed, Weight: 1}},
	})
	c := dynamoDBVia(direct, p)
	ctx := ctxFor(t)

	if _, err := c.UpdateItem(ctx, casVersion(table, "a", 1, 2)); !isA[*ddbtypes.ConditionalCheckFailedException](err) {
		t.Fatalf("conditional UpdateItem: got %v, want ConditionalCheckFailedException", err)
	}
	if got := versionOf(t, direct, table, "a"); got != "1" {
		t.Fatalf("version after faulted conditional write = %s, want 1", got)
	}
	if _, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item("b", 5)}); err != nil {
		t.Fatalf("unconditional PutItem: %v", err)
	}
	if got := versionOf(t, direct, table, "b"); got != "5" {
		t.Fatalf("version after unconditional write = %s, want 5", got)
	}
	checkStats(t, p, map[string]int{
		"ConditionalCheckFailed": 1, "ConditionalCheckFailed/" + opUpdateItem: 1,
		faultproxy.StatForwarded: 1, faultproxy.StatForwarded + "/" + opPutItem: 1,
	})
}

func TestDropConnectionIsTransportError(t *testing.T) {
	t.Parallel()
	direct := testenv.Kinesis(t)
	stream := testenv.Name(t)
	testenv.CreateStream(t, direct, stream, 1)
	p := newProxy(t, testenv.KinesisEndpointVar, faultproxy.Plan{
		Rate: 1, Faults: []faultproxy.Fault{{Kind: faultproxy.DropConnection, Weight: 1}},
	})
	c := kinesisVia(direct, p)
	describe := func() error {
		_, err := c.DescribeStreamSummary(ctxFor(t), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
		return err
	}
	err := describe()
	if !isA[*smithyhttp.RequestSendError](err) || isA[smithy.APIError](err) {
		t.Fatalf("got %T %v, want a transport error and no API error", err, err)
	}
	checkStats(t, p, map[string]int{"DropConnection": 1, "DropConnection/" + opDescribeSummary: 1})

	// The client recovers on a new connection once faults stop.
	p.SetRate(0)
	if err := describe(); err != nil {
		t.Fatalf("after SetRate(0): %v", err)
	}
}

func TestLatencyDelaysThenForwards(t *testing.T) {
	t.Parallel()
	direct := testenv.Kinesis(t)
	stream := testenv.Name(t)
	testenv.CreateStream(t, direct, stream, 1)
	const delay = 300 * time.Millisecond
	p := newProxy(t, testenv.KinesisEndpointVar, faultproxy.Plan{
		Rate: 1, Latency: delay, Faults: []faultproxy.Fault{{Kind: faultproxy.Latency, Weight: 1}},
	})
	start := time.Now()
	out, err := kinesisVia(direct, p).DescribeStreamSummary(ctxFor(t), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("DescribeStreamSummary: %v", err)
	}
	if got := aws.ToString(out.StreamDescriptionSummary.StreamName); got != stream {
		t.Errorf("stream name = %q, want %q", got, stream)
	}
	if elapsed < delay {
		t.Errorf("call took %v, want at least %v", elapsed, delay)
	}
	checkStats(t, p, map[string]int{
		"Latency": 1, "Latency/" + opDescribeSummary: 1,
		faultproxy.StatForwarded: 1, faultproxy.StatForwarded + "/" + opDescribeSummary: 1,
	})
}

// With Rate 0 every request goes through, whatever the plan's faults: a full write-read round
// trip on both services works.
func TestRateZeroForwardsEverything(t *testing.T) {
	t.Parallel()
	directK, directD := testenv.Kinesis(t), testenv.DynamoDB(t)
	stream, _ := kinesisStream(t, directK)
	table := dynamoDBTable(t, directD)
	all := []faultproxy.Fault{
		{Kind: faultproxy.Throttle, Weight: 1}, {Kind: faultproxy.InternalFailure, Weight: 1},
		{Kind: faultproxy.ExpiredIterator, Weight: 1}, {Kind: faultproxy.ConditionalCheckFailed, Weight: 1},
		{Kind: faultproxy.DropConnection, Weight: 1}, {Kind: faultproxy.Latency, Weight: 1},
	}
	plan := faultproxy.Plan{Rate: 0, Faults: all, Latency: time.Second}
	pk := newProxy(t, testenv.KinesisEndpointVar, plan)
	pd := newProxy(t, testenv.DynamoDBEndpointVar, plan)
	k, d := kinesisVia(directK, pk), dynamoDBVia(directD, pd)
	ctx := ctxFor(t)

	if _, err := k.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(stream), PartitionKey: aws.String("k"), Data: []byte("second")}); err != nil {
		t.Fatalf("PutRecord: %v", err)
	}
	out, err := k.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String(shardIterator(t, k, stream))})
	if err != nil {
		t.Fatalf("GetRecords: %v", err)
	}
	var got []string
	for _, r := range out.Records {
		got = append(got, string(r.Data))
	}
	if len(got) != 2 || got[0] != "first" || got[1] != "second" {
		t.Fatalf("records = %q, want [first second]", got)
	}
	if _, err := d.UpdateItem(ctx, casVersion(table, "a", 1, 2)); err != nil {
		t.Fatalf("conditional UpdateItem: %v", err)
	}
	if got := versionOf(t, d, table, "a"); got != "2" {
		t.Fatalf("version = %s, want 2", got)
	}

	checkStats(t, pk, map[string]int{
		faultproxy.StatForwarded:                            3,
		faultproxy.StatForwarded + "/" + opPutRecord:        1,
		faultproxy.StatForwarded + "/" + opGetShardIterator: 1,
		faultproxy.StatForwarded + "/" + opGetRecords:       1,
	})
	checkStats(t, pd, map[string]int{
		faultproxy.StatForwarded:                      2,
		faultproxy.StatForwarded + "/" + opUpdateItem: 1,
		faultproxy.StatForwarded + "/" + opGetItem:    1,
	})
}

// Only the operations in Plan.Ops are faulted; SetRate turns faults off while running.
func TestOpsFilterAndSetRate(t *testing.T) {
	t.Parallel()
	direct := testenv.Kinesis(t)
	stream, _ := kinesisStream(t, direct)
	p := newProxy(t, testenv.KinesisEndpointVar, faultproxy.Plan{
		Rate: 1, Faults: []faultproxy.Fault{{Kind: faultproxy.Throttle, Weight: 1}},
		Ops: []string{opGetRecords},
	})
	c := kinesisVia(direct, p)
	ctx := ctxFor(t)

	iter := shardIterator(t, c, stream) // not in Ops: forwarded
	in := &kinesis.GetRecordsInput{ShardIterator: aws.String(iter)}
	for range 3 {
		if _, err := c.GetRecords(ctx, in); !isA[*types.ProvisionedThroughputExceededException](err) {
			t.Fatalf("GetRecords: got %v, want ProvisionedThroughputExceededException", err)
		}
	}
	p.SetRate(0)
	out, err := c.GetRecords(ctx, in)
	if err != nil {
		t.Fatalf("GetRecords after SetRate(0): %v", err)
	}
	if len(out.Records) != 1 || string(out.Records[0].Data) != "first" {
		t.Fatalf("records = %v, want [first]", out.Records)
	}
	checkStats(t, p, map[string]int{
		"Throttle": 3, "Throttle/" + opGetRecords: 3,
		faultproxy.StatForwarded:                            2,
		faultproxy.StatForwarded + "/" + opGetShardIterator: 1,
		faultproxy.StatForwarded + "/" + opGetRecords:       1,
	})
}

// Close must not wait out a long Latency fault: it cancels the delayed request and returns.
func TestCloseCancelsDelayedRequests(t *testing.T) {
	t.Parallel()
	direct := testenv.Kinesis(t)
	p, err := faultproxy.New(os.Getenv(testenv.KinesisEndpointVar), faultproxy.Plan{
		Rate: 1, Latency: time.Minute, Faults: []faultproxy.Fault{{Kind: faultproxy.Latency, Weight: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	done := make(chan error, 1)
	go func() {
		_, err := kinesisVia(direct, p).ListStreams(ctx, &kinesis.ListStreamsInput{})
		done <- err
	}()
	for deadline := time.Now().Add(30 * time.Second); p.Stats()["Latency"] == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the request was not delayed within 30s")
		}
	}
	start := time.Now()
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second { // far below the one-minute delay
		t.Errorf("Close took %v with a delayed request in flight", took)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("delayed request succeeded after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("delayed request still pending 5s after Close")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, ok := p.Stats()[faultproxy.StatForwarded]; ok {
		t.Errorf("request forwarded after Close: %v", p.Stats())
	}
}

func TestNewRejects(t *testing.T) {
	for _, tc := range []struct {
		name, target string
		plan         faultproxy.Plan
	}{
		{"non-loopback target", "https://kinesis.us-east-1.amazonaws.com", faultproxy.Plan{}},
		{"empty target", "", faultproxy.Plan{}},
		{"invalid plan", "http://127.0.0.1:1", faultproxy.Plan{Rate: 2, Faults: []faultproxy.Fault{{Kind: faultproxy.Throttle, Weight: 1}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := faultproxy.New(tc.target, tc.plan)
			if err == nil {
				p.Close()
				t.Fatal("New succeeded")
			}
		})
	}
}

// After Close, nothing the proxy started is still running: not its server, not the handlers
// of dropped or delayed requests, not its upstream connections. Not parallel, so the
// goroutine count is not disturbed by other tests.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	direct := testenv.Kinesis(t)
	before := goleak.IgnoreCurrent()

	p, err := faultproxy.New(os.Getenv(testenv.KinesisEndpointVar), faultproxy.Plan{
		Seed: 3, Rate: 0.5, Latency: 10 * time.Millisecond,
		Faults: []faultproxy.Fault{
			{Kind: faultproxy.DropConnection, Weight: 1}, {Kind: faultproxy.Latency, Weight: 1},
			{Kind: faultproxy.Throttle, Weight: 1},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := kinesisVia(direct, p)
	ctx := ctxFor(t)
	for range 20 {
		_, _ = c.ListStreams(ctx, &kinesis.ListStreamsInput{})
	}
	if s := p.Stats(); s["DropConnection"] == 0 || s["Latency"] == 0 || s[faultproxy.StatForwarded] == 0 {
		t.Fatalf("traffic did not exercise drops, delays and forwarding: %v", s)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The client's connections to the proxy end with it: nothing is ignored but what ran
	// before. Give them up to ten seconds to wind down.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := goleak.Find(before)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines remain after Close: %v", err)
		}
	}
}
