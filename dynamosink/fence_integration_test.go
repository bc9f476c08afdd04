package dynamosink_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/dynamosink"
	"github.com/gostream/kinesub/kinesistest"
	"github.com/gostream/kinesub/lease"
)

// A subscriber reads three records of one key; its shard's lease is then stolen, and the
// thief applies the second record. The first subscriber, still holding the records it read,
// is refused the third (its holding is older than the one that wrote the key's mark) and told
// the second is a replay: the fencing token a Message carries is the shard lease's counter.
func TestApplyRefusesStolenShard(t *testing.T) {
	f := newFixture(t, dynamosink.WithLeaseTable("memory"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := kinesistest.NewServer()
	t.Cleanup(srv.Close)
	const stream = "fenced"
	client := srv.Client()
	_, err := client.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(1)})
	require.NoError(t, err)
	pub, err := kinesub.NewPublisher(client, stream)
	require.NoError(t, err)
	require.NoError(t, pub.PublishBatch(ctx, []kinesub.Record{
		{PartitionKey: "k", Data: []byte("1")}, {PartitionKey: "k", Data: []byte("2")}, {PartitionKey: "k", Data: []byte("3")},
	}))

	store := lease.NewMemory()
	sub, err := kinesub.Subscribe(ctx, client, stream, kinesub.WithLeaseStore(store),
		kinesub.WithStartAt(kinesub.Horizon()), kinesub.WithPollInterval(20*time.Millisecond))
	require.NoError(t, err)
	var ms []*kinesub.Message
	for m := range sub.Messages() {
		ms = append(ms, m)
		if len(ms) == 3 {
			break
		}
	}
	require.Len(t, ms, 3)
	defer func() {
		for _, m := range ms {
			_ = m.Ack(ctx) // settled, so that Close need not wait for them
		}
		_ = sub.Close(ctx)
	}()
	mine := ms[0].Tenure()
	require.NoError(t, f.sink.Apply(ctx, ms[0], f.add("k", "1")))

	// Steal the shard's lease, as a peer balancing does.
	key := stream + "/" + ms[0].ShardID()
	l, err := store.Read(ctx, key)
	require.NoError(t, err)
	require.Equal(t, mine, l.Tenure(), "a Message's tenure is its shard lease's holding")
	ok, err := store.Steal(ctx, key, "thief#00000001", l.Counter, 0)
	require.NoError(t, err)
	require.True(t, ok)
	l, err = store.Read(ctx, key)
	require.NoError(t, err)
	thief := l.Tenure()
	require.Greater(t, thief.Counter, mine.Counter)
	require.NoError(t, f.sink.ApplyMark(ctx, dynamosink.Mark{Key: "k", Shard: ms[1].ShardID(), Sequence: ms[1].SequenceNumber(),
		SubSequence: ms[1].SubSequenceNumber(), Tenure: thief, Leases: "memory"}, f.add("k", "2 by the thief")))

	require.ErrorIs(t, f.sink.Apply(ctx, ms[1], f.add("k", "2")), dynamosink.ErrReplay)
	err = f.sink.Apply(ctx, ms[2], f.add("k", "3"))
	require.ErrorIs(t, err, dynamosink.ErrSuperseded)
	assert.True(t, strings.Contains(err.Error(), "thief#00000001"), "the error names the holding that wrote the mark: %v", err)
	n, by := f.count(t, "k")
	assert.Equal(t, 2, n)
	assert.Equal(t, "2 by the thief", by)
}
