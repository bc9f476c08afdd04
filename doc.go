// Package kinesub consumes Amazon Kinesis Data Streams.
//
// A Subscriber discovers a stream's shards (splits and merges included), shares them with the
// other subscribers of the same stream through leases (WithLeaseStore, required: package lease
// keeps them in memory for one process, or in a DynamoDB table for several), reads every shard
// it holds, and delivers the records on one channel:
//
//	// Ctrl-C (SIGINT) or an orchestrator's SIGTERM ends ctx, and with it the subscription:
//	// checkpoints written, leases released, Messages closed.
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	sub, err := kinesub.Subscribe(ctx, kinesis.NewFromConfig(cfg), "orders",
//		kinesub.WithLeaseStore(lease.NewDynamoDB(dynamodb.NewFromConfig(cfg), "orders-leases")))
//	if err != nil { … }
//	defer sub.Close(context.Background())
//	for msg := range sub.Messages() {
//		handle(msg)
//		msg.Ack(ctx)
//	}
//
// # Consuming
//
// Messages is a channel, for select-based code. All and Batches are pull iterators that run in
// the consumer's goroutine, with no channel operation per record; Batches yields consecutive
// records of one shard, and Batch.Ack settles them with one watermark update:
//
//	for b, err := range sub.Batches(ctx) {
//		if err != nil { … } // the subscription ended with a fatal error (Err)
//		for _, m := range b.Messages() { handle(m) }
//		b.Ack(ctx)
//	}
//
// Process runs a handler on many records at once, in order per key: records of one shard with
// the same partition key (WithOrderKey) one after another, the others up to WithConcurrency at
// once; a handler that returns nil acks its record, one that fails is retried in process behind
// its key (WithMaxAttempts, WithRetryBackoff, WithDeadLetter). docs/processing.md has the whole
// promise.
//
// Leaving a loop early loses nothing: the next loop, or Messages, goes on with what it left.
// One consumer pulls at a time (ErrConsumerBusy); once Messages was called, the channel
// consumes for good. Every style keeps the seek guarantee: nothing fetched before Seek
// returns is handed out after it.
//
// # Lifecycle
//
// Subscribe validates its options before any I/O (a missing WithLeaseStore is an error too),
// checks that the stream exists (or creates it with WithCreateIfMissing) and that the lease
// store answers, then starts a coordinator. The coordinator lists the shards every shard-sync
// interval, reads the stream's change row every second and its rows of the lease table when
// that row moved (a peer released, stole or joined) or at the balance interval, and takes the
// leases of readable shards up to its fair share. Each shard it holds gets a reader, which
// polls GetRecords (at once after a non-empty batch, after the poll interval when idle, after
// the idle poll interval once the shard has been empty at its tip for ten polls, within the
// service's 5 calls and 2 MB per second per shard), and a checkpoint flusher, which writes
// the checkpoint every checkpoint interval when it moved, whatever the consumer does. The
// subscriber renews one heartbeat row every TTL/3 for all its shards, whose leases are bound to
// it (see Several instances).
//
// Close stops the readers, lets the messages already handed out settle until its context
// ends, writes every checkpoint, releases every lease (so a peer takes the shards within about
// a second; a lease stolen and not yet read is left to the heartbeat row, deleted then too),
// and closes Messages, so that
// ranging over Messages always ends. Cancelling Subscribe's context does the same with a
// two-second drain. A fatal error (the stream was
// deleted) ends the subscription too; Err then says why. Everything else — a failed read, a
// throttle, an expired iterator, a lease store error, a lost lease — is retried or confined to
// its shard, and reported on Errors.
//
// # At-least-once delivery and the watermark
//
// Ack marks a message handled. Each shard keeps a watermark: the checkpoint advances over the
// contiguous prefix of handled messages, in delivery order, whatever order the acks come in.
// An unacknowledged message holds the checkpoint back, so after a restart, a crash or a
// handoff the shard is read again from the first message not handled: no record is skipped
// before it is acknowledged, and some may be delivered twice. Ack itself never waits on the
// lease store (unless WithCheckpointInterval(0)); Commit forces the write. For effects in
// DynamoDB, package dynamosink writes a record's items with its key's high-water mark and the
// lease's fencing token (Message.Tenure) in one transaction, so a record delivered twice is
// applied once.
//
// Nack leaves a message unhandled, to be delivered again when the shard's lease is next taken
// (to skip one, Ack it; to retry one in process, consume with Process). WithMaxInFlight and
// WithMaxInFlightBytes cap the unsettled messages per shard, by count and by size: a reader at
// a cap waits for acks, so memory stays bounded whatever the consumer does.
//
// # Partial failures
//
// Every call to Kinesis and to the lease store runs under WithRequestTimeout and the caller's
// context. Readers whose subscriber could not renew its heartbeat row (or confirm its leases)
// stop before a peer can take the row over, and a subscriber that steals a lease waits until
// its previous owner has stopped (WithLeaseTTL), each timing on its own monotonic clock, so no
// two subscribers hand out one shard's records at once, whatever the hosts' clocks say. Every checkpoint and release is conditional on the holding it was written for (the
// owner and the lease's counter), so a write in flight across a loss never lands. Close returns by its context's deadline and lists
// what it could not write. A Seek that fails leaves each shard where it was or fully moved
// (ErrSeekPending).
//
// # Ordering and resharding
//
// Messages of one shard arrive in sequence order; shards interleave. Since a partition key
// maps to one shard at a time, messages of one key arrive in publish order, also across splits
// and merges: a child shard is read only once all its parents (ParentShardId and
// AdjacentParentShardId) were read to their ends and their last messages handled. Their
// checkpoint then becomes SHARD_END, which lets the children start.
//
// # Several instances
//
// Subscribers that share a lease table share the stream's shards. Each one keeps a heartbeat
// row in the table ("<stream>/~v2/owner/<owner>", renewed every TTL/3 by moving its counter,
// and deleted at Close), and its shard leases are bound to that row, with no expiry of their
// own: an idle shard costs no write. An owner is live while its heartbeat row's counter moves;
// a peer that has seen it stand still for 3/4 TTL on its own clock takes the row over and the
// owner's shards at once (docs/leases.md). With n readable shards (not finished, parents read to
// their ends) and k live owners, each holds n/k rounded down or up. Each subscriber takes free
// leases, and those of owners whose row is gone, up to n/k rounded up and hands back cleanly what it holds beyond that, at
// once when an owner joins and every balance round otherwise, so a new or restarted instance
// gets its share without stealing. When the shards do not divide evenly and more owners hold
// n/k rounded up than can, the owners past those that can (by name) hand one lease back for
// an owner below n/k rounded down that finds nothing free. It steals one lease a balance round from the most loaded
// other owner for what handing back cannot fix: while it holds fewer than n/k rounded down
// and that owner more, or, when the shards do not divide evenly, while it holds exactly that
// and the owner two or more above it; never from an owner above n/k rounded up whose heartbeat
// is live, which hands back its excess itself. A lease it stole is not handed back before it
// is read. A subscriber whose lease was taken over learns it at its next reading of the leases
// (within a second of the thief moving the change row) and stops reading that shard only.
// When the shards carry unequal traffic, each subscriber notes on its heartbeat row the bytes a
// second its readers fetch, and balancing goes by load instead of by count: an owner above
// 1.15 times the mean hands shards back to the least loaded, a shard that moved stays put for
// two balance rounds, and nothing is stolen from a live owner (docs/leases.md).
// Subscribers of versions before 0.1.0, which renewed each lease, cannot share a table with
// this one: Subscribe refuses with ErrIncompatibleLeaseTable. Shards reports what this instance sees of each shard.
//
// Rows nobody needs are deleted: the leases of shards read to their end and trimmed from the
// stream by the service (after the retention period), and the heartbeat rows of owners that
// crashed, once found expired.
//
// # Enhanced fan-out
//
// WithEnhancedFanOut reads each held shard over SubscribeToShard through a registered stream
// consumer instead of polling GetRecords: the consumer's own 2 MB/s per shard, and records
// pushed within tens of milliseconds. Subscribe registers the consumer when missing and waits
// until it is ACTIVE (ErrFanOutConsumer otherwise); instances share it, and kinesub never
// deregisters it. Each subscription is renewed at the end of its five-minute lifetime from
// its last continuation, abandoned and renewed after 35 s without an event while its reader
// waits, and retried once a second while the service answers ResourceInUseException (reported
// on Errors, unless the subscription the service still holds is the reader's own, ended by a
// seek or a renewal less than its five-second takeover window after it began). Leases,
// checkpoints, resharding, Seek and Close work as with polling. Each shard's subscriptions use
// a client of their own built from the given client's options, as the SDK's event-stream
// decoder is shared by a client's streams (aws/smithy-go#714).
//
// # Positions and seeking
//
// By default each shard resumes after its checkpoint, and a shard never read before opens at
// the tip as of the Subscribe call: every record published after Subscribe was called is read,
// however late a shard's reader opens (WithInitialPosition chooses another place). That
// position applies to the children of a split or merge whose parents closed before the
// application started, as to every other shard it starts, whichever of its instances takes
// them: a parent read from the start position to its end records it on its SHARD_END. A
// child of a parent read from a checkpoint opens at its oldest record, so nothing after a
// reshard is skipped. The first reader of a shard records where it opened, so a shard handed
// over (or reopened after a restart) before its first checkpoint is not reopened at a later
// tip. WithStartAt opens every shard at a stream-wide Position instead (Horizon, Latest,
// AtTimestamp), ahead of stored checkpoints. A running subscription is repositioned with
// Seeker.Seek, for example from an admin endpoint (see SeekHandler): a stream-wide position
// moves every shard and applies to shards opened later; AtSequence moves one shard. Once Seek
// returns, nothing fetched before it is delivered from the moved shards, and acks of earlier
// messages no longer move their checkpoints.
//
// # Records and headers
//
// Records published with headers (Publisher) carry them in an envelope compatible with the
// ruststream-kinesis crate: "RSK1", a big-endian u32 length, lines "name: value\n", then the
// payload. Message.Data returns the payload and Message.Headers the headers, read exactly as the
// crate reads them: lines end at '\n' (or "\r\n"), a line splits at its first ':', names and
// values are trimmed, lines without ':' are ignored, the last of duplicate names wins, and names
// are lowercased (Publish lowercases them too). A record without an envelope, or whose length
// runs past the record's end, is delivered as it is.
//
// A record aggregated by the Kinesis Producer Library is delivered as its user records, which
// share its sequence number (SubSequenceNumber tells them apart). Until all of them are handled
// the checkpoint stays inside the aggregate, as the Java KCL's does: (sequence number, user
// records handled), stored as the lease's SubSequence, so a restart resumes at the first
// unhandled user record. Message.Position points at the user record (AtSubSequence), so Seek
// there delivers it and what follows. A record that looks aggregated but is malformed (a bad
// checksum, say) is reported on Errors (ErrAggregatedRecord) and counts as handled. A user
// record whose hash key (its explicit hash key, or else its partition key's MD5) lies outside
// the range of the shard it was read from is not delivered and counts as handled, as in the
// Java KCL: after a split, an aggregate made for the parent lands in one child, and the KPL
// writes its other user records again on the shard they belong to. The metric
// kinesub.records.dropped counts them.
//
// kinesub decodes successful GetRecords answers and enhanced fan-out's SubscribeToShardEvents
// itself, into the same types the SDK's decoder gives, at a half to a quarter of its CPU;
// error answers, exceptions and anything it does not read go to the SDK's decoder, so errors
// are the SDK's. A record's Data may share a block of up to 8 KiB with its neighbours' (its
// capacity ends at its length, so appending to it copies).
//
// # Metrics
//
// Subscribers and publishers report OpenTelemetry metrics through the metric API: lag per
// shard (kinesub.shard.millis_behind_latest), deliveries in flight, records consumed, acked
// and nacked, leases held and their transitions (acquired, stolen, lost, released,
// handed_back), checkpoint writes, Process's handlers running, failed attempts, dead letters
// and waits behind a key, and every Kinesis and lease store call by operation and outcome (ok,
// throttled, error), and for autoscaling the consumer's utilization
// (kinesub.consumer.utilization: the share of time it was not waiting for records) and the
// instances the fleet needs to run at WithScaleTarget (kinesub.fleet.instances_needed:
// ceil(sum of the live instances' utilizations / target), at least 1, at most the open
// shards). They go to the global MeterProvider unless WithMeterProvider
// (WithPublishMeterProvider for a Publisher) names another; the global one discards them until
// the application installs an SDK. The repository's docs/metrics.md lists every metric and what
// to alert on.
//
// # Tracing
//
// With WithPublishTracerProvider a Publisher starts a producer span per Publish or
// PublishBatch call and writes its W3C trace context into each record's header envelope; with
// WithTracerProvider a subscriber starts a span per handler call of Process (a child of the
// producer's span, carried by the handler's ctx) and per record delivered to Messages, All or
// Batches (linked to the producer's span, ended at its Ack or Nack). Tracing is off by default,
// at no cost, and without it a Publisher writes records exactly as given. The repository's
// docs/tracing.md lists the spans and their attributes.
//
// # Contexts
//
// The methods that start or wait for work (Subscribe, Seek, Commit, All, Batches, Publish,
// PublishBatch, and the lease stores' methods) refuse a nil ctx: before doing anything they
// return an error wrapping ErrInvalidOption (lease.ErrInvalidArgument for the stores) that
// names the method and says to pass context.Background(); All and Batches yield it once. The
// methods that settle or shut down (Ack, Nack, Batch.Ack and Close) never refuse: a nil ctx is
// context.Background() there, so that defer sub.Close(nil) still closes.
//
// # Concurrency
//
// Subscriber, Seeker, Publisher and Message are safe for concurrent use.
package kinesub
