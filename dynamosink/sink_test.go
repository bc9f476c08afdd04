package dynamosink

import (
	"context"
	"errors"
	"strings"
	"testing"

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
		{"empty key", mod(func(m *Mark) { m.Key = "" }), 0, "empty order key"},
		{"empty shard", mod(func(m *Mark) { m.Shard = "" }), 0, "empty shard id"},
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
	require.ErrorIs(t, s.Apply(context.Background(), nil), ErrInvalidRecord)
	// The zero Message has no shard and no holding: refused, not written with an empty mark.
	require.ErrorIs(t, s.Apply(context.Background(), &kinesub.Message{}), ErrInvalidRecord)
}

// Positions compare as strings in the order of the records: sequence numbers as numbers
// (whatever their length), then sub-sequence numbers.
func TestPositionOrder(t *testing.T) {
	ordered := []struct {
		seq string
		sub int
	}{
		{"9", 0}, {"9", 1}, {"9", 10}, {"10", 0}, {"99", 2147483647}, {"100", 0},
		{"49590338271490256608559692538361571095921575989136588898", 0},
		{"49590338271490256608559692538361571095921575989136588898", 3},
		{"49590338271490256608559692540925702759324208523137515618", 0},
	}
	for i := 1; i < len(ordered); i++ {
		a, b := ordered[i-1], ordered[i]
		assert.Less(t, position(a.seq, a.sub), position(b.seq, b.sub), "%v before %v", a, b)
	}
}

func TestMarkItemRoundTrip(t *testing.T) {
	m := Mark{Key: "k", Shard: "shardId-000000000001", Sequence: "4959", SubSequence: 7, Tenure: lease.Tenure{Owner: "w#0a", Counter: 12}}
	got, ok := markOf("k", m.item("prefix/k"))
	require.True(t, ok)
	assert.Equal(t, m, got)
	_, ok = markOf("k", map[string]types.AttributeValue{attrKey: &types.AttributeValueMemberS{Value: "k"}})
	assert.False(t, ok, "an item without a mark's attributes")
}
