package kinesub

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// stream is one test's stream on the local Kinesis server.
type stream struct {
	t      *testing.T
	c      *kinesis.Client
	name   string
	pub    *Publisher
	mu     sync.Mutex
	counts map[string]int // partition key → records published
}

func newStream(t *testing.T, shards int32) *stream {
	t.Helper()
	c := testenv.Kinesis(t)
	name := testenv.Name(t)
	testenv.CreateStream(t, c, name, shards)
	pub, err := NewPublisher(c, name)
	require.NoError(t, err)
	return &stream{t: t, c: c, name: name, pub: pub, counts: map[string]int{}}
}

// publish writes n records spread over keys partition keys; each payload is "<key>/<n>", the
// per-key count, so that order and gaps can be checked.
func (s *stream) publish(n, keys int) {
	s.t.Helper()
	recs := make([]Record, n)
	s.mu.Lock()
	for i := range recs {
		k := "key-" + strconv.Itoa(i%keys)
		recs[i] = Record{PartitionKey: k, Data: []byte(k + "/" + strconv.Itoa(s.counts[k]))}
		s.counts[k]++
	}
	s.mu.Unlock()
	// Publish per key in order: one batch call keeps order within a call.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(s.t, s.pub.PublishBatch(ctx, recs))
}

func (s *stream) put(key string, data []byte) string {
	s.t.Helper()
	out, err := s.c.PutRecord(context.Background(), &kinesis.PutRecordInput{
		StreamName: aws.String(s.name), PartitionKey: aws.String(key), Data: data,
	})
	require.NoError(s.t, err)
	return aws.ToString(out.SequenceNumber)
}

func (s *stream) shardIDs() []string {
	s.t.Helper()
	out, err := s.c.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String(s.name)})
	require.NoError(s.t, err)
	var ids []string
	for _, sh := range out.Shards {
		ids = append(ids, aws.ToString(sh.ShardId))
	}
	return ids
}

// testOpts are the short intervals integration tests run with.
func testOpts(store lease.Store, extra ...Option) []Option {
	return append([]Option{
		WithLeaseStore(store),
		WithPollInterval(20 * time.Millisecond),
		WithShardSyncInterval(100 * time.Millisecond),
		WithLeaseTTL(900 * time.Millisecond),
		WithCheckpointInterval(50 * time.Millisecond),
		WithRequestTimeout(3 * time.Second),
	}, extra...)
}

func subscribeT(t *testing.T, s *stream, opts ...Option) *Subscriber {
	t.Helper()
	sub, err := Subscribe(context.Background(), s.c, s.name, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		// Tests may leave messages unacked on purpose: do not wait the default drain for them.
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_ = sub.Close(ctx)
	})
	return sub
}

// recv takes n messages, acking each when ack is set.
func recv(t *testing.T, sub *Subscriber, n int, ack bool) []*Message {
	t.Helper()
	var got []*Message
	deadline := time.After(20 * time.Second)
	for len(got) < n {
		select {
		case m, ok := <-sub.Messages():
			if !ok {
				t.Fatalf("Messages closed after %d of %d (Err: %v)", len(got), n, sub.Err())
			}
			if ack {
				require.NoError(t, m.Ack(context.Background()))
			}
			got = append(got, m)
		case <-deadline:
			t.Fatalf("received %d of %d messages", len(got), n)
		}
	}
	return got
}

// quiet asserts that no message arrives for d.
func quiet(t *testing.T, sub *Subscriber, d time.Duration) {
	t.Helper()
	select {
	case m := <-sub.Messages():
		if m != nil {
			t.Fatalf("unexpected message %q from %s", m.Data(), m.ShardID())
		}
	case <-time.After(d):
	}
}

func payloads(ms []*Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Data())
	}
	return out
}

// orderChecker verifies that, per partition key, payloads "<key>/<n>" arrive in publish order
// and without gaps. A record may arrive again (at-least-once) only as a replay of an earlier
// one; the highest count seen must grow by one.
type orderChecker struct {
	next map[string]int
}

func (o *orderChecker) see(t *testing.T, m *Message) {
	t.Helper()
	if o.next == nil {
		o.next = map[string]int{}
	}
	k, n, ok := strings.Cut(string(m.Data()), "/")
	require.True(t, ok, "payload %q", m.Data())
	i, err := strconv.Atoi(n)
	require.NoError(t, err)
	require.Equal(t, m.PartitionKey(), k)
	if i > o.next[k] {
		t.Fatalf("key %s: got record %d, expected %d (gap or out of order, shard %s)", k, i, o.next[k], m.ShardID())
	}
	if i == o.next[k] {
		o.next[k]++
	}
}

// goroutines returns a check that fails the test if goroutines running the library's code
// (not its tests, not the SDK's idle HTTP connections) remain once it is called.
func goroutines(t *testing.T) func() {
	_, self, _, _ := runtime.Caller(0)
	dir := filepath.Dir(self) + "/"
	ours := func() []string {
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var found []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			for _, line := range strings.Split(g, "\n") {
				line = strings.TrimSpace(line)
				if strings.HasPrefix(line, dir) && !strings.Contains(line, "_test.go") {
					found = append(found, g)
					break
				}
			}
		}
		return found
	}
	return func() {
		t.Helper()
		var left []string
		for range 100 {
			if left = ours(); len(left) == 0 {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%d goroutines of the library remain after Close:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// readLease reads a shard's lease from the store.
func readLease(t *testing.T, store lease.Store, stream, shard string) lease.Lease {
	t.Helper()
	l, err := store.Read(context.Background(), stream+"/"+shard)
	require.NoError(t, err)
	return l
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitErr waits for an error matching target on sub's Errors.
func waitErr(t *testing.T, sub *Subscriber, target error, d time.Duration) error {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case err, ok := <-sub.Errors():
			if !ok {
				t.Fatalf("Errors closed before %v", target)
			}
			if errors.Is(err, target) {
				return err
			}
		case <-deadline:
			t.Fatalf("no %v within %v", target, d)
		}
	}
}

var _ = fmt.Sprint
