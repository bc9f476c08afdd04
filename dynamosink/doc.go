// Package dynamosink applies the DynamoDB writes of Kinesis records effectively once: each
// record's writes land at most once, in order per key within a shard, however often the record
// is delivered.
//
// kinesub delivers at least once: a record handled but not yet checkpointed when its consumer
// crashed, or when its shard moved to another instance, is delivered again. A Sink writes a
// record's effects in one TransactWriteItems with its key's mark: the last record of the key
// applied from the record's shard (sequence and sub-sequence number, in a replay epoch), kept
// per stream, shard and order key, because sequence numbers order the records of one shard
// only. The transaction is conditional on the mark being below the record, so a replay writes
// nothing, and Apply says so.
//
//	sink, err := dynamosink.New(db, "orders-marks", dynamosink.WithLeaseTable("orders-leases"))
//	...
//	err = sub.Process(ctx, sink.Handler(func(ctx context.Context, m *kinesub.Message) ([]types.TransactWriteItem, error) {
//		return []types.TransactWriteItem{{Update: &types.Update{...}}}, nil
//	}), kinesub.WithMaxAttempts(5), kinesub.WithDeadLetter(sink.DeadLetter(park)))
//
// # The contract
//
// Within one mark (one WithStream, shard, order key and WithKeyPrefix), given that
//
//  1. the records are applied one at a time and in their order in the shard (Process does
//     this when given the same order key, kinesub.WithOrderKey, as the Sink);
//  2. a record that will not be applied before a later record of its key is either tried
//     again until it is, or recorded as skipped (Skip, or DeadLetter around the dead-letter
//     function) before the later one is applied;
//  3. each record is written by one Apply, whose items' tables and keys are the same on every
//     delivery, and no other Sink keeps marks under the same prefix in the same table;
//  4. a seek back that is meant to apply records again raises their epoch (WithEpoch),
//
// Apply's answers mean what they say: nil, the record's items and mark were written now, in
// one transaction; ErrReplay, the record's items were written before, by an Apply of this
// record, and nothing now; ErrOutOfOrder, the record was skipped and a later one of its key
// applied, nothing written (RedriveMark applies it, out of order, once); ErrOtherWrites, the
// mark is this record's, written by an Apply of other items, nothing written; ErrSuperseded,
// a later epoch or holding wrote the mark, nothing written; ErrEffectCondition and
// ErrInvalidRecord, nothing written. Every other error leaves the record's writes unknown, and
// trying again is safe. When a rule above is broken, ErrReplay may answer a record that was
// never applied (a record passed by a later one of its key, out of order, reads as applied).
// Within one epoch, and while its key's mark lives (WithMarkTTL), no answer makes a record's
// writes land twice, whatever the rules: each record's writes are conditional on its key's
// mark being below it, and a redrive on its being recorded as skipped.
//
// The items may be computed from reads made before the transaction: Apply is at most once
// whatever they hold. But such reads are not isolated: what was read may change before the
// transaction lands, so condition the items (or add a ConditionCheck) on what matters.
//
// Across marks there is no order: records of one key in two open shards (explicit hash keys,
// a KPL aggregate kept in the wrong child after a split, an order key not drawn from the
// partition key) are applied on their shard's marks, each once, in the order the handlers
// run. A key's order across a split or merge holds because kinesub reads a child only once
// its parents were read to their end.
//
// A holding is fenced only with WithLeaseTable: a record read under an earlier holding of its
// shard than the one that wrote its key's mark is then refused (ErrSuperseded). Without it, an
// instance that lost its shard and goes on applying its records applies each above the mark in
// order, as the new holder would have; the rules above keep that once.
//
// The mark table (CreateTable) holds one item per stream, shard and key, kept forever or for
// WithMarkTTL; the effects go to tables of the caller's own. A transaction costs twice the
// write units of its items. docs/dynamosink.md says what a user must do.
package dynamosink
