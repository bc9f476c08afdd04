package dynamosink

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/gostream/kinesub"
)

// Records a Sink does not apply in order: skipped ones (a dead letter), and their redrive.

// RedriveMark applies a record recorded as not applied (Skip, DeadLetter) after later records
// of its key were: out of its key's order, on purpose. It writes items with the record taken
// off its key's skipped records, the mark left where it is, and no holding compared: a second
// RedriveMark of the record is a replay. A record no later record passed is applied as
// ApplyMark applies it, in order. Its answers are Apply's; a record of an earlier epoch than
// its key's mark is superseded (redrive dead letters before raising the epoch).
func (s *Sink) RedriveMark(ctx context.Context, mark Mark, items ...types.TransactWriteItem) error {
	k, err := s.prepare(ctx, mark, items)
	if err != nil {
		return err
	}
	me := mark.pos()
	names := map[string]string{"#pos": attrPos, "#skipped": attrSkipped, "#epoch": attrEpoch}
	values := map[string]types.AttributeValue{
		":pos":   &types.AttributeValueMemberS{Value: me},
		":me":    &types.AttributeValueMemberSS{Value: []string{me}},
		":epoch": &types.AttributeValueMemberN{Value: strconv.FormatInt(mark.Epoch, 10)},
	}
	update := "DELETE #skipped :me"
	if exp := s.expiry(names, values); exp != "" {
		update = "SET " + exp[2:] + " " + update
	}
	redrive := types.TransactWriteItem{Update: &types.Update{
		TableName:                           aws.String(s.table),
		Key:                                 map[string]types.AttributeValue{attrKey: &types.AttributeValueMemberS{Value: k}},
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String("contains(#skipped, :pos) AND #pos > :pos AND #epoch = :epoch"),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}
	passed := false
	err = s.transact(ctx, k, redrive, items, func(st stored) error {
		if !st.applied || st.pos < me {
			passed = true // nothing later was applied: apply it in order
			return nil
		}
		if st.skipped[me] && st.Epoch == mark.Epoch {
			return nil // the mark moved since: try again
		}
		return s.refusal(k, mark, fingerprint(items), st)
	})
	if passed {
		return s.ApplyMark(ctx, mark, items...)
	}
	return err
}

// Redrive is RedriveMark for a Message.
func (s *Sink) Redrive(ctx context.Context, m *kinesub.Message, items ...types.TransactWriteItem) error {
	if m == nil {
		return fmt.Errorf("%w: nil message", ErrInvalidRecord)
	}
	return s.RedriveMark(ctx, s.MarkOf(m), items...)
}

// SkipMark records that a record will not be applied in order (it goes to a dead-letter queue,
// say), so that Apply of the records of its key goes on past it and answers ErrOutOfOrder,
// not ErrReplay, for it from then on; RedriveMark applies it later. Its answers: nil when the
// record is recorded as skipped (again or for the first time); ErrReplay when it was applied
// (then it is not skipped: ack it); a *SupersededError when a later epoch wrote its key's mark;
// errors as Apply's otherwise. The skipped records of a key are kept in its mark item, which
// DynamoDB limits to 400 KB: about 10,000 of them per key and shard until redriven.
func (s *Sink) SkipMark(ctx context.Context, mark Mark) error {
	k, err := s.prepare(ctx, mark, nil)
	if err != nil {
		return err
	}
	me := mark.pos()
	names := map[string]string{"#pos": attrPos, "#skipped": attrSkipped}
	values := map[string]types.AttributeValue{
		":pos": &types.AttributeValueMemberS{Value: me},
		":me":  &types.AttributeValueMemberSS{Value: []string{me}},
	}
	update := "ADD #skipped :me"
	if exp := s.expiry(names, values); exp != "" {
		update += " SET " + exp[2:]
	}
	_, err = s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 map[string]types.AttributeValue{attrKey: &types.AttributeValueMemberS{Value: k}},
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String("attribute_not_exists(#pos) OR #pos < :pos OR contains(#skipped, :pos)"),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ccf):
		old := ccf.Item
		if old == nil {
			if old, err = s.get(ctx, k); err != nil || old == nil {
				return fmt.Errorf("dynamosink: key %q: skip refused, the mark unread: %w", k, errors.Join(err, ccf))
			}
		}
		st, ok := storedOf(mark.Key, old)
		if !ok {
			return notAMark(k, old)
		}
		if st.Epoch > mark.Epoch {
			return &SupersededError{Key: mark.Key, Shard: mark.Shard, Epoch: true, Mark: st.Tenure, Yours: mark.Tenure, MarkEpoch: st.Epoch, YoursEpoch: mark.Epoch}
		}
		return ErrReplay
	default:
		return classifyOther(k, err)
	}
}

// Skip is SkipMark for a Message.
func (s *Sink) Skip(ctx context.Context, m *kinesub.Message) error {
	if m == nil {
		return fmt.Errorf("%w: nil message", ErrInvalidRecord)
	}
	return s.SkipMark(ctx, s.MarkOf(m))
}

// DeadLetter returns a function for kinesub.WithDeadLetter that records each dead-lettered
// record as skipped (Skip) before it calls next (which parks the record: keep MarkOf(m) with
// it, to redrive it with RedriveMark). The records of its key then go on, and Apply answers
// ErrOutOfOrder for it, never ErrReplay. A record that Skip finds applied (its last attempt
// landed after all, or it was applied before) is not passed to next: it returns nil, and
// Process acks it; so is one superseded by a later epoch, whose records that epoch applies.
// When Skip fails its error is returned and Process calls the function again after a backoff;
// when it fails for good (Permanent: a record the Sink cannot write, which no Apply wrote
// either) the record goes to next with both errors. A nil next only records the skip.
func (s *Sink) DeadLetter(next func(context.Context, *kinesub.Message, error) error) func(context.Context, *kinesub.Message, error) error {
	return func(ctx context.Context, m *kinesub.Message, cause error) error {
		switch err := s.Skip(ctx, m); {
		case errors.Is(err, ErrReplay), errors.Is(err, ErrSuperseded):
			return nil
		case err != nil && Permanent(err):
			cause = errors.Join(cause, err)
		case err != nil:
			return err
		}
		if next == nil {
			return nil
		}
		return next(ctx, m, cause)
	}
}
