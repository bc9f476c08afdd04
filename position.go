package kinesub

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

type positionKind uint8

const (
	posInvalid positionKind = iota
	posHorizon
	posLatest
	posTimestamp
	posSequence
	posAfter // just after a checkpoint: a sequence number, or a user record in an aggregate; internal
)

// Position is a place in a stream to read from: stream-wide (Horizon, Latest, AtTimestamp) or
// in one shard (AtSequence). It is a comparable value; the zero Position is invalid.
type Position struct {
	kind     positionKind
	unixNano int64 // posTimestamp
	shard    string
	sequence string
	// sub, with posSequence: the user record of a KPL aggregate to start at; with posAfter:
	// how many of the aggregate's user records were handled (0: the whole record was).
	sub int
}

// Horizon is the oldest record each shard retains (TRIM_HORIZON). Stream-wide.
func Horizon() Position { return Position{kind: posHorizon} }

// Latest is the tip of each shard: only records published from then on. Stream-wide. As a
// start position (WithInitialPosition, the default; WithStartAt) it is the tip as of the
// Subscribe call, and for a stream-wide Seek, as of the seek, whenever a shard's reader opens.
func Latest() Position { return Position{kind: posLatest} }

// AtTimestamp is each shard's first record that arrived at or after t. Stream-wide. Times
// outside the years 1678 to 2262 (what a Position can hold) are clamped to that range.
func AtTimestamp(t time.Time) Position {
	switch {
	case t.Before(minPositionTime):
		t = minPositionTime
	case t.After(maxPositionTime):
		t = maxPositionTime
	}
	return Position{kind: posTimestamp, unixNano: t.UnixNano()}
}

var (
	minPositionTime = time.Unix(0, math.MinInt64)
	maxPositionTime = time.Unix(0, math.MaxInt64)
)

// AtSequence is exactly the record with this sequence number on this shard, and the records
// after it. Shard-scoped.
func AtSequence(shard, sequence string) Position {
	return Position{kind: posSequence, shard: shard, sequence: sequence}
}

// AtSubSequence is exactly the user record with this sub-sequence number in the record with
// this sequence number, a KPL aggregate, on this shard, and the records after it: the aggregate's
// earlier user records are skipped. With subSequence 0 it is AtSequence. Shard-scoped; a negative
// subSequence counts as 0.
func AtSubSequence(shard, sequence string, subSequence int) Position {
	return Position{kind: posSequence, shard: shard, sequence: sequence, sub: max(subSequence, 0)}
}

// IsZero reports whether p is the zero (invalid) Position.
func (p Position) IsZero() bool { return p.kind == posInvalid }

// Shard returns the shard of a shard-scoped position, and "" for a stream-wide one.
func (p Position) Shard() string { return p.shard }

// streamWide reports whether p applies to every shard.
func (p Position) streamWide() bool {
	return p.kind == posHorizon || p.kind == posLatest || p.kind == posTimestamp
}

// String renders p as ParsePosition reads it: "horizon", "latest",
// "timestamp:2026-12-02T10:00:00Z" (RFC 3339, UTC), "sequence:<shard>:<sequence number>", or,
// for a user record of a KPL aggregate past its first, "sequence:<shard>:<sequence
// number>:<sub-sequence number>". Where a shard resumes after its checkpoint (as logged when a
// lease is taken, and as the import command prints) is "after:<shard>:<sequence number>", the
// record after that one, or "after:<shard>:<sequence number>:<n>", after the first n user
// records of that aggregate; 0 or none means the whole record was handled.
func (p Position) String() string {
	switch p.kind {
	case posHorizon:
		return "horizon"
	case posLatest:
		return "latest"
	case posTimestamp:
		return "timestamp:" + time.Unix(0, p.unixNano).UTC().Format(time.RFC3339Nano)
	case posSequence:
		if p.sub > 0 {
			return "sequence:" + p.shard + ":" + p.sequence + ":" + strconv.Itoa(p.sub)
		}
		return "sequence:" + p.shard + ":" + p.sequence
	case posAfter:
		s := "after:" + p.sequence
		if p.shard != "" {
			s = "after:" + p.shard + ":" + p.sequence
		}
		if p.sub > 0 {
			s += ":" + strconv.Itoa(p.sub)
		}
		return s
	}
	return "invalid"
}

// ParsePosition reads the String form of a Position. Anything else is an error wrapping
// ErrInvalidPosition that says what was expected.
func ParsePosition(s string) (Position, error) {
	bad := func(why string) (Position, error) {
		return Position{}, fmt.Errorf("%w %q: %s", ErrInvalidPosition, s, why)
	}
	s0 := strings.TrimSpace(s)
	switch {
	case s0 == "horizon":
		return Horizon(), nil
	case s0 == "latest":
		return Latest(), nil
	case strings.HasPrefix(s0, "timestamp:"):
		t, err := time.Parse(time.RFC3339Nano, s0[len("timestamp:"):])
		if err != nil {
			return bad("want timestamp:<RFC 3339 time>, e.g. timestamp:2026-12-02T10:00:00Z")
		}
		// AtTimestamp keeps nanoseconds since 1970 in an int64; outside its range the time
		// would wrap around to another instant.
		if t.Before(time.Unix(0, math.MinInt64)) || t.After(time.Unix(0, math.MaxInt64)) {
			return bad("timestamp must be between 1678 and 2262")
		}
		return AtTimestamp(t), nil
	case strings.HasPrefix(s0, "sequence:"), strings.HasPrefix(s0, "after:"):
		kind, rest, _ := strings.Cut(s0, ":")
		parts := strings.Split(rest, ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
			if kind == "after" {
				return bad("want after:<shard id>:<sequence number>[:<user records handled>]")
			}
			return bad("want sequence:<shard id>:<sequence number>[:<sub-sequence number>]")
		}
		shard, seq := parts[0], parts[1]
		sub := 0
		if len(parts) == 3 {
			n, err := strconv.Atoi(parts[2])
			if err != nil || n < 0 || strings.Trim(parts[2], "0123456789") != "" {
				return bad("sub-sequence number must be a non-negative decimal integer")
			}
			sub = n
		}
		if !validName(shard) {
			return bad("shard id must be 1 to 128 characters of letters, digits, '_', '.' or '-'")
		}
		if len(seq) > 128 || strings.Trim(seq, "0123456789") != "" {
			return bad("sequence number must be 1 to 128 decimal digits")
		}
		if kind == "after" {
			if strings.Trim(shard, "0123456789") == "" {
				return bad("want after:<shard id>:<sequence number>[:<user records handled>], the shard first")
			}
			return Position{kind: posAfter, shard: shard, sequence: seq, sub: sub}, nil
		}
		return AtSubSequence(shard, seq, sub), nil
	}
	return bad("want horizon, latest, timestamp:<RFC 3339 time>, sequence:<shard id>:<sequence number> or after:<shard id>:<sequence number>")
}

// iteratorInput builds the GetShardIterator request that opens shard at p.
func (p Position) iteratorInput(stream streamRef, shard string) *kinesis.GetShardIteratorInput {
	in := &kinesis.GetShardIteratorInput{StreamName: stream.streamName(), StreamARN: stream.streamARN(), ShardId: aws.String(shard)}
	switch p.kind {
	case posHorizon:
		in.ShardIteratorType = types.ShardIteratorTypeTrimHorizon
	case posTimestamp:
		in.ShardIteratorType = types.ShardIteratorTypeAtTimestamp
		in.Timestamp = aws.Time(time.Unix(0, p.unixNano))
	case posSequence:
		in.ShardIteratorType = types.ShardIteratorTypeAtSequenceNumber
		in.StartingSequenceNumber = aws.String(p.sequence)
	case posAfter:
		in.ShardIteratorType = types.ShardIteratorTypeAfterSequenceNumber
		if p.sub > 0 {
			// Inside an aggregate: open at it, and the reader skips its handled user records.
			in.ShardIteratorType = types.ShardIteratorTypeAtSequenceNumber
		}
		in.StartingSequenceNumber = aws.String(p.sequence)
	default:
		in.ShardIteratorType = types.ShardIteratorTypeLatest
	}
	return in
}
