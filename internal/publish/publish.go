// Package publish is the machinery of kinesub's Publisher: the records of a PublishBatch call
// queued per partition key (queue.go), the stream's shards and one pacer per shard
// (shards.go, pace.go), the batch's loop of PutRecords calls and their answers (batch.go) and
// KPL aggregation (aggregate.go). The exported Publisher, its options and its errors live in
// the root package, which hands this one a Writer; it imports nothing of the root.
package publish

import (
	"fmt"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub/internal/envelope"
	"github.com/gostream/kinesub/internal/kpl"
)

// Limits the service puts on what one PutRecord or PutRecords call carries.
const (
	MaxPartitionKey = 256     // UTF-16 code units, as the service (and the Java KPL) counts them
	MaxRecordBytes  = 1 << 20 // data plus partition key
	MaxBatchRecords = 500
	MaxBatchBytes   = 5 << 20 // data plus partition keys, over the whole call
)

// Stream is the stream a publisher writes to: its name, and its ARN when it was given one.
type Stream struct {
	Name string
	ARN  string // "" when given a name
}

// nameParam is the StreamName parameter of a call: always the name. Given an ARN, both are
// sent (the ARN decides the account and region).
func (s Stream) nameParam() *string { return aws.String(s.Name) }

// arnParam is the StreamARN parameter of a call: the ARN when given one, else unset.
func (s Stream) arnParam() *string {
	if s.ARN == "" {
		return nil
	}
	return aws.String(s.ARN)
}

// noRetry makes the SDK try once: a batch retries refused records itself, in its shard's turn.
func noRetry(o *kinesis.Options) { o.RetryMaxAttempts = 1 }

// Prepare checks a record against the service's limits and returns its data with the header
// envelope, and its hash key.
func Prepare(partitionKey, explicitHashKey string, data []byte, headers map[string]string) ([]byte, kpl.HashKey, error) {
	if err := checkPartitionKey(partitionKey); err != nil {
		return nil, kpl.HashKey{}, err
	}
	hash := kpl.PartitionHash(partitionKey)
	if explicitHashKey != "" {
		var ok bool
		if hash, ok = kpl.ParseHashKey(explicitHashKey); !ok {
			return nil, kpl.HashKey{}, fmt.Errorf("explicit hash key %q: must be a decimal number from 0 to 2^128-1 without leading zeros", explicitHashKey)
		}
	}
	enc, err := envelope.Encode(headers, data)
	if err != nil {
		return nil, kpl.HashKey{}, err
	}
	if enc == nil {
		// The service takes a record of no data; the SDK refuses a nil blob as missing.
		enc = []byte{}
	}
	if n := len(enc) + len(partitionKey); n > MaxRecordBytes {
		return nil, kpl.HashKey{}, fmt.Errorf("%d bytes of data, headers and partition key: must be at most %d (1 MiB)", n, MaxRecordBytes)
	}
	return enc, hash, nil
}

// checkPartitionKey holds a partition key to the service's rule: valid UTF-8, 1 to 256 UTF-16
// code units (so a character outside the Basic Multilingual Plane, such as an emoji, counts
// twice), as the service, the Java KPL and kinesalite count them.
func checkPartitionKey(key string) error {
	if !utf8.ValidString(key) {
		return fmt.Errorf("partition key %q is not valid UTF-8", key)
	}
	n := 0
	for _, r := range key {
		n++
		if r > 0xFFFF {
			n++ // a surrogate pair
		}
	}
	if n < 1 || n > MaxPartitionKey {
		return fmt.Errorf("partition key of %d UTF-16 code units (%d characters): must be 1 to %d", n, utf8.RuneCountInString(key), MaxPartitionKey)
	}
	return nil
}
