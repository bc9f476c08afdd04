package kinesub

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// storeMode is how a flakyStore answers.
type storeMode int32

const (
	storeOK   storeMode = iota
	storeFail           // every call fails at once
	storeHang           // every call blocks until its context ends
)

// flakyStore is a lease store that errors or hangs on demand, as a partitioned or overloaded
// lease table does. Arm breakAfterRenew to switch to a mode right after the next successful
// heartbeat renewal: the worst moment for an owner, whose leases then live longest in its own
// eyes. With noNotes set, its StealNote writes no note (a Steal), as a subscriber of a version
// that noted no load: a fleet with such an owner balances by count, and so by steals.
type flakyStore struct {
	lease.Store
	noNotes         bool
	mode            atomic.Int32
	breakAfterRenew atomic.Int32 // a storeMode to switch to after the next heartbeat renewal; 0: none
	lastRenewSent   atomic.Int64 // unix nanoseconds of the last heartbeat renewal's call
	broke           chan struct{}
	brokeOnce       sync.Once
}

func newFlakyStore(s lease.Store) *flakyStore {
	return &flakyStore{Store: s, broke: make(chan struct{})}
}

func (f *flakyStore) set(m storeMode) { f.mode.Store(int32(m)) }

func (f *flakyStore) gate(ctx context.Context) error {
	switch storeMode(f.mode.Load()) {
	case storeFail:
		return errors.New("lease table unreachable (test)")
	case storeHang:
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (f *flakyStore) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := f.gate(ctx); err != nil {
		return false, err
	}
	return f.Store.Acquire(ctx, key, owner, ttl)
}

func (f *flakyStore) Steal(ctx context.Context, key, owner string, counter int64, ttl time.Duration) (bool, error) {
	if err := f.gate(ctx); err != nil {
		return false, err
	}
	return f.Store.Steal(ctx, key, owner, counter, ttl)
}

// StealNote notes the heartbeat renewals: a StealNote of an owner's own heartbeat row
// (tenure.go).
func (f *flakyStore) StealNote(ctx context.Context, key, owner string, counter int64, ttl time.Duration, note string) (bool, error) {
	if err := f.gate(ctx); err != nil {
		return false, err
	}
	sent := time.Now()
	var ok bool
	var err error
	if f.noNotes {
		ok, err = f.Store.Steal(ctx, key, owner, counter, ttl)
	} else {
		ok, err = f.Store.StealNote(ctx, key, owner, counter, ttl, note)
	}
	if ok && err == nil && strings.HasSuffix(key, "/"+ownerRowPrefix+owner) {
		f.lastRenewSent.Store(sent.UnixNano())
		if m := f.breakAfterRenew.Swap(0); m != 0 {
			f.set(storeMode(m))
			f.brokeOnce.Do(func() { close(f.broke) })
		}
	}
	return ok, err
}

func (f *flakyStore) Checkpoint(ctx context.Context, key string, h lease.Tenure, cp lease.Checkpoint) (bool, error) {
	if err := f.gate(ctx); err != nil {
		return false, err
	}
	return f.Store.Checkpoint(ctx, key, h, cp)
}

func (f *flakyStore) CheckpointOrdered(ctx context.Context, key string, h lease.Tenure, cp lease.Checkpoint, n int64) (bool, error) {
	if err := f.gate(ctx); err != nil {
		return false, err
	}
	return f.Store.CheckpointOrdered(ctx, key, h, cp, n)
}

func (f *flakyStore) Read(ctx context.Context, key string) (lease.Lease, error) {
	if err := f.gate(ctx); err != nil {
		return lease.Lease{}, err
	}
	return f.Store.Read(ctx, key)
}

func (f *flakyStore) Release(ctx context.Context, key string, h lease.Tenure) (bool, error) {
	if err := f.gate(ctx); err != nil {
		return false, err
	}
	return f.Store.Release(ctx, key, h)
}

func (f *flakyStore) List(ctx context.Context) ([]lease.Lease, error) {
	if err := f.gate(ctx); err != nil {
		return nil, err
	}
	return f.Store.List(ctx)
}

func (f *flakyStore) ListPrefix(ctx context.Context, prefix string) ([]lease.Lease, error) {
	if err := f.gate(ctx); err != nil {
		return nil, err
	}
	return f.Store.ListPrefix(ctx, prefix)
}

func (f *flakyStore) Delete(ctx context.Context, key string, counter int64) (bool, error) {
	if err := f.gate(ctx); err != nil {
		return false, err
	}
	return f.Store.Delete(ctx, key, counter)
}

// arrival is one record as a consumer received it, and when.
type arrival struct {
	shard string
	at    time.Time
}

// deliveryLog receives and acks everything a subscriber delivers, noting when.
type deliveryLog struct{ *collector[arrival] }

func logDeliveries(sub *Subscriber) deliveryLog {
	return deliveryLog{collect(sub.Messages(), func(m *Message) arrival {
		d := arrival{m.ShardID(), time.Now()}
		_ = m.Ack(context.Background())
		return d
	})}
}

// span returns the first and last delivery of shard, and how many there were.
func (l deliveryLog) span(shard string) (first, last time.Time, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range l.items {
		if d.shard != shard {
			continue
		}
		if n == 0 {
			first = d.at
		}
		last = d.at
		n++
	}
	return first, last, n
}

// owned returns the shards sub reads (or is about to), by Shards.
func owned(sub *Subscriber) []string {
	var ids []string
	for _, st := range sub.Shards() {
		if st.Owner == sub.cfg.owner && st.State != ShardFinished {
			ids = append(ids, st.ShardID)
		}
	}
	return ids
}

// TestStealNeverOverlapsFailingVictim: A and B share four shards; A's lease store starts
// failing just after a successful renewal, the worst moment; C joins and steals one of A's
// shards at once. A keeps reading until its renewal deadline (2/3 TTL after that renewal), so
// C must wait at least that long before it reads: no instant may see both deliver the shard.
// A notes no load, so that the fleet balances by count and C steals rather than being handed a
// shard back. In a synctest bubble, delivery times are exact.
func TestStealNeverOverlapsFailingVictim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		f := newFakeStream("steal", 4)
		mem := lease.NewMemory()
		storeA := newFlakyStore(mem)
		storeA.noNotes = true
		opts := func(store lease.Store, owner string, extra ...Option) []Option {
			return fakeOpts(append([]Option{WithLeaseStore(store), WithOwner(owner), WithLeaseTTL(ttl),
				WithInitialPosition(Horizon())}, extra...)...)
		}
		stop := make(chan struct{})
		var producer sync.WaitGroup
		producer.Add(1)
		go func() { // a record on every shard every 10ms
			defer producer.Done()
			for i := 0; ; i++ {
				for sh := range 4 {
					f.add(sh, time.Now(), fmt.Sprint(i))
				}
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
		defer func() { close(stop); producer.Wait() }()

		subA := subscribeFake(t, f, opts(storeA, "a", WithBalanceInterval(time.Hour))...)
		logA := logDeliveries(subA)
		subB := subscribeFake(t, f, opts(mem, "b", WithBalanceInterval(time.Hour))...)
		logB := logDeliveries(subB)
		for len(owned(subA)) != 2 || len(owned(subB)) != 2 {
			time.Sleep(50 * time.Millisecond)
		}
		storeA.breakAfterRenew.Store(int32(storeFail))
		<-storeA.broke
		lastRenew := time.Unix(0, storeA.lastRenewSent.Load())

		subC := subscribeFake(t, f, opts(mem, "c", WithBalanceInterval(10*time.Millisecond))...)
		logC := logDeliveries(subC)
		var stolen string
		for stolen == "" {
			time.Sleep(5 * time.Millisecond)
			for _, st := range subC.Shards() {
				if baseOwner(st.Owner) == "c" && (st.State == ShardStarting || st.State == ShardReading) {
					stolen = st.ShardID
				}
			}
		}
		for _, st := range subC.Shards() {
			if st.ShardID == stolen {
				require.Equal(t, ShardStarting, st.State, "a stolen shard shows that its reader waits")
			}
		}
		for {
			if _, _, n := logC.span(stolen); n >= 20 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		_, lastA, nA := logA.span(stolen)
		_, _, nB := logB.span(stolen)
		firstC, _, _ := logC.span(stolen)
		require.Positive(t, nA+nB, "the shard was read before the steal")
		if nA > 0 {
			require.True(t, lastA.Before(firstC), "a delivered %s until %v after c started", stolen, lastA.Sub(firstC))
			require.LessOrEqual(t, lastA.Sub(lastRenew), 2*ttl/3, "a stops by its renewal deadline")
		}
		require.GreaterOrEqual(t, firstC.Sub(lastRenew), 2*ttl/3, "c waits out a's renewal deadline")
	})
}

// TestHungStoreStopsReaderBeforeExpiry: a lease store that fails and then stops answering
// right after a renewal is noticed at the renewal deadline (2/3 TTL after the last renewal was sent), not when
// a renewal attempt finally times out: the reader stops, and reports ErrLeaseLost, before the
// lease can expire under it.
func TestHungStoreStopsReaderBeforeExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		f := newFakeStream("hung", 1)
		store := newFlakyStore(lease.NewMemory())
		sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithLeaseTTL(ttl), WithRequestTimeout(10*time.Second),
			WithInitialPosition(Horizon()))...)
		errs := collectErrors(sub)
		f.add(0, time.Now(), "a", "b")
		m := <-sub.Messages()
		require.NoError(t, m.Ack(context.Background()))
		// The store first fails fast, then stops answering: the renewal attempt that hangs starts
		// late in the lease's life, where a check made only after it returns comes too late.
		store.breakAfterRenew.Store(int32(storeFail))
		<-store.broke
		last := time.Unix(0, store.lastRenewSent.Load())
		for errs.count(func(err error) bool { var se *ShardError; return errors.As(err, &se) && se.Op == OpHeartbeat }) == 0 {
			time.Sleep(time.Millisecond)
		}
		store.set(storeHang)
		for errs.count(func(err error) bool { return errors.Is(err, ErrLeaseLost) }) == 0 {
			time.Sleep(time.Millisecond)
		}
		require.LessOrEqual(t, time.Since(last), 2*ttl/3+time.Millisecond, "lost at the renewal deadline")
		f.add(0, time.Now(), "c")
		select {
		case m := <-sub.Messages():
			t.Fatalf("delivered %q after the lease was lost", m.Data())
		case <-time.After(ttl):
		}
		store.set(storeOK)
	})
}

// TestLostLeaseDropsHeldRecord: the dispatcher holds a record for a consumer that is not
// receiving when the lease is taken over. Once ErrLeaseLost is reported, that record must not
// reach the consumer: the new owner delivers it.
func TestLostLeaseDropsHeldRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("held", 1)
		store := lease.NewMemory()
		sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithInitialPosition(Horizon()))...)
		errs := collectErrors(sub)
		f.add(0, time.Now(), "a", "b")
		synctest.Wait()
		for sub.Shards()[0].InFlight == 0 {
			time.Sleep(time.Millisecond)
		}
		synctest.Wait() // the dispatcher now waits to hand "a" over
		stealAsPeer(t, store, "held", "shardId-000000000000", "thief")
		for errs.count(func(err error) bool { return errors.Is(err, ErrLeaseLost) }) == 0 {
			time.Sleep(time.Millisecond)
		}
		select {
		case m := <-sub.Messages():
			t.Fatalf("delivered %q after the lease was lost", m.Data())
		case <-time.After(5 * time.Second):
		}
	})
}

// TestCallsBoundedOnHungStore: with a lease store that stops answering, Ack (checkpoint on
// every advance), Commit and Seek, called with a context that never ends, each return within
// the request timeout with an error; Close with a 1s context returns by then and names the
// checkpoint and release it could not write.
func TestCallsBoundedOnHungStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 2 * time.Second
		f := newFakeStream("bounded", 1)
		store := newFlakyStore(lease.NewMemory())
		sub, err := subscribe(context.Background(), f, "bounded", fakeOpts(WithLeaseStore(store), WithCheckpointInterval(0),
			WithRequestTimeout(timeout), WithLeaseTTL(time.Hour), WithInitialPosition(Horizon()))...)
		require.NoError(t, err)
		f.add(0, time.Now(), "a", "b", "c", "d")
		a := <-sub.Messages()
		require.NoError(t, a.Ack(context.Background()))
		store.set(storeHang)

		b := <-sub.Messages()
		start := time.Now()
		err = b.Ack(context.Background())
		require.Error(t, err, "the checkpoint write cannot complete")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.LessOrEqual(t, time.Since(start), timeout)

		start = time.Now()
		require.ErrorIs(t, sub.Commit(context.Background()), context.DeadlineExceeded)
		require.LessOrEqual(t, time.Since(start), timeout)

		start = time.Now()
		err = sub.Seeker().Seek(context.Background(), Horizon())
		require.NoError(t, err, "the old watermark's write fails (reported), the seek itself needs no store")
		require.LessOrEqual(t, time.Since(start), timeout+time.Millisecond)
		require.Equal(t, "a", string((<-sub.Messages()).Data()), "sought to the horizon")

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start = time.Now()
		err = sub.Close(ctx)
		require.LessOrEqual(t, time.Since(start), time.Second)
		var named []string
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			var se *ShardError
			require.ErrorAs(t, e, &se)
			named = append(named, string(se.Op)+" "+se.Shard)
		}
		require.Contains(t, named, string(OpRelease)+" shardId-000000000000", "Close says what it could not write")
		require.Equal(t, err, sub.Close(context.Background()), "every Close returns the same result")
		store.set(storeOK)
	})
}

// TestSeekWithCancelledContextChangesNothing: Seek with a context that is already done returns
// its error and leaves every shard reading where it was; nothing stalls.
func TestSeekWithCancelledContextChangesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("cancelled", 2)
		sub := subscribeFake(t, f, fakeOpts(WithInitialPosition(Horizon()))...)
		f.add(0, time.Now(), "a0")
		f.add(1, time.Now(), "b0")
		for range 2 {
			require.NoError(t, (<-sub.Messages()).Ack(context.Background()))
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := sub.Seeker().Seek(ctx, Horizon())
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrSeekPending)
		err = sub.Seeker().Seek(ctx, AtSequence("shardId-000000000000", "1"))
		require.ErrorIs(t, err, context.Canceled)
		for i := range 25 {
			f.add(0, time.Now(), fmt.Sprint("a", i+1))
			f.add(1, time.Now(), fmt.Sprint("b", i+1))
		}
		got := map[string]bool{}
		for range 50 {
			m := <-sub.Messages()
			got[string(m.Data())] = true
			require.NoError(t, m.Ack(context.Background()))
		}
		require.Len(t, got, 50, "all 50 new records arrive, none of the old")
		for _, st := range sub.Shards() {
			require.Equal(t, ShardReading, st.State)
		}
	})
}

// TestSeekPendingWhenCallerGivesUp: the caller's context ends while a reader is still opening
// the new position (GetShardIterator hangs). Seek says the shard is moved but not reopened
// (ErrSeekPending); once the call goes through, the shard delivers from the new position.
func TestSeekPendingWhenCallerGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("pending", 1)
		sub := subscribeFake(t, f, fakeOpts(WithInitialPosition(Horizon()))...)
		f.add(0, time.Now(), "r0", "r1")
		for range 2 {
			require.NoError(t, (<-sub.Messages()).Ack(context.Background()))
		}
		release := make(chan struct{})
		var once sync.Once
		f.setHooks(nil, func(ctx context.Context, _ *kinesis.GetShardIteratorInput) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		err := sub.Seeker().Seek(ctx, Horizon())
		require.ErrorIs(t, err, ErrSeekPending)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		once.Do(func() { close(release) })
		require.Equal(t, "r0", string((<-sub.Messages()).Data()), "the shard reads from the new position")
	})
}

// TestNilArgumentsAreErrors: a nil Option to Subscribe or NewPublisher and a nil Seeker behind
// SeekHandler are errors a caller can read, not panics.
func TestNilArgumentsAreErrors(t *testing.T) {
	_, err := subscribe(context.Background(), noIO{t: t}, "orders", WithOwner("a"), nil)
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "option 1")
	_, err = newPublisher(noIO{t: t}, "orders", nil)
	require.ErrorIs(t, err, ErrInvalidOption)

	var nilSeeker *Seeker
	require.ErrorIs(t, nilSeeker.Seek(context.Background(), Horizon()), ErrInvalidOption)
	rec := httptest.NewRecorder()
	SeekHandler(nil).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/seek", strings.NewReader("horizon")))
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	require.Contains(t, rec.Body.String(), "nil Seeker")
}

// TestShardErrorOfStream: an error of the whole stream (ListShards) names the stream alone.
func TestShardErrorOfStream(t *testing.T) {
	err := &ShardError{Stream: "orders", Op: "ListShards", Err: errors.New("boom")}
	require.Equal(t, "kinesub: ListShards orders: boom", err.Error())
	err.Shard = "shardId-000000000001"
	require.Equal(t, "kinesub: ListShards orders/shardId-000000000001: boom", err.Error())
}

// TestSettleAfterClose: once Close has returned, Ack and Nack say so (ErrClosed) instead of
// pretending to count; during Close's drain they still count.
func TestSettleAfterClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("late", 1)
		store := lease.NewMemory()
		sub, err := subscribe(context.Background(), f, "late", fakeOpts(WithLeaseStore(store), WithInitialPosition(Horizon()))...)
		require.NoError(t, err)
		seqs := f.add(0, time.Now(), "a", "b", "c")
		a, b := <-sub.Messages(), <-sub.Messages()
		closed := make(chan error)
		go func() { closed <- sub.Close(context.Background()) }()
		synctest.Wait() // Close waits for a and b to settle
		require.NoError(t, a.Ack(context.Background()), "an ack during the drain counts")
		require.NoError(t, <-closed)
		require.Equal(t, seqs[0], readLease(t, store, "late", "shardId-000000000000").Checkpoint.Sequence)
		require.ErrorIs(t, b.Ack(context.Background()), ErrClosed)
		require.ErrorIs(t, b.Nack(context.Background()), ErrClosed)
	})
}

// TestHandingBackShownInShards: while an instance hands a lease back for balance (letting what
// its consumer holds settle first), Shards says so rather than "reading".
func TestHandingBackShownInShards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("handback", 2)
		store := lease.NewMemory()
		subA := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithInitialPosition(Horizon()))...)
		f.add(0, time.Now(), "x")
		f.add(1, time.Now(), "y")
		held := []*Message{<-subA.Messages(), <-subA.Messages()} // not acked: the hand-back waits for them
		subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("b"))...)
		states := func() map[ShardState]int {
			n := map[ShardState]int{}
			for _, st := range subA.Shards() {
				n[st.State]++
			}
			return n
		}
		for states()[ShardHandingBack] == 0 {
			time.Sleep(time.Millisecond)
		}
		require.Equal(t, map[ShardState]int{ShardHandingBack: 1, ShardReading: 1}, states())
		for _, m := range held {
			require.NoError(t, m.Ack(context.Background()))
		}
		for len(owned(subA)) != 1 {
			time.Sleep(time.Millisecond)
		}
	})
}

// TestErrorsAreShardErrors: whatever fails (the lease table, here), everything on Errors is a
// *ShardError whose Op is one of the exported constants; stream-level ones have no shard.
func TestErrorsAreShardErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("errs", 2)
		store := newFlakyStore(lease.NewMemory())
		sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithInitialPosition(Horizon()))...)
		f.add(0, time.Now(), "a")
		require.NoError(t, (<-sub.Messages()).Ack(context.Background()))
		store.set(storeFail)
		known := map[Op]bool{OpListShards: true, OpGetShardIterator: true, OpGetRecords: true, OpDecode: true,
			OpListLeases: true, OpAcquire: true, OpSteal: true, OpReadLease: true, OpRenew: true, OpLease: true,
			OpCheckpoint: true, OpRelease: true, OpDeleteLease: true, OpHeartbeat: true, OpDeleteHeartbeat: true, OpSeek: true}
		seen := map[Op]bool{}
		for len(seen) < 4 { // list leases, heartbeat, renew, lease lost
			err := <-sub.Errors()
			var se *ShardError
			require.ErrorAs(t, err, &se)
			require.Same(t, se, err, "sent as a *ShardError, not wrapped")
			require.True(t, known[se.Op], "op %q", se.Op)
			require.Equal(t, "errs", se.Stream)
			seen[se.Op] = true
		}
		store.set(storeOK)
	})
}

// TestSlowLargeReadsShrink: a GetRecords response that cannot arrive within the request timeout
// (here 1ms a record against a 100ms timeout, with pages of 1000 asked for) would time out again
// at the same size forever; the reader halves what it asks for until pages arrive, so the shard
// moves on.
func TestSlowLargeReadsShrink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("slow", 1)
		f.perRecord = time.Millisecond
		payloads := make([]string, 3000)
		for i := range payloads {
			payloads[i] = strconv.Itoa(i)
		}
		f.add(0, time.Now(), payloads...)
		sub := subscribeFake(t, f, fakeOpts(WithRequestTimeout(100*time.Millisecond), WithBatchSize(1000),
			WithInitialPosition(Horizon()))...)
		deadline := time.After(time.Minute) // of the bubble's time: pages of 100 take seconds
		for i := range payloads {
			select {
			case m := <-sub.Messages():
				require.Equal(t, payloads[i], string(m.Data()))
				require.NoError(t, m.Ack(context.Background()))
			case <-deadline:
				t.Fatalf("%d of %d records after a minute", i, len(payloads))
			}
		}
	})
}
