package kinesub

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// TestLatestReadsWhatFollowsSubscribe: at the default position, records published right after
// Subscribe returns are all delivered, however late the shards' readers open: the tip is that
// of the Subscribe call, not of the moment a reader opens. Twenty subscriptions in a row, each
// new (no checkpoint), each followed at once by 100 records.
func TestLatestReadsWhatFollowsSubscribe(t *testing.T) {
	s := newStream(t, 2)
	for run := range 20 {
		sub := subscribeT(t, s, testOpts(lease.NewMemory())...)
		recs := make([]Record, 100)
		for i := range recs {
			k := fmt.Sprintf("run%d-key%d", run, i%7)
			recs[i] = Record{PartitionKey: k, Data: fmt.Appendf(nil, "run%d/%d", run, i)}
		}
		require.NoError(t, s.pub.PublishBatch(context.Background(), recs))
		got := map[string]bool{}
		deadline := time.After(time.Minute)
		for len(got) < len(recs) {
			select {
			case m := <-sub.Messages():
				require.NotNil(t, m, "Messages closed: %v", sub.Err())
				// Records of earlier runs, published a moment before this Subscribe, may come too
				// (the tip reaches back for clock skew): only this run's are counted.
				if d := string(m.Data()); strings.HasPrefix(d, fmt.Sprintf("run%d/", run)) {
					require.False(t, got[d], "%s delivered twice", d)
					got[d] = true
				}
				require.NoError(t, m.Ack(context.Background()))
			case <-deadline:
				t.Fatalf("run %d: %d of %d records delivered", run, len(got), len(recs))
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		require.NoError(t, sub.Close(ctx))
		cancel()
	}
}

// TestDefaultStartIsSubscribeTime: a shard without a checkpoint opens at the tip as of the
// Subscribe call (less the clock-skew margin), whenever its reader opens; WithInitialPosition
// replaces it, and a tip given there is pinned to the Subscribe call too.
func TestDefaultStartIsSubscribeTime(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		initial *Position
		want    Position
	}{
		{"default", nil, AtTimestamp(at.Add(-tipSkew))},
		{"latest", ptr(Latest()), AtTimestamp(at.Add(-tipSkew))},
		{"horizon", ptr(Horizon()), Horizon()},
		{"timestamp", ptr(AtTimestamp(at.Add(-time.Hour))), AtTimestamp(at.Add(-time.Hour))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Subscriber{subscribedAt: at}
			s.cfg.initialPos = tc.initial
			require.Equal(t, tc.want, s.initial())
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestStuckRecordIsVisible: one delivery left unsettled while every later one is acked holds
// the shard's checkpoint and, WithMaxInFlight deliveries later, stops the shard. Shards names
// it, with how long it has been unsettled, and the oldest-age metric reports it, so a lost Ack
// is found without a debugger.
func TestStuckRecordIsVisible(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("stuck", 1)
		mt := newMeters(t)
		sub := subscribeFake(t, f, fakeOpts(WithStartAt(Horizon()), WithMaxInFlight(10), WithBatchSize(5),
			WithMeterProvider(mt.provider))...)
		seqs := f.add(0, time.Now(), "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l")
		lost := <-sub.Messages() // never settled
		for range 9 {
			require.NoError(t, (<-sub.Messages()).Ack(context.Background()))
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		st := sub.Shards()[0]
		require.True(t, st.WaitingForAcks, "the shard stopped at its cap: %+v", st)
		require.Equal(t, seqs[0], st.OldestUnsettled, "the record holding the shard")
		require.Equal(t, lost.SequenceNumber(), st.OldestUnsettled)
		require.GreaterOrEqual(t, st.OldestUnsettledMillis, time.Minute.Milliseconds(), "how long it has been unsettled")
		require.Equal(t, 1, st.InFlight)
		require.GreaterOrEqual(t, mt.sum("kinesub.in_flight.oldest_age"), time.Minute.Seconds())

		// Settled, it is gone from both, and the shard reads on.
		require.NoError(t, lost.Ack(context.Background()))
		for range 2 {
			require.NoError(t, (<-sub.Messages()).Ack(context.Background()))
		}
		synctest.Wait()
		st = sub.Shards()[0]
		require.Empty(t, st.OldestUnsettled, "%+v", st)
		require.Zero(t, st.OldestUnsettledMillis)
		require.Zero(t, mt.sum("kinesub.in_flight.oldest_age"))
	})
}

// TestCloseSaysWhatItWaitsFor: Close waiting for unsettled deliveries logs, per shard, how many
// and until when; and when it gives up, that they will be delivered again.
func TestCloseSaysWhatItWaitsFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("closewait", 2)
		f.add(0, time.Now(), "a", "b")
		f.add(1, time.Now(), "c")
		logs := &logLines{}
		sub, err := subscribe(context.Background(), f, "closewait", fakeOpts(WithStartAt(Horizon()), WithLogger(slog.New(logs)))...)
		require.NoError(t, err)
		held := map[string]int{}
		for range 3 {
			m := <-sub.Messages()
			held[m.ShardID()]++
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		require.NoError(t, sub.Close(ctx))
		waits := logs.matching(slog.LevelInfo, "waiting for deliveries to be settled")
		require.Len(t, waits, 2, "one line per shard: %v", logs.all())
		for _, line := range waits {
			require.Contains(t, line, "why=subscription closing")
			require.Contains(t, line, "until=")
		}
		require.Len(t, logs.matching(slog.LevelInfo, "gave up waiting for deliveries to be settled"), 2, "%v", logs.all())
		var unsettled []string
		for _, line := range waits {
			unsettled = append(unsettled, line[strings.Index(line, "unsettled="):][:len("unsettled=1")])
		}
		require.ElementsMatch(t, []string{"unsettled=2", "unsettled=1"}, unsettled)
	})
}

// TestStartPositionReachesChildrenOfOldSplit: a new application on a stream split before it
// started opens the split's children at its start position, as it opens every other shard it
// starts: Latest and AtTimestamp deliver none of what the children held before it, and all that
// follows. The parent, closed before the start, has nothing to deliver.
func TestStartPositionReachesChildrenOfOldSplit(t *testing.T) {
	for _, latest := range []bool{true, false} {
		name := map[bool]string{true: "latest", false: "timestamp"}[latest]
		t.Run(name, func(t *testing.T) {
			s := newStream(t, 1)
			split := time.Now()
			s.splitShard(s.shardIDs()[0])
			testenv.WaitActive(t, s.c, s.name)
			// kinesalite stamps the records of a split's children no earlier than a second
			// after the split: until then an old record would look newer than the cut.
			eventually(t, time.Minute, "the clock past the children's creation", func() bool {
				return time.Since(split) > 1500*time.Millisecond
			})
			for i := range 6 {
				s.put(fmt.Sprintf("key-%d", i), fmt.Appendf(nil, "old-%d", i))
			}
			putNew := func() map[string]bool {
				want := map[string]bool{}
				for i := range 4 {
					d := fmt.Sprintf("new-%d", i)
					s.put(fmt.Sprintf("key-%d", i), []byte(d))
					want[d] = true
				}
				return want
			}
			var opts []Option
			var want map[string]bool
			if latest {
				// The tip reaches tipSkew back for the clock skew with the service: the old
				// records must be older than that when Subscribe is called.
				put := time.Now()
				eventually(t, time.Minute, "the old records past the tip's reach", func() bool {
					return time.Since(put) > tipSkew+time.Second
				})
			} else {
				// A cut after the old records and before the new, which are put before Subscribe:
				// kinesalite does not answer an AT_TIMESTAMP later than a shard's newest record.
				cut := time.Now().Add(10 * time.Millisecond)
				eventually(t, time.Minute, "the clock past the cut", func() bool { return time.Now().After(cut.Add(10 * time.Millisecond)) })
				want = putNew()
				opts = append(opts, WithInitialPosition(AtTimestamp(cut)))
			}
			sub := subscribeT(t, s, testOpts(lease.NewMemory(), opts...)...)
			if latest {
				want = putNew()
			}
			got := map[string]bool{}
			for _, m := range recv(t, sub, len(want), true) {
				got[string(m.Data())] = true
			}
			require.Equal(t, want, got, "only what followed the start position")
			upTo(t, s, sub, nil) // and nothing else
		})
	}
}

// TestChildStartPosition: where a child without checkpoint opens depends on how its parents
// were read to their end. Parents this application never held, closed before it started, pass
// the start position on (Latest, AtTimestamp), through any number of generations, and so do
// parents whose SHARD_END records it (read so by another instance, or an earlier process) or
// that were opened from a marker of it: the child opens at the instant recorded, not at this
// subscriber's own start. A parent whose SHARD_END records nothing (read from a checkpoint, or
// by an earlier version) must have nothing after it skipped: the child opens at its oldest
// record, also when only one of a merge's parents was so read.
func TestChildStartPosition(t *testing.T) {
	for _, tc := range []struct {
		name  string
		chain bool     // split the only shard, then split its child; otherwise merge two shards
		ended []int    // shards whose lease rows show SHARD_END, read by an earlier process
		endAt []int    // of ended, those whose SHARD_END records the instant 30 minutes ago
		mark  []int    // shards whose lease rows hold a marker of the instant 30 minutes ago
		start Position // zero: the default
		want  []string
	}{
		{name: "new application", want: []string{"c-new"}},
		{name: "new application at timestamp", start: AtTimestamp(synctestEpoch.Add(-30 * time.Minute)), want: []string{"c-mid", "c-new"}},
		{name: "new application, grandchild", chain: true, want: []string{"c-new"}},
		{name: "restart", ended: []int{0, 1}, want: []string{"c-old", "c-mid", "c-new"}},
		{name: "restart at timestamp", ended: []int{0, 1}, start: AtTimestamp(synctestEpoch.Add(-30 * time.Minute)), want: []string{"c-old", "c-mid", "c-new"}},
		{name: "one parent read, one never", ended: []int{0}, want: []string{"c-old", "c-mid", "c-new"}},
		{name: "grandchild of a parent read", chain: true, ended: []int{1}, want: []string{"c-old", "c-mid", "c-new"}},
		{name: "parents read by another instance", ended: []int{0, 1}, endAt: []int{0, 1}, want: []string{"c-mid", "c-new"}},
		{name: "one parent read by another instance, one never", ended: []int{0}, endAt: []int{0}, want: []string{"c-mid", "c-new"}},
		{name: "one parent read by another instance, one from a checkpoint", ended: []int{0, 1}, endAt: []int{0}, want: []string{"c-old", "c-mid", "c-new"}},
		{name: "grandchild of a parent read by another instance", chain: true, ended: []int{1}, endAt: []int{1}, want: []string{"c-mid", "c-new"}},
		{name: "restart, parents opened before", mark: []int{0, 1}, want: []string{"c-mid", "c-new"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				require.True(t, synctestEpoch.Equal(time.Now()), "the bubble's clock starts at %v", time.Now())
				old, mid := time.Now().Add(-time.Hour), time.Now().Add(-15*time.Minute)
				f := newFakeStream("childstart", 2)
				f.add(0, old, "p0-old")
				f.add(1, old, "p1-old")
				child := f.merge(0, 1)
				if tc.chain {
					f = newFakeStream("childstart", 1)
					f.add(0, old, "p0-old")
					first := f.split(0)
					f.add(first, old, "p1-old")
					child = f.split(first)
				}
				f.add(child, old, "c-old")
				f.add(child, mid, "c-mid")
				store := lease.NewMemory()
				earlier := time.Now().Add(-30 * time.Minute).UnixMilli()
				row := func(i int, cp lease.Checkpoint) {
					key := "childstart/" + f.shards[i].id
					ok, err := store.Acquire(context.Background(), key, "earlier", time.Minute)
					require.NoError(t, err)
					require.True(t, ok)
					ok, err = store.Checkpoint(context.Background(), key, lease.Tenure{Owner: "earlier", Counter: 1}, cp)
					require.NoError(t, err)
					require.True(t, ok)
					storeRelease(t, store, key, "earlier")
				}
				for _, i := range tc.ended {
					end := lease.Checkpoint{Sequence: lease.ShardEnd}
					if slices.Contains(tc.endAt, i) {
						end.SubSequence = earlier
					}
					row(i, end)
				}
				for _, i := range tc.mark {
					row(i, lease.Checkpoint{Sequence: lease.AtTimestampPrefix + strconv.FormatInt(earlier, 10)})
				}
				opts := fakeOpts(WithLeaseStore(store))
				if !tc.start.IsZero() {
					opts = append(opts, WithInitialPosition(tc.start))
				}
				sub := subscribeFake(t, f, opts...)
				f.add(child, time.Now(), "c-new")
				var got []string
				for {
					select {
					case m := <-sub.Messages():
						require.NotNil(t, m, "Messages closed: %v", sub.Err())
						got = append(got, string(m.Data()))
						require.NoError(t, m.Ack(context.Background()))
						continue
					case <-time.After(10 * time.Second): // virtual: every shard read to its tip
					}
					break
				}
				require.Equal(t, tc.want, got)
				for _, st := range sub.Shards() {
					if st.ShardID == f.shards[child].id {
						return
					}
				}
				t.Fatalf("the child is not held: %+v", sub.Shards())
			})
		})
	}
}

// synctestEpoch is where the clock of a testing/synctest bubble starts.
var synctestEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// placingStore is a lease store through which a subscriber never takes the lease of key:
// another subscriber of the table does.
type placingStore struct {
	fullStore
	key string
}

// fullStore is the lease store placingStore wraps.
type fullStore = lease.Store

func (p placingStore) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if key == p.key {
		return false, nil
	}
	return p.fullStore.Acquire(ctx, key, owner, ttl)
}

func (p placingStore) Steal(ctx context.Context, key, owner string, counter int64, ttl time.Duration) (bool, error) {
	if key == p.key {
		return false, nil
	}
	return p.fullStore.Steal(ctx, key, owner, counter, ttl)
}

func (p placingStore) StealNote(ctx context.Context, key, owner string, counter int64, ttl time.Duration, note string) (bool, error) {
	if key == p.key {
		return false, nil
	}
	return p.fullStore.StealNote(ctx, key, owner, counter, ttl, note)
}

// TestFleetStartPositionReachesChildren: in a fleet, the start position reaches the children
// of a split made before the application started whichever instance takes them. Instance a
// starts the application, reads the closed parent from the start position (nothing) to its
// end; instance b, started later, takes a child a never held: it opens it where the
// application started, not at its oldest record (the children's history from before the
// start), nor at its own Subscribe (the records published in between).
func TestFleetStartPositionReachesChildren(t *testing.T) {
	for _, tc := range []struct {
		name   string
		latest bool
		store  func(t *testing.T) fullStore
	}{
		{"latest", true, func(*testing.T) fullStore { return lease.NewMemory() }},
		{"timestamp", false, func(*testing.T) fullStore { return lease.NewMemory() }},
		{"timestamp, DynamoDB", false, func(t *testing.T) fullStore { return dynamoStore(t) }},
	} {
		latest := tc.latest
		t.Run(tc.name, func(t *testing.T) {
			s := newStream(t, 1)
			parent := s.shardIDs()[0]
			split := time.Now()
			s.splitShard(parent)
			testenv.WaitActive(t, s.c, s.name)
			out, err := s.c.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String(s.name)})
			require.NoError(t, err)
			var children []types.Shard // the one b takes first
			for _, sh := range out.Shards {
				if aws.ToString(sh.ShardId) != parent {
					children = append(children, sh)
				}
			}
			require.Len(t, children, 2)
			put := func(what string, n int) map[string]bool {
				recs := map[string]bool{}
				for _, ch := range children {
					for i := range n {
						d := fmt.Sprintf("%s-%s-%d", what, aws.ToString(ch.ShardId), i)
						_, err := s.c.PutRecord(context.Background(), &kinesis.PutRecordInput{
							StreamName: aws.String(s.name), PartitionKey: aws.String(d),
							ExplicitHashKey: ch.HashKeyRange.StartingHashKey, Data: []byte(d),
						})
						require.NoError(t, err)
						recs[d] = true
					}
				}
				return recs
			}
			// kinesalite stamps the records of a split's children no earlier than a second
			// after the split: until then an old record would look newer than the cut.
			eventually(t, time.Minute, "the clock past the children's creation", func() bool {
				return time.Since(split) > 1500*time.Millisecond
			})
			put("old", 3)
			pastTip := func(since time.Time) { // the tip reaches tipSkew back
				eventually(t, time.Minute, "the records past the tip's reach", func() bool {
					return time.Since(since) > tipSkew+time.Second
				})
			}
			store := tc.store(t)
			var opts []Option
			want := map[string]bool{}
			if latest {
				pastTip(time.Now())
			} else {
				// A cut after the old records and before the others, which are put before
				// Subscribe: kinesalite does not answer an AT_TIMESTAMP later than a shard's
				// newest record.
				cut := time.Now().Add(10 * time.Millisecond)
				eventually(t, time.Minute, "the clock past the cut", func() bool { return time.Now().After(cut.Add(10 * time.Millisecond)) })
				maps.Copy(want, put("mid", 2))
				opts = append(opts, WithInitialPosition(AtTimestamp(cut)))
			}
			taken := children[0]
			a := subscribeT(t, s, testOpts(placingStore{store, s.name + "/" + aws.ToString(taken.ShardId)}, append(opts, WithOwner("a"))...)...)
			if latest {
				maps.Copy(want, put("mid", 2))
			}
			eventually(t, time.Minute, "a read the parent to its end", func() bool {
				return readLease(t, store, s.name, parent).Checkpoint.Sequence == lease.ShardEnd
			})
			// The finishing write records where the children open: the application's start.
			start := a.initial()
			require.Equal(t, time.Unix(0, start.unixNano).UnixMilli(), readLease(t, store, s.name, parent).Checkpoint.SubSequence,
				"the parent's SHARD_END records the start %v", start)
			if latest {
				// b's own tip would skip the records published since a started.
				pastTip(time.Now())
			}
			b := subscribeT(t, s, testOpts(store, append(opts, WithOwner("b"))...)...)
			eventually(t, time.Minute, "b holds the child a may not take", func() bool {
				return readLease(t, store, s.name, aws.ToString(taken.ShardId)).Owner == b.cfg.owner
			})
			maps.Copy(want, put("new", 2))
			got, fromB := map[string]bool{}, 0
			deadline := time.After(time.Minute)
			for len(got) < len(want) {
				var m *Message
				select {
				case m = <-a.Messages():
					require.NotNil(t, m, "a's Messages closed: %v", a.Err())
				case m = <-b.Messages():
					require.NotNil(t, m, "b's Messages closed: %v", b.Err())
					if m.ShardID() == aws.ToString(taken.ShardId) {
						fromB++
					}
				case <-deadline:
					t.Fatalf("%d of %d records delivered: %v", len(got), len(want), got)
				}
				d := string(m.Data())
				require.True(t, want[d], "%s delivered: only what followed the start position", d)
				got[d] = true
				require.NoError(t, m.Ack(context.Background()))
			}
			// Each shard delivers in order: what it held from before the start would have come
			// before the rest.
			require.Equal(t, 4, fromB, "b delivered the child's records from the start on")
		})
	}
}

// TestEndCheckpoint: a shard read to its end from a stream-wide instant records the instant on
// its SHARD_END, and its children open there; one read from anywhere else records nothing,
// and its children open at their oldest record.
func TestEndCheckpoint(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		start     Position
		fromStart bool // opened at a stream-wide start, not moved by a seek since
		want      lease.Checkpoint
	}{
		{"at an instant", AtTimestamp(at), true, lease.Checkpoint{Sequence: lease.ShardEnd, SubSequence: at.UnixMilli()}},
		{"at an instant, moved by a seek", AtTimestamp(at), false, lease.Checkpoint{Sequence: lease.ShardEnd}},
		{"at the oldest record", Horizon(), true, lease.Checkpoint{Sequence: lease.ShardEnd}},
		{"after a checkpoint", Position{kind: posAfter, shard: "s", sequence: "1"}, false, lease.Checkpoint{Sequence: lease.ShardEnd}},
		{"before the epoch", AtTimestamp(time.Unix(-60, 0)), true, lease.Checkpoint{Sequence: lease.ShardEnd}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &worker{start: tc.start}
			w.fromStart.Store(tc.fromStart)
			end := w.endCheckpoint()
			require.Equal(t, tc.want, end)
			child, ok := childStart(end)
			require.Equal(t, tc.want.SubSequence > 0, ok)
			if ok {
				require.Equal(t, AtTimestamp(at), child)
			}
		})
	}
	_, ok := childStart(lease.Checkpoint{Sequence: "49600", SubSequence: 3})
	require.False(t, ok, "a sub-sequence of anything but SHARD_END passes nothing on")
}
