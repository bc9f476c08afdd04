package kinesub

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// The rule for nil contexts (doc.go, "Contexts"): the methods that start or wait for work refuse
// a nil ctx with an error wrapping ErrInvalidOption that names the method, before doing
// anything; the methods that settle or shut down take it as context.Background().

// nilCtx is a nil context held in a variable, as a caller's code would pass it.
var nilCtx context.Context

func requireNilContext(t *testing.T, err error, method string) {
	t.Helper()
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, method+": nil context")
	require.ErrorContains(t, err, "pass context.Background()")
}

func TestNilContextRefused(t *testing.T) {
	t.Run("Subscribe", func(t *testing.T) {
		_, err := subscribe(nilCtx, noIO{t: t}, "orders", WithLeaseStore(lease.NewMemory()))
		requireNilContext(t, err, "Subscribe")
		_, err = Subscribe(nilCtx, kinesis.New(kinesis.Options{}), "orders", WithLeaseStore(lease.NewMemory()))
		requireNilContext(t, err, "Subscribe")
	})
	t.Run("Publish", func(t *testing.T) {
		p, err := newPublisher(noIO{t: t}, "orders") // any call would fail the test
		require.NoError(t, err)
		_, err = p.Publish(nilCtx, "k", []byte("x"), nil)
		requireNilContext(t, err, "Publish")
		requireNilContext(t, p.PublishBatch(nilCtx, []Record{{PartitionKey: "k", Data: []byte("x")}}), "PublishBatch")
	})

	f := newFakeStream("nilctx", 1)
	f.add(0, time.Now(), "a", "b", "c")
	sub := subscribeFake(t, f, fakeOpts(WithInitialPosition(Horizon()))...)
	t.Run("Seek", func(t *testing.T) {
		requireNilContext(t, sub.Seeker().Seek(nilCtx, Horizon()), "Seek")
		sub.table.mu.Lock()
		defer sub.table.mu.Unlock()
		require.Nil(t, sub.table.installed, "a refused seek installed a position")
		require.Zero(t, sub.table.epoch)
	})
	t.Run("Commit", func(t *testing.T) {
		requireNilContext(t, sub.Commit(nilCtx), "Commit")
	})
	t.Run("All", func(t *testing.T) {
		n := 0
		for m, err := range sub.All(nilCtx) {
			n++
			require.Nil(t, m)
			requireNilContext(t, err, "All")
		}
		require.Equal(t, 1, n, "the error is yielded once, then the loop ends")
	})
	t.Run("Batches", func(t *testing.T) {
		n := 0
		for b, err := range sub.Batches(nilCtx) {
			n++
			require.Nil(t, b)
			requireNilContext(t, err, "Batches")
		}
		require.Equal(t, 1, n, "the error is yielded once, then the loop ends")
	})
	// Nothing was taken by the refused loops.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got []string
	for m, err := range sub.All(ctx) {
		require.NoError(t, err)
		require.NoError(t, m.Ack(ctx))
		got = append(got, string(m.Data()))
		if len(got) == 3 {
			break
		}
	}
	require.Equal(t, []string{"a", "b", "c"}, got)
}

// TestNilContextSettles: Ack, Nack, Batch.Ack and Close take a nil ctx as
// context.Background(), so that `defer sub.Close(nil)` still closes and writes.
func TestNilContextSettles(t *testing.T) {
	f := newFakeStream("nilctx", 1)
	seqs := f.add(0, time.Now(), "a", "b", "c", "d")
	store := lease.NewMemory()
	// Every advance is written at once, under the ctx given to Ack.
	sub, err := subscribe(context.Background(), f, f.stream, fakeOpts(WithLeaseStore(store), WithInitialPosition(Horizon()), WithCheckpointInterval(0))...)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var b *Batch
	for got, err := range sub.Batches(ctx) {
		require.NoError(t, err)
		b = got
		break
	}
	require.Len(t, b.Messages(), 4)
	ms := b.Messages()
	require.NoError(t, ms[0].Ack(nilCtx))
	require.Equal(t, seqs[0], readLease(t, store, f.stream, ms[0].ShardID()).Checkpoint.Sequence)
	require.NoError(t, ms[1].Ack(nilCtx))
	require.Equal(t, seqs[1], readLease(t, store, f.stream, ms[0].ShardID()).Checkpoint.Sequence)
	require.NoError(t, ms[2].Nack(nilCtx))
	require.Equal(t, seqs[1], readLease(t, store, f.stream, ms[0].ShardID()).Checkpoint.Sequence, "a nacked record holds the checkpoint")
	require.NoError(t, b.Ack(nilCtx))
	require.NoError(t, sub.Close(nilCtx))
	l := readLease(t, store, f.stream, ms[0].ShardID())
	require.Empty(t, l.Owner, "Close(nil) released the lease")
	_, open := <-sub.Messages()
	require.False(t, open)
	require.NoError(t, sub.Close(nilCtx), "a second Close returns the first's result")
}
