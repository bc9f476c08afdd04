package dynamosink

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// cannedClient answers TransactWriteItems with err and GetItem with item.
type cannedClient struct {
	err   error
	item  map[string]types.AttributeValue
	reads int
}

func (c *cannedClient) TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return &dynamodb.TransactWriteItemsOutput{}, c.err
}

func (c *cannedClient) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.reads++
	return &dynamodb.GetItemOutput{Item: c.item}, nil
}

func (c *cannedClient) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return &dynamodb.UpdateItemOutput{}, c.err
}

func cancelled(reasons ...types.CancellationReason) error {
	return &types.TransactionCanceledException{Message: aws.String("Transaction cancelled"), CancellationReasons: reasons}
}

func reason(code string, item map[string]types.AttributeValue) types.CancellationReason {
	return types.CancellationReason{Code: aws.String(code), Item: item}
}

// Apply tells a replay, a skipped record, another Apply's record, a superseded holding or
// epoch, a failed effect condition, an invalid request and a retryable cancellation apart from
// the cancellation reasons, reading the mark when the reason for it carries no item.
func TestApplyClassifiesCancellations(t *testing.T) {
	rec := Mark{Key: "k", Shard: "shardId-000000000000", Sequence: "200", Tenure: lease.Tenure{Owner: "a", Counter: 3}, Leases: "L"}
	none := fingerprint(nil) // what rec writes
	type mod func(*Mark)
	at := func(seq string, counter int64, mods ...mod) map[string]types.AttributeValue {
		m := rec
		m.Sequence, m.Tenure.Counter = seq, counter
		for _, f := range mods {
			f(&m)
		}
		return m.item("k", none)
	}
	leases := func(l string) mod { return func(m *Mark) { m.Leases = l } }
	epoch := func(e int64) mod { return func(m *Mark) { m.Epoch = e } }
	with := func(it map[string]types.AttributeValue, attr string, v types.AttributeValue) map[string]types.AttributeValue {
		it[attr] = v
		return it
	}
	throttled := errors.New("throttled")
	invalid := &smithy.GenericAPIError{Code: "ValidationException", Message: "Item size has exceeded the maximum allowed size"}
	cases := []struct {
		name      string
		err       error
		stored    map[string]types.AttributeValue // what GetItem returns
		want      error
		wantReads int
		retryable bool
	}{
		{"applied", nil, nil, nil, 0, false},
		{"replay, item returned", cancelled(reason("ConditionalCheckFailed", at("200", 3)), reason("None", nil)), nil, ErrReplay, 0, false},
		{"replay of an older record", cancelled(reason("ConditionalCheckFailed", at("300", 3))), nil, ErrReplay, 0, false},
		{"replay, item read", cancelled(reason("ConditionalCheckFailed", nil)), at("200", 9), ErrReplay, 1, false},
		{"superseded, item returned", cancelled(reason("ConditionalCheckFailed", at("150", 4))), nil, ErrSuperseded, 0, false},
		{"superseded, item read", cancelled(reason("ConditionalCheckFailed", nil)), at("150", 4), ErrSuperseded, 1, false},
		{"holding of another lease table", cancelled(reason("ConditionalCheckFailed", at("150", 4, leases("M")))), nil, nil, 0, true},
		{"holding of no lease table", cancelled(reason("ConditionalCheckFailed", at("150", 4, leases("")))), nil, nil, 0, true},
		{"later epoch", cancelled(reason("ConditionalCheckFailed", at("100", 1, epoch(1)))), nil, ErrSuperseded, 0, false},
		{"skipped, passed", cancelled(reason("ConditionalCheckFailed", with(at("300", 3), attrSkipped, &types.AttributeValueMemberSS{Value: []string{rec.pos()}}))), nil, ErrOutOfOrder, 0, false},
		{"applied with other writes", cancelled(reason("ConditionalCheckFailed", with(at("200", 3), attrWrites, &types.AttributeValueMemberS{Value: "other"}))), nil, ErrOtherWrites, 0, false},
		{"an older record applied with other writes", cancelled(reason("ConditionalCheckFailed", with(at("300", 3), attrWrites, &types.AttributeValueMemberS{Value: "other"}))), nil, ErrReplay, 0, false},
		{"no reasons, mark read", cancelled(), at("200", 3), ErrReplay, 1, false},
		{"mark moved on since", cancelled(reason("ConditionalCheckFailed", nil)), at("100", 3), nil, 1, true},
		{"no mark", cancelled(reason("ConditionalCheckFailed", nil)), nil, nil, 1, true},
		{"effect condition", cancelled(reason("None", nil), reason("ConditionalCheckFailed", nil)), nil, ErrEffectCondition, 0, false},
		{"item refused", cancelled(reason("None", nil), reason("ValidationError", nil)), nil, ErrInvalidRecord, 0, false},
		{"request refused", invalid, nil, ErrInvalidRecord, 0, false},
		{"conflict", cancelled(reason("None", nil), reason("TransactionConflict", nil)), nil, nil, 0, true},
		{"throttle", cancelled(reason("ThrottlingError", nil), reason("None", nil)), nil, nil, 0, true},
		{"not a cancellation", throttled, nil, throttled, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			client := &cannedClient{err: c.err, item: c.stored}
			s, err := New(client, "marks")
			require.NoError(t, err)
			err = s.ApplyMark(context.Background(), rec)
			assert.Equal(t, c.wantReads, client.reads, "mark reads")
			if c.err == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			if c.want != nil {
				require.ErrorIs(t, err, c.want)
			}
			if c.retryable {
				assert.False(t, Permanent(err), "permanent: %v", err)
				for _, final := range []error{ErrReplay, ErrSuperseded, ErrEffectCondition, ErrOutOfOrder, ErrOtherWrites, ErrInvalidRecord} {
					require.NotErrorIs(t, err, final)
				}
				if errors.Is(c.err, throttled) {
					return
				}
				var tce *types.TransactionCanceledException
				require.ErrorAs(t, err, &tce, "the SDK's error stays reachable")
				return
			}
			wantPermanent := !errors.Is(c.want, ErrReplay) && !(errors.Is(c.want, ErrSuperseded) && !strings.Contains(c.name, "epoch"))
			assert.Equal(t, wantPermanent, Permanent(err), "Permanent(%v)", err)
		})
	}
}

func TestApplyRefusesForeignMarkItem(t *testing.T) {
	client := &cannedClient{err: cancelled(reason("ConditionalCheckFailed", map[string]types.AttributeValue{
		"key": &types.AttributeValueMemberS{Value: "k"}, "pos": &types.AttributeValueMemberS{Value: "zzz"},
	}))}
	s, err := New(client, "marks")
	require.NoError(t, err)
	err = s.ApplyMark(context.Background(), Mark{Key: "k", Shard: "s", Sequence: "1", Tenure: lease.Tenure{Owner: "a", Counter: 1}})
	require.ErrorIs(t, err, ErrInvalidRecord)
	assert.Contains(t, err.Error(), "not a mark")
}
