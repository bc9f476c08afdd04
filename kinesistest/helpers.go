package kinesistest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
)

// The helpers below set a test up without a client: they act on the server's state directly,
// as the calls they stand for would, and skip WithFaults (a test's setup is not what it
// faults).

// ErrInvalidArgument is wrapped by a helper's error for an argument it cannot use: a nil
// context.
var ErrInvalidArgument = errors.New("kinesistest: invalid argument")

// activeWait is how often CreateStream looks at a stream that is still CREATING.
const activeWait = 5 * time.Millisecond

// CreateStream creates a provisioned stream of the given number of shards, as the
// CreateStream call does, and waits until it is ACTIVE: at once, unless WithStatusDelay keeps
// it CREATING for a while on the server's clock. It fails as the call would (a stream of that
// name exists: *types.ResourceInUseException; a bad name or shard count:
// *types.ValidationException), or with ctx's error. A nil ctx is an error wrapping
// ErrInvalidArgument.
func (s *Server) CreateStream(ctx context.Context, name string, shards int) error {
	if ctx == nil {
		return nilContext("CreateStream")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	body, err := json.Marshal(struct {
		StreamName string
		ShardCount int
	}{name, shards})
	if err != nil {
		return err
	}
	if _, aerr := s.createStream(body); aerr != nil {
		return fmt.Errorf("kinesistest: CreateStream %s: %w", name, aerr.sdk())
	}
	var t *time.Timer
	for {
		s.mu.Lock()
		st, aerr := s.lookup(name, "")
		active := aerr == nil && st.status == statusActive
		s.mu.Unlock()
		switch {
		case aerr != nil:
			return fmt.Errorf("kinesistest: CreateStream %s: %w", name, aerr.sdk())
		case active:
			return nil
		}
		if t == nil {
			t = time.NewTimer(activeWait)
			defer t.Stop()
		} else {
			t.Reset(activeWait)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("kinesistest: CreateStream %s: waiting until ACTIVE: %w", name, ctx.Err())
		}
	}
}

// Put writes each of data to stream as a record with the partition key, in order, as
// successive PutRecord calls do, and returns their sequence numbers. Records of one key go to
// one shard, so they are read back in this order. It fails as the call would (no such stream:
// *types.ResourceNotFoundException; a key or record too long: *types.ValidationException;
// under WithLimits, a shard's write limit: *types.ProvisionedThroughputExceededException, with
// the records before it written), or with ctx's error. A nil ctx is an error wrapping
// ErrInvalidArgument.
func (s *Server) Put(ctx context.Context, stream, partitionKey string, data ...[]byte) ([]string, error) {
	if ctx == nil {
		return nil, nilContext("Put")
	}
	seqs := make([]string, 0, len(data))
	for i, d := range data {
		if err := ctx.Err(); err != nil {
			return seqs, err
		}
		seq, aerr := s.putOne(stream, &putEntry{Data: d, PartitionKey: partitionKey})
		if aerr != nil {
			return seqs, fmt.Errorf("kinesistest: Put %s record %d: %w", stream, i, aerr.sdk())
		}
		seqs = append(seqs, seq)
	}
	return seqs, nil
}

// putOne writes one record, as PutRecord does.
func (s *Server) putOne(stream string, e *putEntry) (string, *apiError) {
	key, aerr := e.check("")
	if aerr != nil {
		return "", aerr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, aerr := s.writable(streamRef{StreamName: stream})
	if aerr != nil {
		return "", aerr
	}
	_, seq, aerr := s.put(st, e, key, s.now())
	return seq, aerr
}

func nilContext(method string) error {
	return fmt.Errorf("%w: %s: nil context: pass context.Background()", ErrInvalidArgument, method)
}

// sdk returns the error the SDK's client returns for this answer: its typed exception where
// it has one, else a smithy.GenericAPIError with the exception's name.
func (e *apiError) sdk() error {
	m := aws.String(e.message)
	switch e.typ {
	case "ResourceNotFoundException":
		return &types.ResourceNotFoundException{Message: m}
	case "ResourceInUseException":
		return &types.ResourceInUseException{Message: m}
	case "InvalidArgumentException":
		return &types.InvalidArgumentException{Message: m}
	case "ValidationException":
		return &types.ValidationException{Message: m}
	case "LimitExceededException":
		return &types.LimitExceededException{Message: m}
	case "ProvisionedThroughputExceededException":
		return &types.ProvisionedThroughputExceededException{Message: m}
	case "ExpiredIteratorException":
		return &types.ExpiredIteratorException{Message: m}
	case "InternalFailureException":
		return &types.InternalFailureException{Message: m}
	}
	return &smithy.GenericAPIError{Code: e.typ, Message: e.message}
}
