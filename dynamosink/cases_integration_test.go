package dynamosink_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/dynamosink"
	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// One partition key in two open shards (explicit hash keys alternating between the halves of
// the key space): sequence numbers of the two shards do not order the key's records, and each
// shard's records are applied on their own mark: all 60 effects once, none answered as a
// replay.
func TestProcessKeyInTwoShards(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := testenv.Kinesis(t)
	stream := testenv.Name(t)
	testenv.CreateStream(t, client, stream, 2)
	pub, err := kinesub.NewPublisher(client, stream)
	require.NoError(t, err)
	const n = 60
	recs := make([]kinesub.Record, n)
	for i := range recs {
		ehk := "0"
		if i%2 == 1 {
			ehk = "170141183460469231731687303715884105728" // 2^127: the second shard's half
		}
		recs[i] = kinesub.Record{PartitionKey: "k", ExplicitHashKey: ehk, Data: []byte(strconv.Itoa(i))}
	}
	require.NoError(t, pub.PublishBatch(ctx, recs))
	var replays atomic.Int64
	shards := sync.Map{}
	consumeAll(ctx, t, client, stream, lease.NewMemory(), n, func(ctx context.Context, m *kinesub.Message) error {
		shards.Store(m.ShardID(), true)
		err := f.sink.Apply(ctx, m, f.add("r"+string(m.Data()), string(m.Data())))
		if errors.Is(err, dynamosink.ErrReplay) {
			replays.Add(1)
			return nil
		}
		return err
	})
	count := 0
	shards.Range(func(any, any) bool { count++; return true })
	require.Equal(t, 2, count, "the key's records came from both shards")
	assert.Zero(t, replays.Load(), "records answered as replays")
	for i := range n {
		c, _ := f.count(t, "r"+strconv.Itoa(i))
		assert.Equal(t, 1, c, "record %d applied %d times", i, c)
	}
}

// A record that fails once under WithMaxAttempts(1) goes to the dead letter through
// Sink.DeadLetter, and the next nine of its key are applied. Applied again as a delivery it is
// refused as out of order, not as a replay; redriven with RedriveMark it is applied, once.
func TestProcessDeadLetterRedrive(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := testenv.Kinesis(t)
	stream := testenv.Name(t)
	testenv.CreateStream(t, client, stream, 1)
	pub, err := kinesub.NewPublisher(client, stream)
	require.NoError(t, err)
	const n = 10
	recs := make([]kinesub.Record, n)
	for i := range recs {
		recs[i] = kinesub.Record{PartitionKey: "k", Data: []byte(strconv.Itoa(i))}
	}
	require.NoError(t, pub.PublishBatch(ctx, recs))
	effect := func(m *kinesub.Message) []types.TransactWriteItem {
		return []types.TransactWriteItem{f.add("r"+string(m.Data()), string(m.Data())), f.add("k", string(m.Data()))}
	}
	var failed atomic.Bool
	var parked []dynamosink.Mark
	var mu sync.Mutex
	var settled atomic.Int64
	sub, err := kinesub.Subscribe(ctx, client, stream, kinesub.WithLeaseStore(lease.NewMemory()),
		kinesub.WithStartAt(kinesub.Horizon()), kinesub.WithPollInterval(20*time.Millisecond))
	require.NoError(t, err)
	pctx, stop := context.WithCancel(ctx)
	h := f.sink.Handler(func(_ context.Context, m *kinesub.Message) ([]types.TransactWriteItem, error) {
		if string(m.Data()) == "0" && failed.CompareAndSwap(false, true) {
			return nil, errors.New("down for a moment")
		}
		return effect(m), nil
	})
	err = sub.Process(pctx, func(ctx context.Context, m *kinesub.Message) error {
		if err := h(ctx, m); err != nil {
			return err
		}
		if settled.Add(1) == n {
			stop()
		}
		return nil
	}, kinesub.WithMaxAttempts(1), kinesub.WithDeadLetter(f.sink.DeadLetter(func(_ context.Context, m *kinesub.Message, _ error) error {
		mu.Lock()
		parked = append(parked, f.sink.MarkOf(m))
		mu.Unlock()
		if settled.Add(1) == n {
			stop()
		}
		return nil
	})))
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, sub.Close(ctx))
	require.Len(t, parked, 1)
	dead := parked[0]
	c, _ := f.count(t, "r0")
	require.Zero(t, c, "the dead letter's effect")
	c, by := f.count(t, "k")
	require.Equal(t, n-1, c)
	require.Equal(t, "9", by)

	items := []types.TransactWriteItem{f.add("r0", "0"), f.add("k", "0")}
	err = f.sink.ApplyMark(ctx, dead, items...)
	require.ErrorIs(t, err, dynamosink.ErrOutOfOrder, "delivered again, the dead letter is not a replay")
	require.True(t, dynamosink.Permanent(err))
	require.NoError(t, f.sink.RedriveMark(ctx, dead, items...), "the redrive")
	require.ErrorIs(t, f.sink.RedriveMark(ctx, dead, items...), dynamosink.ErrReplay, "the redrive again")
	require.ErrorIs(t, f.sink.ApplyMark(ctx, dead, items...), dynamosink.ErrReplay)
	c, _ = f.count(t, "r0")
	assert.Equal(t, 1, c)
	c, _ = f.count(t, "k")
	assert.Equal(t, n, c)
}

// Skip, redrive and the records around them, record by record.
func TestSkipAndRedrive(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	r := func(seq string) dynamosink.Mark { return rec("k", shard0, seq, 0, holdA) }
	// Skipped before anything was applied, then applied in order after all: no longer skipped.
	require.NoError(t, f.sink.SkipMark(ctx, r("100")))
	require.NoError(t, f.sink.SkipMark(ctx, r("100")), "skipped twice")
	_, ok, err := f.sink.Read(ctx, shard0, "k")
	require.NoError(t, err)
	require.False(t, ok, "nothing applied")
	require.NoError(t, f.sink.ApplyMark(ctx, r("100"), f.add("r100", "100")))
	require.ErrorIs(t, f.sink.SkipMark(ctx, r("100")), dynamosink.ErrReplay, "an applied record is not skipped")
	// A redrive of a record nothing passed is an Apply.
	require.NoError(t, f.sink.RedriveMark(ctx, r("110"), f.add("r110", "110")))
	require.NoError(t, f.sink.SkipMark(ctx, r("120")))
	require.NoError(t, f.sink.ApplyMark(ctx, r("130"), f.add("r130", "130")))
	require.ErrorIs(t, f.sink.ApplyMark(ctx, r("120"), f.add("r120", "120")), dynamosink.ErrOutOfOrder)
	require.ErrorIs(t, f.sink.RedriveMark(ctx, r("105"), f.add("r105", "105")), dynamosink.ErrReplay, "never skipped, passed")
	require.NoError(t, f.sink.RedriveMark(ctx, r("120"), f.add("r120", "120")))
	mark, ok, err := f.sink.Read(ctx, shard0, "k")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "130", mark.Sequence, "a redrive leaves the mark where it is")
	for _, id := range []string{"r100", "r110", "r120", "r130"} {
		c, _ := f.count(t, id)
		assert.Equal(t, 1, c, id)
	}
	// A later epoch supersedes the skips of earlier ones.
	require.NoError(t, f.sink.SkipMark(ctx, r("140")))
	e1 := r("1")
	e1.Epoch = 1
	require.NoError(t, f.sink.ApplyMark(ctx, e1))
	require.ErrorIs(t, f.sink.RedriveMark(ctx, r("140")), dynamosink.ErrSuperseded)
	require.ErrorIs(t, f.sink.SkipMark(ctx, r("150")), dynamosink.ErrSuperseded)
}

// A new lease table restarts the lease counters: records read under it are applied, whether
// the Sink names the lease tables (WithLeaseTable) or not.
func TestApplyNewLeaseTable(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	old, fresh := lease.Tenure{Owner: "a", Counter: 9}, lease.Tenure{Owner: "a", Counter: 1}
	require.NoError(t, f.sink.ApplyMark(ctx, rec("k", shard0, "100", 0, old)))
	require.NoError(t, f.sink.ApplyMark(ctx, rec("k", shard0, "200", 0, fresh)), "no lease table named")
	named := func(seq string, t lease.Tenure, leases string) dynamosink.Mark {
		m := rec("n", shard0, seq, 0, t)
		m.Leases = leases
		return m
	}
	require.NoError(t, f.sink.ApplyMark(ctx, named("100", old, "one")))
	require.ErrorIs(t, f.sink.ApplyMark(ctx, named("200", fresh, "one")), dynamosink.ErrSuperseded, "same table, earlier holding")
	require.NoError(t, f.sink.ApplyMark(ctx, named("200", fresh, "two")), "a new lease table")
	require.ErrorIs(t, f.sink.ApplyMark(ctx, named("150", old, "one")), dynamosink.ErrReplay, "positions still tell replays")
}

// A seek back with the same epoch finds replays; in a higher epoch the records are applied
// again, once, and the lower epoch's records are refused from then on.
func TestApplyEpochReprocesses(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	in := func(seq string, epoch int64) dynamosink.Mark {
		m := rec("k", shard0, seq, 0, holdA)
		m.Epoch = epoch
		return m
	}
	for _, seq := range []string{"100", "110", "120"} {
		require.NoError(t, f.sink.ApplyMark(ctx, in(seq, 0), f.add("r"+seq, seq)))
	}
	for _, seq := range []string{"100", "110", "120"} { // the seek back, same epoch
		require.ErrorIs(t, f.sink.ApplyMark(ctx, in(seq, 0), f.add("r"+seq, seq)), dynamosink.ErrReplay)
	}
	for _, seq := range []string{"100", "110"} { // the seek back, epoch 1
		require.NoError(t, f.sink.ApplyMark(ctx, in(seq, 1), f.add("r"+seq, seq)))
		require.ErrorIs(t, f.sink.ApplyMark(ctx, in(seq, 1), f.add("r"+seq, seq)), dynamosink.ErrReplay)
	}
	err := f.sink.ApplyMark(ctx, in("130", 0), f.add("r130", "130"))
	require.ErrorIs(t, err, dynamosink.ErrSuperseded, "a record of the earlier epoch")
	var se *dynamosink.SupersededError
	require.ErrorAs(t, err, &se)
	assert.True(t, se.Epoch)
	assert.Equal(t, int64(1), se.MarkEpoch)
	assert.True(t, dynamosink.Permanent(err))
	for seq, want := range map[string]int{"100": 2, "110": 2, "120": 1, "130": 0} {
		c, _ := f.count(t, "r"+seq)
		assert.Equal(t, want, c, "record %s", seq)
	}
}

// An order key of "" (all the records of a shard in order, as Process offers) keeps one mark
// per shard.
func TestApplyEmptyOrderKey(t *testing.T) {
	f := newFixture(t, dynamosink.WithOrderKey(func(*kinesub.Message) string { return "" }))
	ctx := context.Background()
	require.NoError(t, f.sink.ApplyMark(ctx, rec("", shard0, "100", 0, holdA), f.add("a", "100")))
	require.NoError(t, f.sink.ApplyMark(ctx, rec("", shard1, "50", 0, holdA), f.add("a", "50")))
	require.ErrorIs(t, f.sink.ApplyMark(ctx, rec("", shard0, "100", 0, holdA), f.add("a", "100")), dynamosink.ErrReplay)
	mark, ok, err := f.sink.Read(ctx, shard1, "")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "50", mark.Sequence)
}

// Transactions DynamoDB refuses as invalid are permanent, and the handler says so: none is
// an error worth another try.
func TestApplyPoisonIsPermanent(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	big := func(id string, size int) types.TransactWriteItem {
		return types.TransactWriteItem{Put: &types.Put{TableName: aws.String(f.effects), Item: map[string]types.AttributeValue{
			"id": &types.AttributeValueMemberS{Value: id}, "v": &types.AttributeValueMemberS{Value: strings.Repeat("b", size)}}}}
	}
	many := make([]types.TransactWriteItem, 11) // 11 × 390 KB: over 4 MB
	for i := range many {
		many[i] = big("m"+strconv.Itoa(i), 390_000)
	}
	cases := []struct {
		name  string
		items []types.TransactWriteItem
	}{
		{"an item of the mark table", []types.TransactWriteItem{{Put: &types.Put{TableName: aws.String(f.marks),
			Item: map[string]types.AttributeValue{"key": &types.AttributeValueMemberS{Value: "other"}}}}}},
		{"one item twice", []types.TransactWriteItem{f.add("x", "1"), f.add("x", "2")}},
		{"an item over 400 KB", []types.TransactWriteItem{big("y", 500_000)}},
		{"a transaction over 4 MB", many},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rec("k", shard0, strconv.Itoa(100+i), 0, holdA)
			err := f.sink.ApplyMark(ctx, r, c.items...)
			require.ErrorIs(t, err, dynamosink.ErrInvalidRecord)
			assert.True(t, dynamosink.Permanent(err))
		})
	}
	_, ok, err := f.sink.Read(ctx, shard0, "k")
	require.NoError(t, err)
	assert.False(t, ok, "nothing applied")
}

// A second Apply for one record (its other table written in a second call), and a second Sink
// on the table without a prefix of its own, are refused in words, not answered as replays.
func TestApplySecondApplyRefused(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	r := rec("k", shard0, "100", 0, holdA)
	require.NoError(t, f.sink.ApplyMark(ctx, r, f.add("a", "100")))
	err := f.sink.ApplyMark(ctx, r, f.add("b", "100"))
	require.ErrorIs(t, err, dynamosink.ErrOtherWrites)
	require.NotErrorIs(t, err, dynamosink.ErrReplay)
	require.True(t, dynamosink.Permanent(err))
	require.ErrorIs(t, f.sink.ApplyMark(ctx, r, f.add("a", "again")), dynamosink.ErrReplay, "the same writes: a replay")

	other, err := dynamosink.New(f.db, f.marks)
	require.NoError(t, err)
	r2 := rec("k", shard0, "110", 0, holdA)
	require.NoError(t, f.sink.ApplyMark(ctx, r2, f.add("a", "110")))
	require.ErrorIs(t, other.ApplyMark(ctx, r2, f.add("audit", "110")), dynamosink.ErrOtherWrites)
	c, _ := f.count(t, "b")
	assert.Zero(t, c)
}

// WithMarkTTL writes the expiry with every mark, and with a skip.
func TestMarkTTLWritten(t *testing.T) {
	f := newFixture(t, dynamosink.WithMarkTTL(48*time.Hour))
	ctx := context.Background()
	expires := func(k string) time.Time {
		out, err := f.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(f.marks), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"key": &types.AttributeValueMemberS{Value: k}}})
		require.NoError(t, err)
		v, ok := out.Item[dynamosink.TTLAttribute].(*types.AttributeValueMemberN)
		require.True(t, ok, "item %q has no %s: %v", k, dynamosink.TTLAttribute, out.Item)
		s, err := strconv.ParseInt(v.Value, 10, 64)
		require.NoError(t, err)
		return time.Unix(s, 0)
	}
	within := func(at time.Time) {
		t.Helper()
		want := time.Now().Add(48 * time.Hour)
		assert.WithinDuration(t, want, at, time.Minute)
	}
	require.NoError(t, f.sink.ApplyMark(ctx, rec("k", shard0, "100", 0, holdA), f.add("a", "1")))
	within(expires("|" + shard0 + "|k"))
	require.NoError(t, f.sink.SkipMark(ctx, rec("s", shard0, "100", 0, holdA)))
	within(expires("|" + shard0 + "|s"))
	require.NoError(t, f.sink.ApplyMark(ctx, rec("s", shard0, "110", 0, holdA)))
	require.NoError(t, f.sink.RedriveMark(ctx, rec("s", shard0, "100", 0, holdA)))
	within(expires("|" + shard0 + "|s"))
}

// Handler acks what was applied, now or before, and returns the rest, permanent or not.
func TestHandlerAnswers(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var items []types.TransactWriteItem
	h := f.sink.Handler(func(context.Context, *kinesub.Message) ([]types.TransactWriteItem, error) { return items, nil })
	// A Message without a shard cannot be applied: the handler returns the permanent error.
	err := h(ctx, &kinesub.Message{})
	require.ErrorIs(t, err, dynamosink.ErrInvalidRecord)
	require.True(t, dynamosink.Permanent(err))
	boom := fmt.Errorf("effects failed")
	h = f.sink.Handler(func(context.Context, *kinesub.Message) ([]types.TransactWriteItem, error) { return nil, boom })
	require.ErrorIs(t, h(ctx, &kinesub.Message{}), boom)
}
