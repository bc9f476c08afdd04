package kinesub

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// memSource is a shard source that serves a fake stream's records straight from memory, with
// no Kinesis API in between: a second implementation of the seam, which shows that the
// coordinator, watermark, checkpoints, seek and balancing work with any source.
type memSource struct {
	f     *fakeStream
	shard string
	at    int // index of the next record
}

func withMemSource(f *fakeStream) Option {
	return func(c *config) {
		c.source = func(shard string) shardSource { return &memSource{f: f, shard: shard} }
	}
}

func (m *memSource) open(ctx context.Context, p Position) error {
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	sh := m.f.shard(m.shard)
	if sh == nil {
		return &sourceError{op: "Open", err: fakeNotFound("shard")}
	}
	switch p.kind {
	case posHorizon:
		m.at = 0
	case posLatest:
		m.at = len(sh.records)
	case posTimestamp:
		m.at = len(sh.records)
		for i, r := range sh.records {
			if !r.ApproximateArrivalTimestamp.Before(time.Unix(0, p.unixNano)) {
				m.at = i
				break
			}
		}
	case posSequence, posAfter:
		n, err := strconv.Atoi(p.sequence)
		if err != nil || n < 1 || n > len(sh.records) {
			return &sourceError{op: "Open", err: fakeInvalid("sequence number " + p.sequence)}
		}
		m.at = n - 1
		if p.kind == posAfter {
			m.at = n
		}
	}
	return nil
}

func (m *memSource) take(limit int) page {
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	sh := m.f.shard(m.shard)
	end := min(len(sh.records), m.at+limit)
	pg := page{records: append([]types.Record(nil), sh.records[m.at:end]...)}
	m.at = end
	pg.end = sh.closed && end == len(sh.records)
	if len(pg.records) == 0 && !pg.end {
		pg.pause = time.Millisecond
	}
	return pg
}

func (m *memSource) next(ctx context.Context, limit int) (page, error) {
	if err := ctx.Err(); err != nil {
		return page{}, err
	}
	return m.take(limit), nil
}

func (m *memSource) close() {}

// keyedPayloads adds n records "k/<from>" … to shard i of f.
func keyedPayloads(f *fakeStream, i, from, n int) {
	p := make([]string, n)
	for j := range p {
		p[j] = fmt.Sprintf("k/%d", from+j)
	}
	f.add(i, time.Now(), p...)
}

// TestMemorySourceReshards: with records served from memory, children still wait for every
// parent (split and merge), and one key's records arrive in order, each once, across both.
func TestMemorySourceReshards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("mem", 2)
		sub := subscribeFake(t, f, fakeOpts(withMemSource(f), WithLeaseStore(lease.NewMemory()), WithInitialPosition(Horizon()))...)
		keyedPayloads(f, 0, 0, 10)
		var oc orderChecker
		held := make([]*Message, 0, 10)
		for range 10 {
			m := <-sub.Messages()
			oc.see(t, m)
			held = append(held, m)
		}
		child := f.split(0)
		keyedPayloads(f, child, 10, 10)
		// Several shard-sync and claim rounds pass (virtual time: exact on any load).
		select {
		case m := <-sub.Messages():
			t.Fatalf("child delivered %q while its parent's records were unsettled", m.Data())
		case <-time.After(time.Second):
		}
		require.Equal(t, ShardWaitingForParent, sub.Shards()[child].State)
		for _, m := range held {
			require.NoError(t, m.Ack(context.Background()))
		}
		for range 10 {
			m := <-sub.Messages()
			require.Equal(t, "shardId-000000000002", m.ShardID())
			oc.see(t, m)
			require.NoError(t, m.Ack(context.Background()))
		}
		merged := f.merge(1, child)
		keyedPayloads(f, merged, 20, 5)
		for range 5 {
			m := <-sub.Messages()
			require.Equal(t, "shardId-000000000003", m.ShardID())
			oc.see(t, m)
			require.NoError(t, m.Ack(context.Background()))
		}
		require.Equal(t, 25, oc.next["k"])
	})
}

// TestMemorySourceSeek: seeks reposition a memory-served shard as they do a polled one: to the
// horizon, to a sequence number, and stream-wide to the tip; earlier acks no longer count.
func TestMemorySourceSeek(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("memseek", 1)
		store := lease.NewMemory()
		sub := subscribeFake(t, f, fakeOpts(withMemSource(f), WithLeaseStore(store), WithInitialPosition(Horizon()))...)
		keyedPayloads(f, 0, 0, 10)
		recvAll := func(n int) []string {
			var got []string
			for range n {
				m := <-sub.Messages()
				got = append(got, string(m.Data()))
				require.NoError(t, m.Ack(context.Background()))
			}
			return got
		}
		require.Equal(t, "k/9", recvAll(10)[9])
		require.NoError(t, sub.Seeker().Seek(context.Background(), Horizon()))
		require.Equal(t, []string{"k/0", "k/1"}, recvAll(2))
		require.NoError(t, sub.Seeker().Seek(context.Background(), AtSequence("shardId-000000000000", "6")))
		require.Equal(t, []string{"k/5", "k/6"}, recvAll(2))
		require.NoError(t, sub.Seeker().Seek(context.Background(), Latest()))
		keyedPayloads(f, 0, 10, 1)
		require.Equal(t, []string{"k/10"}, recvAll(1))
		require.NoError(t, sub.Commit(context.Background()))
		require.Equal(t, "11", readLease(t, store, "memseek", "shardId-000000000000").Checkpoint.Sequence)
	})
}
