package kinesub

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// Bounds of the wait between retries of a failed call.
const (
	backoffMin = 50 * time.Millisecond
	backoffMax = 5 * time.Second
)

// backoff returns the wait before retry attempt n (from 0): exponential with full jitter
// over its upper half.
func backoff(n int) time.Duration {
	d := backoffMin << min(n, 16)
	if d > backoffMax || d <= 0 {
		d = backoffMax
	}
	return d/2 + rand.N(d/2+1)
}

// errKind classifies an SDK error for the reader.
type errKind int

const (
	errTransient errKind = iota // network, 5xx, timeout: retry with backoff
	errThrottled                // the shard's read budget is spent: retry with backoff
	errExpired                  // the iterator expired: reopen
	errGone                     // the stream or shard no longer exists
	errRejected                 // the request was invalid (for example a bad sequence number)
	errStopped                  // the reader's context ended
)

func classify(ctx context.Context, err error) errKind {
	var (
		expired  *types.ExpiredIteratorException
		throttle *types.ProvisionedThroughputExceededException
		limit    *types.LimitExceededException
		kms      *types.KMSThrottlingException
		nf       *types.ResourceNotFoundException
		invalid  *types.InvalidArgumentException
	)
	switch {
	case ctx.Err() != nil:
		return errStopped
	case errors.As(err, &expired):
		return errExpired
	case errors.As(err, &throttle), errors.As(err, &limit), errors.As(err, &kms):
		return errThrottled
	case errors.As(err, &nf):
		return errGone
	case errors.As(err, &invalid):
		return errRejected
	}
	return errTransient
}

// noRetry makes the SDK try once: kinesub's readers retry with their own backoff and rate
// budget, so retries do not multiply.
func noRetry(o *kinesis.Options) { o.RetryMaxAttempts = 1 }
