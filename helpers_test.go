package kinesub

import (
	"context"
	"errors"
	"log/slog"
	"math/big"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gostream/kinesub/internal/publish"
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
	recs := s.records(n, keys)
	// Written with plain PutRecords calls of 500, in order: the test servers do not throttle,
	// so nothing is refused and every key's records are stored in order, as fast as the
	// server takes them (the Publisher would pace them under the service's limits, and send
	// a key's records one call after the other).
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for start := 0; start < len(recs); start += publish.MaxBatchRecords {
		var entries []types.PutRecordsRequestEntry
		for _, r := range recs[start:min(start+publish.MaxBatchRecords, len(recs))] {
			entries = append(entries, types.PutRecordsRequestEntry{PartitionKey: aws.String(r.PartitionKey), Data: r.Data})
		}
		out, err := s.c.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(s.name), Records: entries})
		require.NoError(s.t, err)
		require.Zero(s.t, aws.ToInt32(out.FailedRecordCount), "the test server refused records")
	}
}

// publishPaced writes records as publish does, through the Publisher, which keeps to the
// service's write limits: for a server that enforces them.
func (s *stream) publishPaced(n, keys int) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(s.t, s.pub.PublishBatch(ctx, s.records(n, keys)))
}

// records makes the next n records of publish.
func (s *stream) records(n, keys int) []Record {
	recs := make([]Record, n)
	s.mu.Lock()
	for i := range recs {
		k := "key-" + strconv.Itoa(i%keys)
		recs[i] = Record{PartitionKey: k, Data: []byte(k + "/" + strconv.Itoa(s.counts[k]))}
		s.counts[k]++
	}
	s.mu.Unlock()
	return recs
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

// testOpts are the short intervals integration tests run with. The request timeout is a
// failure bound only: on a busy machine the emulator may take seconds to answer a large
// GetRecords, and a shorter timeout would turn a slow read into one retried forever. The lease
// TTL is seconds for the same reason: a subscriber gives a shard up when a renewal has not
// succeeded within 2/3 of it, and a busy machine can leave the renewal unscheduled for hundreds
// of milliseconds. Tests of lease loss set their own TTL.
func testOpts(store lease.Store, extra ...Option) []Option {
	return append([]Option{
		WithLeaseStore(store),
		WithPollInterval(20 * time.Millisecond),
		WithShardSyncInterval(100 * time.Millisecond),
		WithLeaseTTL(3 * time.Second),
		WithCheckpointInterval(50 * time.Millisecond),
		WithRequestTimeout(30 * time.Second),
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
	deadline := time.After(time.Minute)
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
			t.Fatalf("received %d of %d messages in a minute", len(got), n)
		}
	}
	return got
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
// one; the highest count seen must grow by one. It also keeps the newest sequence number seen
// on each shard.
type orderChecker struct {
	next map[string]int
	last map[string]*big.Int // shard → newest sequence number received
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
	o.saw(t, m)
}

// saw records m's sequence number as its shard's newest if it is.
func (o *orderChecker) saw(t *testing.T, m *Message) {
	t.Helper()
	if o.last == nil {
		o.last = map[string]*big.Int{}
	}
	seq, ok := new(big.Int).SetString(m.SequenceNumber(), 10)
	require.True(t, ok, "sequence number %q", m.SequenceNumber())
	if cur := o.last[m.ShardID()]; cur == nil || seq.Cmp(cur) > 0 {
		o.last[m.ShardID()] = seq
	}
}

// noLeaks returns a check that fails the test if goroutines started since noLeaks was called
// remain once it is called, the SDK's idle HTTP connections aside (the clients outlive a
// subscription). It gives them up to ten seconds to wind down.
func noLeaks(t *testing.T) func() {
	t.Helper()
	opts := []goleak.Option{
		goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	}
	return func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := goleak.Find(opts...)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("goroutines remain after Close: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// parkedAtCap reports whether every reader of sub (there are shards of them) waits for room
// below its in-flight cap, with the deliveries it fetched, received all of them: then nothing
// more can arrive until something is acked.
func parkedAtCap(sub *Subscriber, shards, received int) bool {
	held := heldShards(sub)
	if len(held) != shards {
		return false
	}
	fetched := 0
	for _, w := range held {
		if !w.waitingRoom.Load() {
			return false
		}
		w.mu.Lock()
		fetched += w.wm.inFlight()
		w.mu.Unlock()
	}
	return fetched == received
}

// holdToCap takes messages without acking them until every one of shards readers is parked at
// its cap, and returns them.
func holdToCap(t *testing.T, sub *Subscriber, shards int) []*Message {
	t.Helper()
	var held []*Message
	deadline := time.After(time.Minute)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !parkedAtCap(sub, shards, len(held)) {
		select {
		case m, ok := <-sub.Messages():
			require.True(t, ok, "Messages closed: %v", sub.Err())
			held = append(held, m)
		case <-tick.C:
		case <-deadline:
			t.Fatalf("readers not parked at their cap after a minute, %d messages held: %+v", len(held), sub.Shards())
		}
	}
	return held
}

// none fails if a message is ready to be received. Call it once nothing more can be delivered.
func none(t *testing.T, sub *Subscriber) {
	t.Helper()
	select {
	case m, ok := <-sub.Messages():
		if ok {
			t.Fatalf("unexpected message %q from %s", m.Data(), m.ShardID())
		}
	default:
	}
}

// seeded returns a source of randomness for the test and logs its seed if the test fails;
// KINESUB_SEED replays a seed. It is safe for concurrent use.
func seeded(t *testing.T) *lockedRand {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("KINESUB_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "KINESUB_SEED")
		seed = n
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("random seed %d (rerun with KINESUB_SEED=%d)", seed, seed)
		}
	})
	return &lockedRand{r: rand.New(rand.NewPCG(seed, 0))}
}

type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

// IntN returns a number in [0, n).
func (l *lockedRand) IntN(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.IntN(n)
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

// heldShards returns the shards sub holds, by id.
func heldShards(sub *Subscriber) map[string]*worker {
	ws, _ := sub.table.held()
	byID := make(map[string]*worker, len(ws))
	for _, w := range ws {
		byID[w.id] = w
	}
	return byID
}

// closing reports whether sub's Close has begun.
func closing(sub *Subscriber) bool {
	_, open := sub.table.held()
	return !open
}

// storeCheckpoint writes seq as key's checkpoint in store for its current holder, as that
// owner would.
func storeCheckpoint(t testing.TB, store lease.Store, key, seq string) {
	t.Helper()
	ctx := context.Background()
	l, err := store.Read(ctx, key)
	require.NoError(t, err)
	ok, err := store.Checkpoint(ctx, key, l.Tenure(), lease.Checkpoint{Sequence: seq})
	require.NoError(t, err)
	require.True(t, ok, "checkpoint of %s by %q", key, l.Owner)
}

// storeRelease releases key in store for owner, as owner would.
func storeRelease(t testing.TB, store lease.Store, key, owner string) {
	t.Helper()
	ctx := context.Background()
	// A row a live peer renews (livePeer) may move between the read and the release: read it
	// again and release at its new counter, as long as it is the owner's.
	for range 100 {
		l, err := store.Read(ctx, key)
		require.NoError(t, err)
		require.Equal(t, owner, l.Owner, "holder of %s", key)
		ok, err := store.Release(ctx, key, l.Tenure())
		require.NoError(t, err)
		if ok {
			return
		}
	}
	t.Fatalf("release of %s by %q refused 100 times", key, owner)
}

// logLines is a slog.Handler that keeps every record's level and message.
type logLines struct {
	mu    sync.Mutex
	lines []string
	attrs []slog.Attr // of the handler (WithAttrs); not kept per line
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }

func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	return nil
}

func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }

// has reports whether a line of level says msg.
func (l *logLines) has(level slog.Level, msg string) bool {
	return len(l.matching(level, msg)) > 0
}

// matching returns the lines of level that start with msg.
func (l *logLines) matching(level slog.Level, msg string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.HasPrefix(line, level.String()+" "+msg) {
			out = append(out, line)
		}
	}
	return out
}

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// baseOwner returns the owner name a subscriber was given (WithOwner), without the
// incarnation Subscribe appends to it.
func baseOwner(owner string) string {
	name, _, _ := strings.Cut(owner, "#")
	return name
}

// peerState is how a peer made by holdAsPeer keeps its heartbeat row.
type peerState int

const (
	// peerLive renews its row, moving its counter, until the test ends: a running subscriber.
	peerLive peerState = iota
	// peerSilent has a row that is never renewed: a subscriber paused or crashed a moment ago,
	// whose row peers take over once they have seen its counter stand still long enough.
	peerSilent
	// peerGone has no row: a subscriber that stopped, whose leases are free to take over.
	peerGone
)

// holdAsPeer makes owner, a subscriber of stream that is not running here, hold shards: each
// shard's lease bound to it, and its heartbeat row kept as state says.
func holdAsPeer(t testing.TB, store lease.Store, stream, owner string, state peerState, shards ...string) {
	t.Helper()
	ctx := context.Background()
	switch state {
	case peerLive:
		livePeer(t, store, stream, owner)
	case peerSilent:
		ok, err := store.Acquire(ctx, stream+"/"+ownerRowPrefix+owner, owner, time.Hour)
		require.NoError(t, err)
		require.True(t, ok, "heartbeat row of %s", owner)
	}
	for _, sh := range shards {
		ok, err := store.Acquire(ctx, stream+"/"+sh, owner, 0)
		require.NoError(t, err)
		require.True(t, ok, "lease of %s for %s", sh, owner)
	}
}

// livePeer takes owner's heartbeat row and renews it as a running subscriber does, moving its
// counter every few milliseconds (far more often than any test's TTL/3), until the test ends or
// the row is no longer its own.
// Taking the row again for an owner already live here does nothing more. It returns a function
// that stops the renewals at once, as a crash would (nil when the owner was already live).
func livePeer(t testing.TB, store lease.Store, stream, owner string) (stop func()) {
	t.Helper()
	key := stream + "/" + ownerRowPrefix + owner
	ctx := context.Background()
	l, err := store.Read(ctx, key)
	require.NoError(t, err)
	if l.Owner == owner {
		return nil // already live: its renewer runs
	}
	ok, err := store.Acquire(ctx, key, owner, time.Hour)
	require.NoError(t, err)
	require.True(t, ok, "heartbeat row of %s", owner)
	stopped, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	stop = func() { once.Do(func() { close(stopped); <-done }) }
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopped:
				return
			case <-tick.C:
			}
			l, err := store.Read(ctx, key)
			if err != nil {
				continue
			}
			if l.Owner != owner {
				return // released (the peer stopped) or taken over (taken for dead)
			}
			_, _ = store.Steal(ctx, key, owner, l.Counter, time.Hour)
		}
	}()
	t.Cleanup(stop)
	return stop
}

// bumpChanges moves stream's change row as owner, a subscriber not running here, does after a
// change: the subscribers on stream read the table at their next claim tick.
func bumpChanges(t testing.TB, store lease.Store, stream, owner string) {
	t.Helper()
	ctx := context.Background()
	key := stream + "/" + changesRow
	c, err := store.Read(ctx, key)
	require.NoError(t, err)
	if c.Counter == 0 {
		_, err = store.Acquire(ctx, key, owner, changeHold)
	} else {
		_, err = store.Steal(ctx, key, owner, c.Counter, changeHold)
	}
	require.NoError(t, err)
}

// stealAsPeer takes shard's lease over for owner, a live subscriber not running here, as a
// thief does: its heartbeat row live, the lease stolen at the counter it has and left pending
// (the thief would bind it and read only stealWait later), and the change row moved, which the
// subscriber it was stolen from watches. It returns livePeer's stop.
func stealAsPeer(t testing.TB, store lease.Store, stream, shard, owner string) (stop func()) {
	t.Helper()
	ctx := context.Background()
	stop = livePeer(t, store, stream, owner)
	l, err := store.Read(ctx, stream+"/"+shard)
	require.NoError(t, err)
	// As a subscriber steals: noting the holding stolen.
	var ok bool
	note, noted := noteVictim(l.Counter+1, l.Tenure())
	if noted {
		ok, err = store.StealNote(ctx, l.Key, owner, l.Counter, pendingTTL, note)
	} else {
		ok, err = store.Steal(ctx, l.Key, owner, l.Counter, pendingTTL)
	}
	require.NoError(t, err)
	require.True(t, ok, "steal of %s", shard)
	bumpChanges(t, store, stream, owner)
	return stop
}
