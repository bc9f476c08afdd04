// Package dynamosink applies the DynamoDB writes of Kinesis records effectively once: each
// record's writes land at most once, and in order per key, however often the record is
// delivered.
//
// kinesub delivers at least once: a record handled but not yet checkpointed when its consumer
// crashed, or when its shard moved to another instance, is delivered again. A Sink writes a
// record's effects in one TransactWriteItems with the high-water mark of its order key (the
// record's sequence and sub-sequence number, and the shard holding it was read under,
// kinesub.Message.Tenure), conditioned on the mark being below the record and on no later
// holding of the shard having written it. So a replayed record changes nothing, and Apply
// says so (ErrReplay); a record applied by an instance whose lease a peer has since taken is
// refused (ErrSuperseded), even when that instance was paused past its lease and resumed.
//
//	sink, err := dynamosink.New(db, "orders-marks")
//	...
//	err = sub.Process(ctx, func(ctx context.Context, m *kinesub.Message) error {
//		err := sink.Apply(ctx, m, types.TransactWriteItem{Update: &types.Update{...}})
//		if errors.Is(err, dynamosink.ErrReplay) {
//			return nil // applied before: ack
//		}
//		return err
//	})
//
// The mark orders the records of a key, so the records of a key must be applied one at a time
// and in order: Process does that (give the Sink the same WithOrderKey as Process). The
// effects must be computed from the record (and from what the transaction's own conditions
// check), not from reads made outside the transaction, for a replay to be harmless.
//
// The mark table (CreateTable) holds one item per key, kept forever; the effects go to tables
// of the caller's own. A transaction costs twice the write units of its items.
package dynamosink
