package kinesub

import (
	"context"
	"fmt"
	"time"
)

// ProcessOption configures Process. Options are validated before Process takes anything from
// the subscription; an invalid value makes it return an error wrapping ErrInvalidOption that
// names the option and its range.
type ProcessOption func(*processConfig)

type processConfig struct {
	concurrency int
	maxAttempts int // 0: until the handler succeeds
	backoffBase time.Duration
	backoffMax  time.Duration
	deadLetter  func(context.Context, *Message, error) error
	orderKey    func(*Message) string // nil: the partition key

	errs []error // collected while applying options, reported by validate

	started func(*processor) // tests only: called with the processor before it takes anything
}

func defaultProcessConfig() processConfig {
	return processConfig{
		concurrency: 16,
		backoffBase: 100 * time.Millisecond,
		backoffMax:  30 * time.Second,
	}
}

// Limits of the Process options' ranges.
const (
	maxConcurrency = 100_000
	maxMaxAttempts = 1_000_000
	minRetryWait   = time.Millisecond
	maxRetryWait   = time.Hour
)

func (c *processConfig) validate() error {
	if len(c.errs) > 0 {
		return c.errs[0]
	}
	switch {
	case c.concurrency < 1 || c.concurrency > maxConcurrency:
		return optionError("WithConcurrency", c.concurrency, fmt.Sprintf("must be between 1 and %d", maxConcurrency))
	case c.maxAttempts < 0 || c.maxAttempts > maxMaxAttempts:
		return optionError("WithMaxAttempts", c.maxAttempts, fmt.Sprintf("must be between 0 (until the handler succeeds) and %d", maxMaxAttempts))
	case c.backoffBase < minRetryWait || c.backoffBase > maxRetryWait:
		return optionError("WithRetryBackoff", c.backoffBase, fmt.Sprintf("base must be between %v and %v", minRetryWait, maxRetryWait))
	case c.backoffMax < c.backoffBase || c.backoffMax > maxRetryWait:
		return optionError("WithRetryBackoff", c.backoffMax, fmt.Sprintf("limit must be between the base (%v) and %v", c.backoffBase, maxRetryWait))
	case c.deadLetter != nil && c.maxAttempts == 0:
		return optionError("WithDeadLetter", "with WithMaxAttempts(0)", "needs WithMaxAttempts of at least 1: without a limit no record is ever dead-lettered")
	}
	return nil
}

func (c *processConfig) reject(option string, value any, allowed string) {
	c.errs = append(c.errs, optionError(option, value, allowed))
}

// WithConcurrency sets how many handlers run at once, across all shards, overriding the
// default 16. Records of one order key never run at once whatever n is. Range 1 to 100000.
func WithConcurrency(n int) ProcessOption { return func(c *processConfig) { c.concurrency = n } }

// WithMaxAttempts sets how many times a record is tried before it goes to the dead-letter
// function (WithDeadLetter), overriding the default 0: try until the handler succeeds. Without
// a dead-letter function, a record that used its attempts is tried again at the maximum
// backoff until it succeeds, and Shards shows it (ShardStatus.Failing). Range 0 to 1000000.
func WithMaxAttempts(n int) ProcessOption { return func(c *processConfig) { c.maxAttempts = n } }

// WithRetryBackoff sets the wait before a failed record is tried again, overriding the
// defaults 100ms and 30s: base after the first failure, doubling after each further one up to
// limit, each wait drawn at random from its upper half so that failing keys do not retry in
// step. Range 1ms to 1h for both; limit must not be below base.
func WithRetryBackoff(base, limit time.Duration) ProcessOption {
	return func(c *processConfig) { c.backoffBase, c.backoffMax = base, limit }
}

// WithDeadLetter sets the function that takes a record that failed WithMaxAttempts times
// (which must be at least 1), with the last attempt's error. When it returns nil the record
// counts as handled (acked) and the records of its key behind it go on; when it fails, it is
// called again after the backoff. It runs as the handler does: on one of the WithConcurrency
// slots, panics recovered, with the same context. By default there is none. nil is rejected.
func WithDeadLetter(f func(context.Context, *Message, error) error) ProcessOption {
	return func(c *processConfig) {
		if f == nil {
			c.reject("WithDeadLetter", "nil", "must be a function")
			return
		}
		c.deadLetter = f
	}
}

// WithOrderKey sets what orders records within a shard, overriding the default, the record's
// own partition key (a user record of a KPL aggregate and an enveloped record have theirs):
// records of one shard with equal keys are handled one after another, in delivery order; the
// others run at once. Keys are compared within a shard, never across shards. A function
// returning "" for every record gives each shard's records in order, one at a time. It is
// called once per record, in the goroutine that called Process, and must not block. nil is
// rejected.
func WithOrderKey(f func(*Message) string) ProcessOption {
	return func(c *processConfig) {
		if f == nil {
			c.reject("WithOrderKey", "nil", "must be a function")
			return
		}
		c.orderKey = f
	}
}
