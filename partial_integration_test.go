package kinesub

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// TestPublishNilData: a record without data is a valid Kinesis record; Publish and PublishBatch
// send nil data as an empty record, which arrives as such.
func TestPublishNilData(t *testing.T) {
	s := newStream(t, 1)
	sub := subscribeT(t, s, testOpts(lease.NewMemory(), WithStartAt(Horizon()))...)
	_, err := s.pub.Publish(context.Background(), "k", nil, nil)
	require.NoError(t, err)
	require.NoError(t, s.pub.PublishBatch(context.Background(), []Record{
		{PartitionKey: "k", Data: []byte("x")}, {PartitionKey: "k"}, {PartitionKey: "k", Data: []byte("y")},
	}))
	require.Equal(t, []string{"", "x", "", "y"}, payloads(recv(t, sub, 4, true)))
}

// TestStreamRecreatedUnderSameName: a stream deleted and re-created under the same name, read
// with the old lease table, whose checkpoints name sequence numbers of the old stream. The
// shard shows ShardCheckpointRejected and ErrCheckpointRejected says how to resolve it; a Seek
// resolves it, and the new stream's records arrive.
func TestStreamRecreatedUnderSameName(t *testing.T) {
	s := newStream(t, 1)
	store := lease.NewMemory()
	first := subscribeT(t, s, testOpts(store, WithStartAt(Horizon()))...)
	s.publish(3, 1)
	recv(t, first, 3, true)
	require.NoError(t, first.Close(context.Background()))
	shard := s.shardIDs()[0]
	require.NotEmpty(t, readLease(t, store, s.name, shard).Checkpoint.Sequence)

	old, err := s.c.DescribeStreamSummary(context.Background(), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(s.name)})
	require.NoError(t, err)
	created := aws.ToTime(old.StreamDescriptionSummary.StreamCreationTimestamp)
	_, err = s.c.DeleteStream(context.Background(), &kinesis.DeleteStreamInput{StreamName: aws.String(s.name)})
	require.NoError(t, err)
	eventually(t, 30*time.Second, "stream deleted", func() bool {
		_, err := s.c.DescribeStreamSummary(context.Background(), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(s.name)})
		return err != nil
	})
	// Sequence numbers carry their shard's creation time to the second (kinesalite dates it
	// 2 s back): only a stream created in a later second is told apart from the old one.
	for time.Now().Unix() <= created.Unix()+3 {
		time.Sleep(50 * time.Millisecond)
	}
	testenv.CreateStream(t, s.c, s.name, 1)
	s.put("k", []byte("new-0"))

	sub := subscribeT(t, s, testOpts(store)...)
	err = waitErr(t, sub, ErrCheckpointRejected, 20*time.Second)
	var se *ShardError
	require.True(t, errors.As(err, &se))
	require.Equal(t, shard, se.Shard)
	require.Contains(t, err.Error(), "WithStartAt")
	eventually(t, 5*time.Second, "state checkpoint-rejected", func() bool {
		st := sub.Shards()
		return len(st) == 1 && st[0].State == ShardCheckpointRejected
	})
	require.NoError(t, sub.Seeker().Seek(context.Background(), Horizon()))
	require.Equal(t, []string{"new-0"}, payloads(recv(t, sub, 1, true)))
	require.Equal(t, ShardReading, sub.Shards()[0].State)
}

// TestMaxInFlightBytes: with records of 1 MiB, a consumer that does not ack holds about the byte
// cap per shard, not WithMaxInFlight records; acks let reading go on.
func TestMaxInFlightBytes(t *testing.T) {
	const (
		record = 1000 * 1024 // with the partition key, under the 1 MiB limit
		limit  = 4 << 20
		n      = 12
	)
	s := newStream(t, 1)
	for i := range n {
		s.put("k", bytes.Repeat([]byte{byte('a' + i)}, record))
	}
	sub := subscribeT(t, s, testOpts(lease.NewMemory(), WithStartAt(Horizon()), WithMaxInFlightBytes(limit))...)
	// Take everything offered without acking, until the reader waits for acks and everything
	// it fetched has been received.
	var held []*Message
	var st ShardStatus
	deadline := time.After(time.Minute)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case m := <-sub.Messages():
			held = append(held, m)
			require.Less(t, len(held), n, "every record was delivered without acks")
			continue
		case <-tick.C:
		case <-deadline:
			t.Fatalf("reader not waiting for acks after a minute, %d records held: %+v", len(held), sub.Shards())
		}
		if sts := sub.Shards(); len(sts) == 1 && sts[0].WaitingForAcks && sts[0].InFlight == len(held) {
			st = sts[0]
			break
		}
	}
	t.Logf("held %d records, %d bytes, at a cap of %d bytes", len(held), st.InFlightBytes, limit)
	require.LessOrEqual(t, st.InFlightBytes, limit+record, "at most the cap plus one record")
	require.GreaterOrEqual(t, st.InFlightBytes, limit/2, "reading went on up to the cap")
	for _, m := range held {
		require.NoError(t, m.Ack(context.Background()))
	}
	rest := recv(t, sub, n-len(held), true)
	require.Equal(t, byte('a'+n-1), rest[len(rest)-1].Data()[0])
}
