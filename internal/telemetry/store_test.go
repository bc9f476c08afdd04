package telemetry

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
	"github.com/gostream/kinesub/lease/leasetest"
)

// TestStoreConformance: the wrapper passes every call through unchanged, so a wrapped store
// passes the conformance suite every store must pass.
func TestStoreConformance(t *testing.T) {
	leasetest.Run(t, func(t *testing.T) lease.Store {
		return Store{Store: lease.NewMemory(), Requests: newMeters(t).req}
	})
}

// TestStoreCounts: every method of lease.Store is counted under its operation.
func TestStoreCounts(t *testing.T) {
	mt := newMeters(t)
	s := Store{Store: lease.NewMemory(), Requests: mt.req}
	ctx := context.Background()
	a := lease.Tenure{Owner: "a", Counter: 1}
	cp := lease.Checkpoint{Sequence: "1"}
	for _, tc := range []struct {
		op   string
		call func() error
	}{
		{"lease.Acquire", func() error { _, err := s.Acquire(ctx, "s/1", "a", time.Minute); return err }},
		{"lease.Renew", func() error { _, err := s.Renew(ctx, "s/1", a, time.Minute); return err }},
		{"lease.Checkpoint", func() error { _, err := s.Checkpoint(ctx, "s/1", a, cp); return err }},
		{"lease.Checkpoint", func() error { _, err := s.CheckpointOrdered(ctx, "s/1", a, cp, 1); return err }},
		{"lease.Read", func() error { _, err := s.Read(ctx, "s/1"); return err }},
		{"lease.List", func() error { _, err := s.List(ctx); return err }},
		{"lease.List", func() error { _, err := s.ListPrefix(ctx, "s/"); return err }},
		{"lease.Steal", func() error { _, err := s.Steal(ctx, "s/1", "b", 1, time.Minute); return err }},
		{"lease.Steal", func() error { _, err := s.StealNote(ctx, "s/1", "c", 2, time.Minute, "n"); return err }},
		{"lease.Release", func() error { _, err := s.Release(ctx, "s/1", lease.Tenure{Owner: "c", Counter: 3}); return err }},
		{"lease.Delete", func() error { _, err := s.Delete(ctx, "s/1", 3); return err }},
	} {
		before := mt.counts()[tc.op+"/ok"]
		require.NoError(t, tc.call(), tc.op)
		require.Equal(t, before+1, mt.counts()[tc.op+"/ok"], tc.op)
	}
	_, err := s.ListPrefix(ctx, "")
	require.ErrorIs(t, err, lease.ErrInvalidArgument)
	require.EqualValues(t, 1, mt.counts()["lease.List/error"])
}

// TestStoreCheckpointed: each checkpoint write, by either method, is passed to Checkpointed
// with its key and result: written, fenced or failed.
func TestStoreCheckpointed(t *testing.T) {
	type write struct {
		key string
		ok  bool
		err bool
	}
	var got []write
	mt := newMeters(t)
	s := Store{Store: lease.NewMemory(), Requests: mt.req,
		Checkpointed: func(_ context.Context, key string, ok bool, err error) {
			got = append(got, write{key, ok, err != nil})
		}}
	ctx := context.Background()
	_, err := s.Acquire(ctx, "s/1", "a", time.Minute)
	require.NoError(t, err)
	a, b := lease.Tenure{Owner: "a", Counter: 1}, lease.Tenure{Owner: "b", Counter: 1}
	cp := lease.Checkpoint{Sequence: "1"}
	_, _ = s.Checkpoint(ctx, "s/1", a, cp)
	_, _ = s.Checkpoint(ctx, "s/1", b, cp)
	_, _ = s.Checkpoint(ctx, "s/1", a, lease.Checkpoint{})
	_, _ = s.CheckpointOrdered(ctx, "s/1", a, cp, 1)
	_, _ = s.CheckpointOrdered(ctx, "s/1", b, cp, 1)
	_, _ = s.CheckpointOrdered(ctx, "s/1", a, cp, 0)
	_, _ = s.Renew(ctx, "s/1", a, time.Minute)
	w := []write{{"s/1", true, false}, {"s/1", false, false}, {"s/1", false, true}}
	require.Equal(t, append(w, w...), got)
	require.EqualValues(t, 4, mt.counts()["lease.Checkpoint/ok"], "a fenced write is a call that worked")
	require.EqualValues(t, 2, mt.counts()["lease.Checkpoint/error"])
}
