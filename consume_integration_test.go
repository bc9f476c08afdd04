package kinesub

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPullStylesAgainstService: on the emulators, with the DynamoDB store, a Batches loop reads
// a two-shard stream with one Ack a batch, breaks halfway, and an All loop goes on with the rest
// in per-key order; after Close, a second subscription on the same table reads only what was
// published since.
func TestPullStylesAgainstService(t *testing.T) {
	s := newStream(t, 2)
	store := dynamoStore(t)
	s.publish(400, 4)
	sub := subscribeT(t, s, testOpts(store, WithInitialPosition(Horizon()))...)
	// A failure bound only: a loop missing records would otherwise wait for them for good.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	next := map[string]int{}
	check := func(m *Message) {
		key, n, _ := strings.Cut(string(m.Data()), "/")
		require.Equal(t, key+"/"+strconv.Itoa(next[key]), key+"/"+n, "per-key order")
		next[key]++
	}
	got := 0
	for b, err := range sub.Batches(ctx) {
		require.NoError(t, err)
		for _, m := range b.Messages() {
			require.Equal(t, b.ShardID(), m.ShardID(), "a batch mixes shards")
			check(m)
		}
		require.NoError(t, b.Ack(ctx))
		if got += len(b.Messages()); got >= 200 {
			break
		}
	}
	for m, err := range sub.All(ctx) {
		require.NoError(t, err)
		check(m)
		require.NoError(t, m.Ack(ctx))
		if got++; got == 400 {
			break
		}
	}
	require.NoError(t, sub.Close(ctx))

	again := subscribeT(t, s, testOpts(store)...)
	s.publish(4, 4)
	for m, err := range again.All(ctx) {
		require.NoError(t, err)
		check(m)
		require.NoError(t, m.Ack(ctx))
		if got++; got == 404 {
			break
		}
	}
	require.NoError(t, ctx.Err())
	for _, k := range []string{"key-0", "key-1", "key-2", "key-3"} {
		require.Equal(t, 101, next[k], k)
	}
}
