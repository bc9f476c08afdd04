package kinesistest

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"
)

// TestInProcessInBubble: a server made by NewInProcess serves its client inside a synctest
// bubble, on the bubble's clock: an iterator expires after its lifetime passes on that clock,
// in no time. SubscribeToShard is refused, naming the limitation.
func TestInProcessInBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := NewInProcess(WithIteratorLifetime(time.Minute))
		require.NoError(t, err)
		defer srv.Close()
		ctx := context.Background()
		require.NoError(t, srv.CreateStream(ctx, "s", 1))
		_, err = srv.Put(ctx, "s", "k", []byte("one"))
		require.NoError(t, err)
		cl := srv.Client()
		it, err := cl.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String("s"),
			ShardId: aws.String("shardId-000000000000"), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
		require.NoError(t, err)
		out, err := cl.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
		require.NoError(t, err)
		require.Len(t, out.Records, 1)
		require.Equal(t, "one", string(out.Records[0].Data))

		time.Sleep(2 * time.Minute)
		_, err = cl.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: out.NextShardIterator})
		var expired *types.ExpiredIteratorException
		require.True(t, errors.As(err, &expired), "GetRecords with an iterator past its lifetime: %v", err)

		_, err = cl.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{ConsumerARN: aws.String("arn:aws:kinesis:us-east-1:000000000000:stream/s/consumer/c:1"),
			ShardId: aws.String("shardId-000000000000"), StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeLatest}})
		require.ErrorContains(t, err, "NewInProcess")
	})
}

// TestInProcessValidatesOptions: NewInProcess rejects what Start rejects.
func TestInProcessValidatesOptions(t *testing.T) {
	_, err := NewInProcess(WithIteratorLifetime(0))
	require.ErrorContains(t, err, "WithIteratorLifetime")
}
