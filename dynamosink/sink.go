package dynamosink

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/gostream/kinesub"
)

// Client is the part of *dynamodb.Client a Sink uses.
type Client interface {
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// Sink applies the DynamoDB writes of records, each record's writes at most once, in order per
// key within a shard (doc.go states the contract). It is safe for concurrent use.
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

// MarkOf returns the mark Apply writes for m: its order key (WithOrderKey), shard, sequence
// and sub-sequence numbers, holding (m.Tenure), and the Sink's WithStream, WithLeaseTable and
// WithEpoch. A dead-letter function keeps it with the record, to redrive it later
// (RedriveMark).
func (s *Sink) MarkOf(m *kinesub.Message) Mark {
	var epoch int64
	if s.cfg.epoch != nil {
		epoch = s.cfg.epoch(m)
	}
	return Mark{
		Key:         s.cfg.orderKey(m),
		Stream:      s.cfg.stream,
		Shard:       m.ShardID(),
		Sequence:    m.SequenceNumber(),
		SubSequence: m.SubSequenceNumber(),
		Tenure:      m.Tenure(),
		Leases:      s.cfg.leases,
		Epoch:       epoch,
	}
}

// Apply writes items, the effects of record m, in one transaction with m's mark (MarkOf): the
// mark of m's order key in m's shard becomes m. The transaction is conditional on that mark
// being below m (in m's epoch, then by position) and, with WithLeaseTable, on it not having
// been written under a later holding of m's shard. Its answers:
//
//   - nil: m's effects and mark were written;
//   - ErrReplay: m is at or below the mark and was not recorded as skipped: m was applied
//     before (see the contract in doc.go). Nothing was written; ack m;
//   - ErrOutOfOrder: m was recorded as not applied (Skip, DeadLetter) and a later record of
//     its key was applied since. Nothing was written; RedriveMark applies it, out of order;
//   - ErrOtherWrites: m is the record the mark was last written for, by an Apply of other
//     items (a second Apply for one record, or another Sink on the table without its own
//     WithKeyPrefix). Nothing was written;
//   - an error wrapping ErrSuperseded (a *SupersededError): a later holding of m's shard, or
//     a later epoch, wrote the mark. Nothing was written; the record is theirs;
//   - an error wrapping ErrEffectCondition: a condition of one of items failed. Nothing was
//     written;
//   - an error wrapping ErrInvalidRecord: m or items cannot be written, before any I/O or
//     as DynamoDB refused them (ValidationException). Nothing was written;
//   - any other error (a throttle, a TransactionConflict, a timeout): nothing is known to be
//     written, and trying again is safe: a try whose first attempt did land is a replay.
//
// Permanent tells the answers trying again will not change. items must not write the mark
// table; each may carry its own condition. At most MaxItems of them.
func (s *Sink) Apply(ctx context.Context, m *kinesub.Message, items ...types.TransactWriteItem) error {
	if m == nil {
		return fmt.Errorf("%w: nil message", ErrInvalidRecord)
	}
	return s.ApplyMark(ctx, s.MarkOf(m), items...)
}

// ApplyMark is Apply for a record given by its mark rather than a Message (for records read
// by other means, and for tests). The mark's Stream, Leases and Epoch are taken as given,
// not from the Sink's options.
func (s *Sink) ApplyMark(ctx context.Context, mark Mark, items ...types.TransactWriteItem) error {
	k, err := s.prepare(ctx, mark, items)
	if err != nil {
		return err
	}
	me := mark.pos()
	writes := fingerprint(items)
	names := map[string]string{
		"#pos": attrPos, "#shard": attrShard, "#seq": attrSeq, "#sub": attrSub, "#owner": attrOwner,
		"#counter": attrCounter, "#epoch": attrEpoch, "#writes": attrWrites, "#skipped": attrSkipped, "#leases": attrLeases,
	}
	values := map[string]types.AttributeValue{
		":pos":     &types.AttributeValueMemberS{Value: me},
		":shard":   &types.AttributeValueMemberS{Value: mark.Shard},
		":seq":     &types.AttributeValueMemberS{Value: mark.Sequence},
		":sub":     &types.AttributeValueMemberN{Value: strconv.Itoa(mark.SubSequence)},
		":owner":   &types.AttributeValueMemberS{Value: mark.Tenure.Owner},
		":counter": &types.AttributeValueMemberN{Value: strconv.FormatInt(mark.Tenure.Counter, 10)},
		":epoch":   &types.AttributeValueMemberN{Value: strconv.FormatInt(mark.Epoch, 10)},
		":writes":  &types.AttributeValueMemberS{Value: writes},
		":me":      &types.AttributeValueMemberSS{Value: []string{me}},
	}
	set := "SET #pos = :pos, #shard = :shard, #seq = :seq, #sub = :sub, #owner = :owner, #counter = :counter, #epoch = :epoch, #writes = :writes"
	remove := ""
	// Below the record; with a lease table named, not written by a later holding of the shard.
	cond := "attribute_not_exists(#pos) OR #pos < :pos"
	if mark.Leases != "" {
		set += ", #leases = :leases"
		values[":leases"] = &types.AttributeValueMemberS{Value: mark.Leases}
		cond = "attribute_not_exists(#pos) OR (#pos < :pos AND NOT (#leases = :leases AND #counter > :counter))"
	} else {
		remove = " REMOVE #leases"
	}
	set += s.expiry(names, values)
	put := types.TransactWriteItem{Update: &types.Update{
		TableName:                           aws.String(s.table),
		Key:                                 map[string]types.AttributeValue{attrKey: &types.AttributeValueMemberS{Value: k}},
		UpdateExpression:                    aws.String(set + remove + " DELETE #skipped :me"),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}
	return s.transact(ctx, k, put, items, func(st stored) error { return s.refusal(k, mark, writes, st) })
}

// prepare checks a record and its items before any I/O and returns its mark's table key.
func (s *Sink) prepare(ctx context.Context, mark Mark, items []types.TransactWriteItem) (string, error) {
	if ctx == nil {
		return "", fmt.Errorf("%w: nil context (pass context.Background())", ErrInvalidRecord)
	}
	if err := mark.check(); err != nil {
		return "", err
	}
	if len(items) > MaxItems {
		return "", fmt.Errorf("%w: %d items: at most %d with the mark in one transaction", ErrInvalidRecord, len(items), MaxItems)
	}
	for i, it := range items {
		var table *string
		switch {
		case it.Put != nil:
			table = it.Put.TableName
		case it.Update != nil:
			table = it.Update.TableName
		case it.Delete != nil:
			table = it.Delete.TableName
		case it.ConditionCheck != nil:
			table = it.ConditionCheck.TableName
		default:
			return "", fmt.Errorf("%w: item %d has no Put, Update, Delete or ConditionCheck", ErrInvalidRecord, i)
		}
		if aws.ToString(table) == s.table {
			return "", fmt.Errorf("%w: item %d writes the mark table %s: effects go to tables of their own", ErrInvalidRecord, i, s.table)
		}
	}
	return mark.tableKey(s.cfg.prefix)
}

// expiry adds WithMarkTTL's attribute to an update's names and values and returns its SET
// clause (", #exp = :exp"), or "" without a TTL.
func (s *Sink) expiry(names map[string]string, values map[string]types.AttributeValue) string {
	if s.cfg.ttl == 0 {
		return ""
	}
	names["#exp"] = TTLAttribute
	values[":exp"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(s.cfg.now().Add(s.cfg.ttl).Unix(), 10)}
	return ", #exp = :exp"
}

// transact sends the mark's write and items in one transaction and classifies its answer;
// refused says why the mark's condition failed, given the mark item (nil: try again).
func (s *Sink) transact(ctx context.Context, k string, mark types.TransactWriteItem, items []types.TransactWriteItem, refused func(stored) error) error {
	all := make([]types.TransactWriteItem, 0, len(items)+1)
	all = append(append(all, mark), items...)
	_, err := s.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: all})
	if err == nil {
		return nil
	}
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return classifyOther(k, err)
	}
	r := tce.CancellationReasons
	for i := range r {
		if code(r[i]) == "ValidationError" {
			what := fmt.Sprintf("item %d", i-1)
			if i == 0 {
				what = "the mark"
			}
			return fmt.Errorf("%w: key %q: %s refused: %w", ErrInvalidRecord, k, what, err)
		}
	}
	if len(r) == 0 || code(r[0]) == "ConditionalCheckFailed" {
		var old map[string]types.AttributeValue
		if len(r) > 0 {
			old = r[0].Item
		}
		if old == nil {
			if it, err := s.get(ctx, k); err == nil {
				old = it
				if old == nil {
					old = map[string]types.AttributeValue{} // no mark: nothing applied or skipped
				}
			} // unread: try again
		}
		if old != nil {
			st, ok := storedOf("", old)
			if !ok {
				return notAMark(k, old)
			}
			if why := refused(st); why != nil {
				return why
			}
		}
	}
	for i := 1; i < len(r); i++ {
		if code(r[i]) == "ConditionalCheckFailed" {
			return fmt.Errorf("%w: item %d of key %q: %w", ErrEffectCondition, i-1, k, err)
		}
	}
	return fmt.Errorf("dynamosink: key %q: transaction cancelled: %w", k, err)
}

// refusal says why a key's mark st refused record mark (which would write writes):
// ErrReplay, ErrOutOfOrder, ErrOtherWrites, a *SupersededError, or nil when the mark (moved
// since) would take the record.
func (s *Sink) refusal(k string, mark Mark, writes string, st stored) error {
	me := mark.pos()
	switch {
	case !st.applied:
		return nil
	case st.pos >= me:
		switch {
		case st.Epoch > mark.Epoch:
			return &SupersededError{Key: mark.Key, Shard: mark.Shard, Epoch: true, Mark: st.Tenure, Yours: mark.Tenure, MarkEpoch: st.Epoch, YoursEpoch: mark.Epoch}
		case st.skipped[me]:
			return fmt.Errorf("%w: key %q, record %s/%d; the mark is at %s/%d", ErrOutOfOrder, k, mark.Sequence, mark.SubSequence, st.Sequence, st.SubSequence)
		case st.pos == me && st.writes != "" && st.writes != writes:
			return fmt.Errorf("%w: key %q, record %s/%d: one Apply per record, and a WithKeyPrefix of its own for each Sink of a table", ErrOtherWrites, k, mark.Sequence, mark.SubSequence)
		}
		return ErrReplay
	case mark.Leases != "" && st.Leases == mark.Leases && st.Tenure.Counter > mark.Tenure.Counter:
		return &SupersededError{Key: mark.Key, Shard: mark.Shard, Mark: st.Tenure, Yours: mark.Tenure, MarkEpoch: st.Epoch, YoursEpoch: mark.Epoch}
	}
	return nil
}

// classifyOther classifies an error that is not a cancellation: DynamoDB's refusal of an
// invalid request is permanent; anything else is worth another try.
func classifyOther(k string, err error) error {
	var api smithy.APIError
	if errors.As(err, &api) && api.ErrorCode() == "ValidationException" {
		return fmt.Errorf("%w: key %q: %w", ErrInvalidRecord, k, err)
	}
	return fmt.Errorf("dynamosink: key %q: %w", k, err)
}

func code(r types.CancellationReason) string { return aws.ToString(r.Code) }

func notAMark(k string, it map[string]types.AttributeValue) error {
	return fmt.Errorf("%w: key %q: the mark table's item is not a mark (attributes %v): the table holds other items", ErrInvalidRecord, k, keys(it))
}

func (s *Sink) get(ctx context.Context, k string) (map[string]types.AttributeValue, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{attrKey: &types.AttributeValueMemberS{Value: k}},
	})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}

func keys(m map[string]types.AttributeValue) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Read returns the mark of key (without the WithKeyPrefix) in shard of the Sink's stream, read
// consistently: the last record of the key applied from the shard. ok is false when none was.
func (s *Sink) Read(ctx context.Context, shard, key string) (mark Mark, ok bool, err error) {
	if ctx == nil {
		return Mark{}, false, fmt.Errorf("%w: nil context (pass context.Background())", ErrInvalidRecord)
	}
	k, err := Mark{Key: key, Stream: s.cfg.stream, Shard: shard}.tableKey(s.cfg.prefix)
	if err != nil {
		return Mark{}, false, err
	}
	it, err := s.get(ctx, k)
	if err != nil {
		return Mark{}, false, fmt.Errorf("dynamosink: read mark of %q: %w", k, err)
	}
	if it == nil {
		return Mark{}, false, nil
	}
	st, ok := storedOf(key, it)
	if !ok {
		return Mark{}, false, notAMark(k, it)
	}
	st.Stream = s.cfg.stream
	return st.Mark, st.applied, nil
}

// Handler returns a handler for kinesub.Subscriber.Process that applies each record's
// effects with Apply. effects returns a record's writes; it must not write them itself. It may
// read tables, but what it read may change before the transaction lands: a condition on the
// items (or a ConditionCheck) makes the writes depend on it. The tables and keys it returns
// must be the same on every delivery of a record (ErrOtherWrites otherwise).
//
// The handler returns nil, so that Process acks the record, when the record's writes were
// made, now (nil) or before (ErrReplay); an error from effects as it is; and Apply's other
// errors as they are, for Process to try the record again. Among those, the Permanent ones
// (ErrInvalidRecord, ErrEffectCondition, ErrOutOfOrder, ErrOtherWrites, a later epoch) give the
// same answer on every try: give Process WithMaxAttempts and WithDeadLetter(sink.DeadLetter(…))
// so that they reach a dead letter; under WithMaxAttempts(0) Process tries them until the
// subscription ends. On ErrSuperseded by a later holding every try is refused until this
// subscriber notices that its lease was taken and Process drops the shard's records.
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
