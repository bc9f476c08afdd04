// Package kinesistest runs a Kinesis Data Streams server inside a Go test process, so that code
// using the AWS SDK's Kinesis client (kinesub's subscribers included) can be tested without AWS,
// Docker or Node.js.
//
//	srv := kinesistest.NewServer()
//	defer srv.Close()
//	client := srv.Client() // *kinesis.Client: the server's endpoint, static credentials, its certificate trusted
//	err := srv.CreateStream(ctx, "orders", 1) // ACTIVE when it returns
//	seqs, err := srv.Put(ctx, "orders", "shop-1", []byte("apples"), []byte("pears"))
//
// The server listens on 127.0.0.1 over TLS with HTTP/2 (SubscribeToShard needs HTTP/2) and
// speaks the service's own wire protocol: JSON 1.1 for every call, and the
// application/vnd.amazon.eventstream encoding for SubscribeToShard. Clients in other processes
// or languages reach it at srv.URL and trust srv.CertificatePEM().
//
// # What it serves
//
// CreateStream, DeleteStream, DescribeStream, DescribeStreamSummary, ListStreams, ListShards
// (MaxResults, NextToken alone, ExclusiveStartShardId, ShardFilter), PutRecord, PutRecords,
// GetShardIterator (all five types), GetRecords (MillisBehindLatest; ChildShards and no
// NextShardIterator at a closed shard's end), SplitShard, MergeShards, UpdateShardCount
// (UNIFORM_SCALING), RegisterStreamConsumer, DescribeStreamConsumer, ListStreamConsumers,
// DeregisterStreamConsumer and SubscribeToShard. Requests may name a stream by StreamName or
// StreamARN. Errors carry the service's exception types and status codes, so the SDK returns
// its typed errors (*types.ResourceNotFoundException, *types.ExpiredIteratorException,
// *types.ProvisionedThroughputExceededException, ...).
//
// A request whose body is over 16 MiB (more than any valid request) is answered with status
// 413, as the service answers one over its limit, typed SerializationException and naming the
// limit.
//
// Sequence numbers are 56-digit decimals numbered per shard, as the service numbers them: they
// grow with arrival within a shard, a child's are above every one of its parents', and those
// of different shards compare in no way to rely on (shards of one generation take blocks of
// numbers in an order that varies from stream to stream). Shard ids, hash-key ranges and
// partition-key hashing (MD5) are the service's. SubscribeToShard sends an
// event at once, then whenever records arrive and every WithIdleEventInterval on an idle shard;
// a second call for the same consumer and shard within 5 s fails with ResourceInUseException,
// a later one takes over and ends the first, and one after the client reset or closed the
// first's stream is served at once; a subscription ends after
// WithSubscriptionLifetime, and at a closed shard's end after an event with its ChildShards.
//
// # Setting a test up
//
// CreateStream and Put create a stream (and wait until it is ACTIVE) and put records without a
// client: they change the server's state as the CreateStream and PutRecord calls would, fail
// with the SDK's typed errors of those calls, and are never touched by WithFaults.
//
// # Knobs for tests
//
// WithClock puts time in the test's hands: arrival timestamps, iterator expiry
// (WithIteratorLifetime), MillisBehindLatest, throughput limits, status delays
// (WithStatusDelay) and subscription lifetimes count on it. WithLimits enforces the service's
// per-shard throughput limits, so throttling can be tested; by default they are off. WithFaults
// injects throttles, internal failures, dropped connections and latency into chosen operations
// from a seeded plan, and breaks SubscribeToShard subscriptions after some events (a reset
// stream, or an error event). Subscriptions tells how many subscriptions are open, so a test
// can check that a consumer released the streams it ended.
//
// # Differences from the service
//
// Records are kept for the server's life: there is no retention trimming, so TRIM_HORIZON is
// the stream's first record. UpdateShardCount scales in one step and refuses a target at which
// a new shard would have more than two parents. Under WithLimits, SubscribeToShard's 2 MB/s per
// consumer and shard is not paced. A subscription whose client reset or closed its stream ends
// at once, and a new call for its consumer and shard is served; the service documents that it
// refuses a second call within 5 s of an accepted one, and may hold the first that long.
// Tagging, encryption, resource policies and account settings are not served. A test
// package's other servers (kinesalite) are held to the same behaviour by one conformance suite.
//
// A Server is safe for concurrent use. The SDK's event-stream reader is known to race when one
// client reads several SubscribeToShard streams at once (aws/smithy-go#714): give each
// concurrent subscription its own client from Client.
package kinesistest
