package kinesub

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// shardSource is where one shard's records come from. A reader (reader.go) drives its source
// from its own goroutine only: it opens it at a position, asks for pages, and reopens it where
// it needs to (after a seek, an expired position, a rejected request). The GetRecords poller
// (poll.go) is the source of a polling subscription.
//
// Errors are the service's own, so that the reader classifies them (retry.go); a source wraps
// them in a *sourceError naming the operation that failed.
type shardSource interface {
	// open positions the source at p: a stream-wide position, a sequence number (posSequence)
	// or just after one (posAfter).
	open(ctx context.Context, p Position) error
	// next returns the next page, of at most limit records.
	next(ctx context.Context, limit int) (page, error)
	// close releases what the source holds; it is called once, when the reader stops.
	close()
}

// page is one response of a shard source.
type page struct {
	records      []types.Record
	millisBehind int64
	// end: the shard is closed and these are its last records; children, when the source
	// knows them, are the shards that continue it.
	end      bool
	children []string
	// pause is how long the reader waits before the next page: the poll interval after an empty
	// page (the idle poll interval once the shard is quiet), or the time a very large page's
	// bytes take from the shard's read budget.
	pause time.Duration
	// quiet: the source polls the shard at its idle interval, after quietAfter empty pages in a
	// row at the tip.
	quiet bool
}

// sourceError is a failed call of a shard source.
type sourceError struct {
	op  Op // the service operation, e.g. OpGetRecords
	err error
}

func (e *sourceError) Error() string { return string(e.op) + ": " + e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// opOf returns the operation a source error names, or fallback.
func opOf(err error, fallback Op) Op {
	var se *sourceError
	if errors.As(err, &se) {
		return se.op
	}
	return fallback
}
