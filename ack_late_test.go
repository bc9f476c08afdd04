package kinesub

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// The promise: an Ack that moved no checkpoint, because its shard's reading ended first, says
// so. The record is delivered again by the next holder, so a handler must be able to learn
// that what it did may be done again (the KCL's ShutdownException, for a checkpointer).

// TestAckAfterLeaseLostSaysSo: Message.Ack and Batch.Ack after the lease was lost return an
// error matching ErrAckedLate and ErrLeaseLost, in a ShardError naming the shard; the
// message counts as settled all the same, and no checkpoint moves.
func TestAckAfterLeaseLostSaysSo(t *testing.T) {
	f := newFakeStream("ack-late-lost", 1)
	f.add(0, time.Now(), "a", "b", "c", "d")
	store := lease.NewMemory()
	sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithStartAt(Horizon()), WithCheckpointInterval(0))...)
	got := recv(t, sub, 4, false)
	ctx := context.Background()
	require.NoError(t, got[0].Ack(ctx), "an ack in time")
	ws, _ := sub.table.held()
	require.Len(t, ws, 1)
	w := ws[0]
	w.lose("lost in a test")
	eventually(t, 5*time.Second, "the shard lost", func() bool { return w.state() == stateLost })

	err := got[1].Ack(ctx)
	require.ErrorIs(t, err, ErrAckedLate)
	require.ErrorIs(t, err, ErrLeaseLost)
	var se *ShardError
	require.True(t, errors.As(err, &se), "%v", err)
	require.Equal(t, OpAck, se.Op)
	require.Equal(t, w.id, se.Shard)
	require.ErrorIs(t, got[1].Ack(ctx), ErrAlreadySettled, "settled all the same")

	b := &Batch{msgs: got[2:]}
	require.ErrorIs(t, b.Ack(ctx), ErrAckedLate)

	l := readLease(t, store, "ack-late-lost", w.id)
	require.Equal(t, got[0].SequenceNumber(), l.Checkpoint.Sequence, "late acks move no checkpoint")
}

// TestAckAfterSeekSaysSo: an Ack of a record fetched before a Seek moved its shard returns an
// error matching ErrAckedLate (not ErrLeaseLost: the lease is still held), and the record is
// delivered again after the seek back.
func TestAckAfterSeekSaysSo(t *testing.T) {
	f := newFakeStream("ack-late-seek", 1)
	f.add(0, time.Now(), "a", "b")
	sub := subscribeFake(t, f, fakeOpts(WithStartAt(Horizon()))...)
	got := recv(t, sub, 2, false)
	ctx := context.Background()
	require.NoError(t, sub.Seeker().Seek(ctx, Horizon()))
	err := got[0].Ack(ctx)
	require.ErrorIs(t, err, ErrAckedLate)
	require.NotErrorIs(t, err, ErrLeaseLost)
	again := recv(t, sub, 2, true)
	require.Equal(t, got[0].SequenceNumber(), again[0].SequenceNumber(), "delivered again after the seek")
}
