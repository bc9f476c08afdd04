package kinesub

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// addKeyed appends n records to shard i of f, spread over keys partition keys "k0"… in turn,
// each carrying "<key>/<count of its key so far>" (counts is updated), and returns their
// sequence numbers.
func addKeyed(f *fakeStream, i, n, keys int, counts map[string]int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	sh := f.shards[i]
	seqs := make([]string, n)
	for j := range n {
		k := "k" + strconv.Itoa(j%keys)
		seq := strconv.Itoa(len(sh.records) + 1)
		sh.records = append(sh.records, types.Record{
			Data: []byte(k + "/" + strconv.Itoa(counts[k])), PartitionKey: aws.String(k),
			SequenceNumber: aws.String(seq), ApproximateArrivalTimestamp: aws.Time(time.Now()),
		})
		counts[k]++
		seqs[j] = seq
	}
	return seqs
}

// keyLog checks what a Process handler sees: per shard and key, payloads "<key>/<n>" handled in
// order, one at a time, and how many handlers ran at once. It is safe for concurrent use.
type keyLog struct {
	t        *testing.T
	mu       sync.Mutex
	next     map[string]int  // shard/key → next count expected
	running  map[string]bool // shard/key → a handler of it runs
	now, max int             // handlers running, and the most at once
	handled  int
}

func newKeyLog(t *testing.T) *keyLog {
	return &keyLog{t: t, next: map[string]int{}, running: map[string]bool{}}
}

// begin notes that a handler of m starts; it fails the test when another of m's key runs, or
// when m is not the key's next record.
func (k *keyLog) begin(m *Message) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key, n, _ := strings.Cut(string(m.Data()), "/")
	id := m.ShardID() + "/" + key
	if k.running[id] {
		k.t.Errorf("key %s: %s started while an earlier record of the key runs", id, m.Data())
	}
	k.running[id] = true
	if c, _ := strconv.Atoi(n); c != k.next[id] {
		k.t.Errorf("key %s: %s started, expected record %d", id, m.Data(), k.next[id])
	}
	k.now++
	k.max = max(k.max, k.now)
}

// end notes that a handler of m returned; done says it succeeded.
func (k *keyLog) end(m *Message, done bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key, _, _ := strings.Cut(string(m.Data()), "/")
	id := m.ShardID() + "/" + key
	k.running[id] = false
	k.now--
	if done {
		k.next[id]++
		k.handled++
	}
}

func (k *keyLog) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.handled
}

// processUntil runs Process on sub in a goroutine until n records were handled (as counted by
// handled), then ends it, and returns its error.
func processUntil(t *testing.T, sub *Subscriber, n int, handled func() int, handle func(context.Context, *Message) error, opts ...ProcessOption) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- sub.Process(ctx, handle, opts...) }()
	for handled() < n {
		select {
		case err := <-res:
			t.Fatalf("Process returned after %d of %d records: %v", handled(), n, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	return <-res
}

// TestProcessOrderPerKey: handlers with random latencies on three shards of 40 keys: per shard
// and key, records are handled one at a time and in order; different keys run at once, up to
// WithConcurrency and never more; every record is acked, so the checkpoints reach each shard's
// last record.
func TestProcessOrderPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const shards, perShard, keys, conc = 3, 600, 40, 24
		rnd := seeded(t)
		f := newFakeStream("order", shards)
		counts := map[string]int{}
		last := make([]string, shards)
		for i := range shards {
			seqs := addKeyed(f, i, perShard, keys, counts)
			last[i] = seqs[len(seqs)-1]
			clear(counts) // keys are per shard
		}
		store := lease.NewMemory()
		sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithInitialPosition(Horizon()), WithBatchSize(100))...)
		log := newKeyLog(t)
		err := processUntil(t, sub, shards*perShard, log.count, func(ctx context.Context, m *Message) error {
			log.begin(m)
			time.Sleep(time.Duration(rnd.IntN(20)) * time.Millisecond)
			log.end(m, true)
			return nil
		}, WithConcurrency(conc))
		require.NoError(t, err)
		require.LessOrEqual(t, log.max, conc)
		require.Greater(t, log.max, conc/2, "keys ran at once")
		require.NoError(t, sub.Close(context.Background()))
		for i, sh := range f.shards {
			require.Equal(t, last[i], readLease(t, store, f.stream, sh.id).Checkpoint)
		}
	})
}
