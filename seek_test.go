package kinesub

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSeekRacingInFlightBatchDeliversNoPreSeekRecord seeks a busy shard again and again while
// batches are in flight: being fetched (GetRecords is slowed down), waiting in the buffered
// channel, or held by the publisher for a consumer that is not reading. Every seek jumps to a
// region of the shard the reader cannot have reached, so a record fetched before the seek is
// recognisable by its index. Once Seek has returned, only records from the new position may
// arrive, starting exactly at it and without gaps.
//
// It runs in a synctest bubble: the per-shard rate limit (5 GetRecords a second) and the slowed
// calls cost no wall time, and a slowed GetRecords only returns once everything else, a
// running Seek included, is blocked, so most seeks meet a batch in flight.
func TestSeekRacingInFlightBatchDeliversNoPreSeekRecord(t *testing.T) {
	synctest.Test(t, testSeekRacingInFlightBatch)
}

func testSeekRacingInFlightBatch(t *testing.T) {
	const (
		seeks  = 200
		stride = 500 // the reader never gets this far ahead between two seeks
		after  = 20  // records checked after each seek
	)
	f := newFakeStream("race", 1)
	base := time.Now().Add(-time.Hour)
	payloads := make([]string, seeks*stride+stride)
	seqs := make([]string, len(payloads))
	for i := range payloads {
		payloads[i] = strconv.Itoa(i)
		// One record per millisecond, so a timestamp picks out exactly one record.
		seqs[i] = f.add(0, base.Add(time.Duration(i)*time.Millisecond), payloads[i])[0]
	}
	arrival := func(i int) time.Time { return base.Add(time.Duration(i) * time.Millisecond) }
	f.setHooks(func(ctx context.Context, _ string) error {
		d := time.Duration(rand.IntN(300)) * time.Microsecond
		if rand.IntN(8) == 0 {
			d = 3 * time.Millisecond // a batch in flight for a while
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		return nil
	}, nil)
	sub := subscribeFake(t, f, fakeOpts(WithStartAt(Horizon()), WithBatchSize(16), WithBufferSize(8), WithMaxInFlight(64))...)
	shard := f.shards[0].id
	index := func(m *Message) int {
		i, err := strconv.Atoi(string(m.Data()))
		require.NoError(t, err)
		return i
	}
	next := func() *Message {
		select {
		case m, ok := <-sub.Messages():
			require.True(t, ok, "Messages closed: %v", sub.Err())
			require.NoError(t, m.Ack(context.Background()))
			return m
		case <-time.After(5 * time.Second):
			t.Fatal("no message within 5s")
			return nil
		}
	}
	ctx := context.Background()
	require.Equal(t, 0, index(next()), "the shard is read before the first seek")
	for i := 1; i <= seeks; i++ {
		target := i * stride
		p := AtSequence(shard, seqs[target])
		if i%4 >= 2 {
			p = AtTimestamp(arrival(target)) // the stream-wide path
		}
		if i%2 == 0 {
			// The consumer is not reading while Seek runs: the publisher holds a record and the
			// buffer is full of them.
			for range rand.IntN(20) {
				next()
			}
			time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
			require.NoError(t, sub.Seeker().Seek(ctx, p))
			for j := range after {
				require.Equal(t, target+j, index(next()), "seek %d to %v: record %d after it", i, p, j)
			}
			continue
		}
		// The consumer reads concurrently; what it receives once Seek has returned must come
		// from the new position.
		var returned atomic.Bool
		failed := make(chan string, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			expect, before, checked := target, 0, 0
			for checked < after {
				if before >= 200 && !returned.Load() {
					time.Sleep(50 * time.Microsecond) // stay well behind the next region
					continue
				}
				sought := returned.Load()
				var m *Message
				select {
				case m = <-sub.Messages():
				case <-time.After(5 * time.Second):
					failed <- "no message within 5s (before=" + strconv.Itoa(before) + " checked=" + strconv.Itoa(checked) + " sought=" + strconv.FormatBool(returned.Load()) + ")"
					return
				}
				if m == nil {
					failed <- "Messages closed"
					return
				}
				_ = m.Ack(context.Background())
				got, _ := strconv.Atoi(string(m.Data()))
				switch {
				case sought && got != expect:
					failed <- "after Seek returned: record " + strconv.Itoa(got) + ", want " + strconv.Itoa(expect)
					return
				case got >= target && got != expect:
					failed <- "new position out of order: record " + strconv.Itoa(got) + ", want " + strconv.Itoa(expect)
					return
				case got >= target:
					expect++
				}
				if sought {
					checked++
				} else {
					before++
				}
			}
		}()
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		require.NoError(t, sub.Seeker().Seek(ctx, p))
		returned.Store(true)
		<-done
		select {
		case msg := <-failed:
			t.Fatalf("seek %d to %v: %s", i, p, msg)
		default:
		}
	}
}

// TestSeekShardBeforeFirstListing: until the subscription has listed the stream's shards, a
// shard-scoped seek cannot tell an unknown shard from one it does not hold yet; it must not
// claim that an existing shard is unknown.
func TestSeekShardBeforeFirstListing(t *testing.T) {
	f := newFakeStream("unlisted", 1)
	seq := f.add(0, time.Now(), "a")[0]
	release := make(chan struct{})
	f.beforeListShards = func(ctx context.Context) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	sub := subscribeFake(t, f, fakeOpts()...)
	err := sub.Seeker().Seek(context.Background(), AtSequence(f.shards[0].id, seq))
	require.ErrorIs(t, err, ErrShardNotOwned)
	close(release)
}
