package kinesub

import (
	"strconv"
	"strings"
	"time"

	"github.com/gostream/kinesub/lease"
)

// tipSkew is how far back a position at "now" reaches, for the clock offset between this
// host and the service, which stamps each record's arrival: a few records may be delivered
// that arrived just before, none after is skipped.
const tipSkew = 5 * time.Second

// install is a stream-wide position installed by WithStartAt or Seek: every shard this
// subscriber opens after it opens there, once. A shard born after the install holds only
// records that arrived after it, and so opens at its oldest record.
type install struct {
	pos   Position // what the readers reading at the install reopen at
	later Position // what shards opened later open at: pos, with the tip as of the install
	epoch uint64
}

// newInstall installs p at instant now.
func newInstall(p Position, epoch uint64, now time.Time) *install {
	return &install{pos: p, later: pinTip(p, now), epoch: epoch}
}

// pinTip returns p, with the tip (Latest) pinned to instant now: a shard opened later at the
// tip would skip what arrived in between.
func pinTip(p Position, now time.Time) Position {
	if p.kind == posLatest {
		return AtTimestamp(now.Add(-tipSkew))
	}
	return p
}

// startInput picks where a shard's new reader opens, and reports whether that is the
// initial position. An installed stream-wide position comes first, once per shard; then the
// checkpoint (or a position marker a previous owner left). A shard without either opens at
// the initial position (WithInitialPosition; by default the tip as of Subscribe, so that
// nothing published after Subscribe was called is skipped however late the shard's reader
// opens), except the child of a parent this application read to its end from a checkpoint or
// from the oldest record: that child opens at its oldest record, so that nothing after the
// reshard is skipped.
//
// The rule for a child without checkpoint, parent by parent:
//
//   - a parent this subscriber read to its end after opening it at the initial position
//     (it had no checkpoint: a new application, or a shard it never held) passes the initial
//     position on. Every record of the child arrived after the parent closed, so when the
//     parent closed after that position the child opens at its oldest record anyway, and when
//     it closed before, what the child holds from before the position is history the
//     application never asked for: a new application on a stream split last week does not
//     replay the children's week.
//   - a parent whose lease shows SHARD_END, read by this application from a checkpoint, or by
//     another instance or an earlier process of it from where it cannot tell, makes the child
//     open at its oldest record: nothing read to its end is skipped. After a restart, the
//     child of a parent that ended before the child was first opened is therefore read from
//     its oldest record.
//   - a parent gone from the listing (trimmed) gates nothing.
//
// With several parents (a merge), one of the second kind is enough for the oldest record.
// Called with the table's lock held.
func (t *shardTable) startInput(id string, cp lease.Checkpoint, initial Position) (Position, bool) {
	if in := t.installed; in != nil && t.applied[id] != in.epoch {
		t.applied[id] = in.epoch
		return in.later, false
	}
	switch seq := cp.Sequence; {
	case seq == lease.TrimHorizon:
		return Horizon(), false
	case strings.HasPrefix(seq, lease.AtTimestampPrefix):
		if ms, err := strconv.ParseInt(seq[len(lease.AtTimestampPrefix):], 10, 64); err == nil {
			return AtTimestamp(time.UnixMilli(ms)), false
		}
	case seq != "":
		return Position{kind: posAfter, shard: id, sequence: seq, sub: int(max(cp.SubSequence, 0))}, false
	}
	if in := t.installed; in != nil {
		return in.later, false
	}
	for _, p := range t.listing[id].parents {
		if !t.finished[p] {
			continue
		}
		// The parent's worker is forgotten only after its SHARD_END was written, which a
		// listing may show first: until then its own flag says how it was read.
		from := t.fromStart[p]
		if w := t.workers[p]; w != nil {
			from = w.fromStart.Load()
		}
		if !from {
			return Horizon(), false
		}
	}
	return initial, true
}

// marker is the checkpoint value that makes a later owner open a shard where p opened it.
// The tip is recorded as an instant a little in the past (tipSkew).
func marker(p Position) string {
	switch p.kind {
	case posHorizon:
		return lease.TrimHorizon
	case posLatest:
		return lease.AtTimestampPrefix + strconv.FormatInt(time.Now().Add(-tipSkew).UnixMilli(), 10)
	case posTimestamp:
		return lease.AtTimestampPrefix + strconv.FormatInt(time.Unix(0, p.unixNano).UnixMilli(), 10)
	}
	return ""
}
