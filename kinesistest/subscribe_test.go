package kinesistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gostream/kinesub/kinesistest"
)

// TestSubscriptionEndsWithItsStream: a subscription whose client closed its stream (the HTTP/2
// stream is reset before Close returns) has ended: the next SubscribeToShard call for the same
// consumer and shard, sent at once on the same connection, is served, not refused as in use,
// however late the server's handler of the first notices.
func TestSubscriptionEndsWithItsStream(t *testing.T) {
	srv := kinesistest.NewServer()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.CreateStream(ctx, "s", 1); err != nil {
		t.Fatal(err)
	}
	c := srv.Client()
	sum, err := c.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("s")})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := c.RegisterStreamConsumer(ctx, &kinesis.RegisterStreamConsumerInput{
		StreamARN: sum.StreamDescriptionSummary.StreamARN, ConsumerName: aws.String("app")})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		// A client of its own for each subscription (aws/smithy-go#714), sharing the
		// connection.
		out, err := kinesis.New(c.Options()).SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{
			ConsumerARN: reg.Consumer.ConsumerARN, ShardId: aws.String("shardId-000000000000"),
			StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeLatest}})
		if err != nil {
			t.Fatalf("subscription %d: %v", i, err)
		}
		es := out.GetStream()
		if _, ok := <-es.Events(); !ok {
			t.Fatalf("subscription %d ended before its first event: %v", i, es.Err())
		}
		_ = es.Close()
	}
}
