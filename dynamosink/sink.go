package dynamosink

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/gostream/kinesub"
)

// Client is the part of *dynamodb.Client a Sink uses.
type Client interface {
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// Sink applies the DynamoDB writes of records, each record's writes at most once, in order per
// key. It is safe for concurrent use.
type Sink struct {
	client Client
	table  string
	cfg    config
}

var tableName = regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,255}$`)

// New returns a Sink keeping its marks in table (see CreateTable for its schema). It checks its
// arguments and options, and does no I/O: an invalid one gives an error wrapping
// ErrInvalidOption that names it and its allowed range.
func New(client Client, table string, opts ...Option) (*Sink, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidOption)
	}
	if !tableName.MatchString(table) {
		return nil, fmt.Errorf("%w: table name %q: 3 to 255 characters of a-z, A-Z, 0-9, '_', '-', '.'", ErrInvalidOption, table)
	}
	cfg := defaultConfig()
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: option %d is nil", ErrInvalidOption, i)
		}
		o(&cfg)
	}
	if err := errors.Join(cfg.errs...); err != nil {
		return nil, err
	}
	return &Sink{client: client, table: table, cfg: cfg}, nil
}

// Apply writes items, the effects of record m, in one transaction with m's mark: the mark of
// m's order key (WithOrderKey) becomes m's position in its shard and the holding m was read
// under (m.Tenure). The transaction is conditional on the key's mark being below m, and on
// the mark not having been written by a later holding of m's shard than m's:
//
//   - nil: m's effects and mark are written;
//   - ErrReplay: the mark is at or past m (m was applied before, or a later record of its
//     key was: then m arrived out of order). Nothing is written; ack m;
//   - an error wrapping ErrSuperseded (a *SupersededError): a later holder of m's shard
//     wrote the key's mark, so m's holder lost its lease. Nothing is written;
//   - an error wrapping ErrEffectCondition: a condition of one of items failed. Nothing is
//     written;
//   - any other error (a throttle, a transaction conflict, a timeout): nothing is known to be
//     written, and trying again is safe: a try whose first attempt did land is a replay.
//
// items must not include the mark table's item of m's key; each may carry its own condition.
// At most MaxItems of them; an invalid m or too many items give an error wrapping
// ErrInvalidRecord before any I/O.
func (s *Sink) Apply(ctx context.Context, m *kinesub.Message, items ...types.TransactWriteItem) error {
	if m == nil {
		return fmt.Errorf("%w: nil message", ErrInvalidRecord)
	}
	return s.ApplyMark(ctx, Mark{
		Key:         s.cfg.orderKey(m),
		Shard:       m.ShardID(),
		Sequence:    m.SequenceNumber(),
		SubSequence: m.SubSequenceNumber(),
		Tenure:      m.Tenure(),
	}, items...)
}

// ApplyMark is Apply for a record given by its mark rather than a Message (for records read
// by other means, and for tests).
func (s *Sink) ApplyMark(ctx context.Context, mark Mark, items ...types.TransactWriteItem) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context (pass context.Background())", ErrInvalidRecord)
	}
	if err := mark.check(); err != nil {
		return err
	}
	if len(items) > MaxItems {
		return fmt.Errorf("%w: %d items: at most %d with the mark in one transaction", ErrInvalidRecord, len(items), MaxItems)
	}
	k := s.cfg.prefix + mark.Key
	put := types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(s.table),
		Item:      mark.item(k),
		// Below the record, and not written by a later holding of the same shard.
		ConditionExpression: aws.String("attribute_not_exists(#pos) OR (#pos < :pos AND (#shard <> :shard OR #counter <= :counter))"),
		ExpressionAttributeNames: map[string]string{
			"#pos": attrPos, "#shard": attrShard, "#counter": attrCounter,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pos":     &types.AttributeValueMemberS{Value: position(mark.Sequence, mark.SubSequence)},
			":shard":   &types.AttributeValueMemberS{Value: mark.Shard},
			":counter": &types.AttributeValueMemberN{Value: fmt.Sprint(mark.Tenure.Counter)},
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}
	all := make([]types.TransactWriteItem, 0, len(items)+1)
	all = append(append(all, put), items...)
	_, err := s.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: all})
	if err == nil {
		return nil
	}
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return fmt.Errorf("dynamosink: key %q: %w", k, err)
	}
	r := tce.CancellationReasons
	if len(r) == 0 || code(r[0]) == "ConditionalCheckFailed" {
		var old map[string]types.AttributeValue
		if len(r) > 0 {
			old = r[0].Item
		}
		if refused := s.refused(ctx, k, mark, old); refused != nil {
			return refused
		}
	}
	for i := 1; i < len(r); i++ {
		if code(r[i]) == "ConditionalCheckFailed" {
			return fmt.Errorf("%w: item %d of key %q: %w", ErrEffectCondition, i-1, k, err)
		}
	}
	return fmt.Errorf("dynamosink: key %q: transaction cancelled: %w", k, err)
}

func code(r types.CancellationReason) string { return aws.ToString(r.Code) }

// refused says why the mark refused record mark, from the mark item the cancellation returned
// or, when it returned none, from the mark as it is now: ErrReplay, a *SupersededError, or
// nil when the mark (moved since) would take the record, or the reading failed.
func (s *Sink) refused(ctx context.Context, k string, mark Mark, old map[string]types.AttributeValue) error {
	if old == nil {
		out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(s.table), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{attrKey: &types.AttributeValueMemberS{Value: k}},
		})
		if err != nil || out.Item == nil {
			return nil
		}
		old = out.Item
	}
	cur, ok := markOf(mark.Key, old)
	if !ok {
		return fmt.Errorf("dynamosink: key %q: the mark table's item is not a mark (attributes %v)", k, keys(old))
	}
	if !below(cur, mark) {
		return ErrReplay
	}
	if cur.Shard == mark.Shard && cur.Tenure.Counter > mark.Tenure.Counter {
		return &SupersededError{Key: mark.Key, Shard: mark.Shard, Mark: cur.Tenure, Yours: mark.Tenure}
	}
	return nil
}

func keys(m map[string]types.AttributeValue) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Read returns the mark of key (without the WithKeyPrefix), read consistently; ok is false
// when no record of the key was applied.
func (s *Sink) Read(ctx context.Context, key string) (mark Mark, ok bool, err error) {
	if ctx == nil {
		return Mark{}, false, fmt.Errorf("%w: nil context (pass context.Background())", ErrInvalidRecord)
	}
	k := s.cfg.prefix + key
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{attrKey: &types.AttributeValueMemberS{Value: k}},
	})
	if err != nil {
		return Mark{}, false, fmt.Errorf("dynamosink: read mark of %q: %w", k, err)
	}
	if out.Item == nil {
		return Mark{}, false, nil
	}
	mark, ok = markOf(key, out.Item)
	if !ok {
		return Mark{}, false, fmt.Errorf("dynamosink: key %q: the mark table's item is not a mark (attributes %v)", k, keys(out.Item))
	}
	return mark, true, nil
}

// Handler returns a handler for kinesub.Subscriber.Process that applies each record's
// effects with Apply: effects returns the writes of a record (it may read tables, and must not
// write them itself). A replay returns nil, so that Process acks the record; other errors are
// returned, and Process tries the record again. On ErrSuperseded every try is refused, until
// this subscriber notices that its lease was taken and Process drops the shard's records. A
// handler that needs to know about replays calls Apply itself.
func (s *Sink) Handler(effects func(context.Context, *kinesub.Message) ([]types.TransactWriteItem, error)) func(context.Context, *kinesub.Message) error {
	return func(ctx context.Context, m *kinesub.Message) error {
		items, err := effects(ctx, m)
		if err != nil {
			return err
		}
		if err := s.Apply(ctx, m, items...); err != nil && !errors.Is(err, ErrReplay) {
			return err
		}
		return nil
	}
}
