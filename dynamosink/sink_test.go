package dynamosink

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/lease"
)

// noClient fails every call: the tests here must not reach it.
type noClient struct{ t *testing.T }

func (c noClient) TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.t.Error("TransactWriteItems called")
	return nil, errors.New("no I/O expected")
}

func (c noClient) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.t.Error("GetItem called")
	return nil, errors.New("no I/O expected")
}

func (c noClient) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.t.Error("UpdateItem called")
	return nil, errors.New("no I/O expected")
}

// item is the mark item m's Apply writes, with writes and the positions skipped.
func (m Mark) item(k, writes string, skipped ...string) map[string]types.AttributeValue {
	it := map[string]types.AttributeValue{
		attrKey:     &types.AttributeValueMemberS{Value: k},
		attrPos:     &types.AttributeValueMemberS{Value: m.pos()},
		attrShard:   &types.AttributeValueMemberS{Value: m.Shard},
		attrSeq:     &types.AttributeValueMemberS{Value: m.Sequence},
		attrSub:     &types.AttributeValueMemberN{Value: strconv.Itoa(m.SubSequence)},
		attrOwner:   &types.AttributeValueMemberS{Value: m.Tenure.Owner},
		attrCounter: &types.AttributeValueMemberN{Value: strconv.FormatInt(m.Tenure.Counter, 10)},
		attrEpoch:   &types.AttributeValueMemberN{Value: strconv.FormatInt(m.Epoch, 10)},
		attrWrites:  &types.AttributeValueMemberS{Value: writes},
	}
	if m.Leases != "" {
		it[attrLeases] = &types.AttributeValueMemberS{Value: m.Leases}
	}
	if len(skipped) > 0 {
		it[attrSkipped] = &types.AttributeValueMemberSS{Value: skipped}
	}
	return it
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	cases := []struct {
		name   string
		client Client
		table  string
		opts   []Option
		want   string // in the error
	}{
		{"nil client", nil, "marks", nil, "nil client"},
		{"short table", noClient{t}, "ab", nil, `table name "ab"`},
		{"bad table", noClient{t}, "a/b/c", nil, `table name "a/b/c"`},
		{"nil option", noClient{t}, "marks", []Option{nil}, "option 0 is nil"},
		{"nil order key", noClient{t}, "marks", []Option{WithOrderKey(nil)}, "WithOrderKey(nil): must be a function"},
		{"long prefix", noClient{t}, "marks", []Option{WithKeyPrefix(strings.Repeat("p", MaxKeyPrefix+1))}, "WithKeyPrefix(1025 bytes): at most 1024 bytes"},
		{"stream with |", noClient{t}, "marks", []Option{WithStream("a|b")}, "WithStream(a|b)"},
		{"long lease table", noClient{t}, "marks", []Option{WithLeaseTable(strings.Repeat("l", 257))}, "WithLeaseTable(257 bytes)"},
		{"nil epoch", noClient{t}, "marks", []Option{WithEpoch(nil)}, "WithEpoch(nil): must be a function"},
		{"short TTL", noClient{t}, "marks", []Option{WithMarkTTL(time.Second)}, "WithMarkTTL(1s)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := New(c.client, c.table, c.opts...)
			require.ErrorIs(t, err, ErrInvalidOption)
			assert.Contains(t, err.Error(), c.want)
			assert.Nil(t, s)
		})
	}
	s, err := New(noClient{t}, "marks", WithKeyPrefix(strings.Repeat("p", MaxKeyPrefix)), WithOrderKey((*kinesub.Message).ShardID))
	require.NoError(t, err)
	require.NotNil(t, s)
}

func TestApplyRejectsInvalidRecordsBeforeIO(t *testing.T) {
	s, err := New(noClient{t}, "marks")
	require.NoError(t, err)
	good := Mark{Key: "k", Shard: "shardId-000000000000", Sequence: "495", Tenure: lease.Tenure{Owner: "a#1", Counter: 1}}
	mod := func(f func(*Mark)) Mark { m := good; f(&m); return m }
	cases := []struct {
		name string
		mark Mark
		n    int
		want string
	}{
		{"empty shard", mod(func(m *Mark) { m.Shard = "" }), 0, "shard id"},
		{"shard with |", mod(func(m *Mark) { m.Shard = "a|b" }), 0, "shard id"},
		{"stream with |", mod(func(m *Mark) { m.Stream = "a|b" }), 0, "stream"},
		{"negative epoch", mod(func(m *Mark) { m.Epoch = -1 }), 0, "epoch -1"},
		{"key too long", mod(func(m *Mark) { m.Key = strings.Repeat("k", 2030) }), 0, "mark key of 2052 bytes"},
		{"empty sequence", mod(func(m *Mark) { m.Sequence = "" }), 0, "sequence number"},
		{"leading zero", mod(func(m *Mark) { m.Sequence = "0495" }), 0, "leading zero"},
		{"not digits", mod(func(m *Mark) { m.Sequence = "49x" }), 0, "decimal digits"},
		{"long sequence", mod(func(m *Mark) { m.Sequence = "1" + strings.Repeat("0", maxSequence) }), 0, "sequence number"},
		{"negative sub-sequence", mod(func(m *Mark) { m.SubSequence = -1 }), 0, "sub-sequence -1"},
		{"no holding", mod(func(m *Mark) { m.Tenure = lease.Tenure{} }), 0, "no shard holding"},
		{"too many items", good, MaxItems + 1, "100 items"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := s.ApplyMark(context.Background(), c.mark, make([]types.TransactWriteItem, c.n)...)
			require.ErrorIs(t, err, ErrInvalidRecord)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	for i, it := range []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String("marks")}},
		{Update: &types.Update{TableName: aws.String("marks")}},
		{Delete: &types.Delete{TableName: aws.String("marks")}},
		{ConditionCheck: &types.ConditionCheck{TableName: aws.String("marks")}},
		{},
	} {
		err := s.ApplyMark(context.Background(), good, it)
		require.ErrorIs(t, err, ErrInvalidRecord, "item %d", i)
		assert.True(t, Permanent(err))
	}
	require.ErrorIs(t, s.Apply(context.Background(), nil), ErrInvalidRecord)
	// The zero Message has no shard and no holding: refused, not written with an empty mark.
	require.ErrorIs(t, s.Apply(context.Background(), &kinesub.Message{}), ErrInvalidRecord)
}

// Positions compare as strings in the order of the records: by epoch, then sequence numbers
// as numbers (whatever their length), then sub-sequence numbers.
func TestPositionOrder(t *testing.T) {
	ordered := []Mark{
		{Sequence: "9"}, {Sequence: "9", SubSequence: 1}, {Sequence: "9", SubSequence: 10}, {Sequence: "10"},
		{Sequence: "99", SubSequence: 2147483647}, {Sequence: "100"},
		{Sequence: "49590338271490256608559692538361571095921575989136588898"},
		{Sequence: "49590338271490256608559692538361571095921575989136588898", SubSequence: 3},
		{Sequence: "49590338271490256608559692540925702759324208523137515618"},
		{Sequence: "1", Epoch: 1}, {Sequence: "2", Epoch: 1}, {Sequence: "1", Epoch: 10}, {Sequence: "1", Epoch: MaxEpoch},
	}
	for i := 1; i < len(ordered); i++ {
		a, b := ordered[i-1], ordered[i]
		assert.Less(t, a.pos(), b.pos(), "%+v before %+v", a, b)
	}
}

// A mark's key names one stream, shard and order key: none of them can run into another.
func TestTableKeysApart(t *testing.T) {
	seen := map[string]Mark{}
	for _, m := range []Mark{
		{Stream: "", Shard: "s1", Key: "k"}, {Stream: "a", Shard: "s1", Key: "k"}, {Stream: "", Shard: "s1", Key: "|k"},
		{Stream: "", Shard: "s1k", Key: ""}, {Stream: "s1", Shard: "k", Key: ""}, {Stream: "", Shard: "s2", Key: "k"},
		{Stream: "", Shard: "s1", Key: ""},
	} {
		k, err := m.tableKey("p/")
		require.NoError(t, err)
		prev, dup := seen[k]
		require.False(t, dup, "%+v and %+v share %q", prev, m, k)
		seen[k] = m
	}
}

func TestMarkItemRoundTrip(t *testing.T) {
	m := Mark{Key: "k", Shard: "shardId-000000000001", Sequence: "4959", SubSequence: 7, Tenure: lease.Tenure{Owner: "w#0a", Counter: 12}, Leases: "leases", Epoch: 3}
	got, ok := storedOf("k", m.item("prefix/k", "fp", "x"))
	require.True(t, ok)
	assert.Equal(t, m, got.Mark)
	assert.True(t, got.applied)
	assert.Equal(t, "fp", got.writes)
	assert.Equal(t, map[string]bool{"x": true}, got.skipped)
	got, ok = storedOf("k", map[string]types.AttributeValue{attrKey: &types.AttributeValueMemberS{Value: "k"}})
	assert.True(t, ok, "an item of a key with nothing applied")
	assert.False(t, got.applied)
	_, ok = storedOf("k", map[string]types.AttributeValue{attrPos: &types.AttributeValueMemberS{Value: "k"}})
	assert.False(t, ok, "an item without a mark's attributes")
}

// The fingerprint of a record's writes names their tables and keys, not their values or order.
func TestFingerprint(t *testing.T) {
	upd := func(table, id, v string) types.TransactWriteItem {
		return types.TransactWriteItem{Update: &types.Update{TableName: aws.String(table),
			Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}},
			ExpressionAttributeValues: map[string]types.AttributeValue{":v": &types.AttributeValueMemberS{Value: v}}}}
	}
	a, b := upd("t", "1", "x"), upd("u", "1", "x")
	assert.Equal(t, fingerprint([]types.TransactWriteItem{a, b}), fingerprint([]types.TransactWriteItem{b, upd("t", "1", "other value")}))
	assert.NotEqual(t, fingerprint([]types.TransactWriteItem{a}), fingerprint([]types.TransactWriteItem{b}), "another table")
	assert.NotEqual(t, fingerprint([]types.TransactWriteItem{a}), fingerprint([]types.TransactWriteItem{upd("t", "2", "x")}), "another key")
	assert.NotEqual(t, fingerprint([]types.TransactWriteItem{a}), fingerprint([]types.TransactWriteItem{a, b}), "another item")
}

// DeadLetter passes on, with both errors, a record it cannot record as skipped for good.
func TestDeadLetterPassesOnUnskippable(t *testing.T) {
	s, err := New(noClient{t}, "marks")
	require.NoError(t, err)
	cause := errors.New("handler failed")
	var got error
	dl := s.DeadLetter(func(_ context.Context, _ *kinesub.Message, err error) error { got = err; return nil })
	require.NoError(t, dl(context.Background(), &kinesub.Message{}, cause))
	require.ErrorIs(t, got, cause)
	require.ErrorIs(t, got, ErrInvalidRecord)
	require.NoError(t, s.DeadLetter(nil)(context.Background(), &kinesub.Message{}, cause), "a nil next")
}
