package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/cmd/chaos/internal/chaoslog"
	"github.com/gostream/kinesub/dynamosink"
)

// effectsConfig is what -effects asks for: each record's effect adds one to the counter item
// named by its payload in table, through dynamosink (mode "sink", marks in marks) or with a
// plain UpdateItem (mode "plain").
type effectsConfig struct {
	mode, table, marks string
}

// handler returns the Process handler of the effects run: it logs its record first thing (the
// verifier takes a record's first line as when it was first handled), applies its effect,
// flushes the log and returns nil, which acks the record. A replay through dynamosink is
// logged as an event and acked.
func (e effectsConfig) handler(log *chaoslog.Writer, db *dynamodb.Client) (func(context.Context, *kinesub.Message) error, error) {
	if e.table == "" {
		return nil, errors.New("-effects needs -effects-table")
	}
	effect := func(m *kinesub.Message) *types.Update {
		return &types.Update{
			TableName:                 aws.String(e.table),
			Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: string(m.Data())}},
			UpdateExpression:          aws.String("ADD n :one"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
		}
	}
	var apply func(context.Context, *kinesub.Message) error
	switch e.mode {
	case "plain":
		apply = func(ctx context.Context, m *kinesub.Message) error {
			u := effect(m)
			_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression,
				ExpressionAttributeValues: u.ExpressionAttributeValues,
			})
			return err
		}
	case "sink":
		if e.marks == "" {
			return nil, errors.New("-effects sink needs -marks-table")
		}
		sink, err := dynamosink.New(db, e.marks)
		if err != nil {
			return nil, err
		}
		apply = func(ctx context.Context, m *kinesub.Message) error {
			err := sink.Apply(ctx, m, types.TransactWriteItem{Update: effect(m)})
			if errors.Is(err, dynamosink.ErrReplay) {
				_ = log.Event("replay", map[string]string{"shard": m.ShardID(), "seq": m.SequenceNumber()})
				return nil
			}
			return err
		}
	default:
		return nil, fmt.Errorf("-effects %q: want sink or plain", e.mode)
	}
	return func(ctx context.Context, m *kinesub.Message) error {
		log.Delivery(m.ShardID(), m.SequenceNumber(), m.PartitionKey(), m.Data())
		if err := apply(ctx, m); err != nil {
			return err
		}
		if err := log.Flush(); err != nil {
			return err
		}
		log.Ack(m.ShardID(), m.SequenceNumber())
		return nil
	}, nil
}
