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

// startInput picks where a shard's new reader opens, and reports whether the shard passes that
// position on to its children once read to its end (a stream-wide start; see childStart). An
// installed stream-wide position comes first, once per shard; then the checkpoint (or a
// position marker a previous owner left). A shard without either opens at the initial
// position (WithInitialPosition; by default the tip as of Subscribe, so that nothing
// published after Subscribe was called is skipped however late the shard's reader opens),
// except the child of a finished parent, which opens where its parents say (childStart).
//
// A shard opened at a stream-wide instant (the initial position, a position passed on by its
// parents, or the marker of an instant a previous owner opened it at), and read from there to
// its end with no seek moving it, passes that instant on: its SHARD_END write records it (endCheckpoint), so that its
// children open there whichever instance of the application takes them. Every record of a
// child arrived after its parent closed, so when the parent closed after that instant the
// child opens at its oldest record anyway, and when it closed before, what the child holds
// from before the instant is history the application never asked for: a new application on
// a stream split last week does not replay the children's week, whichever instance read the
// parent, and an instance that joins or restarts later opens the child at the instant the
// application started at, not at its own Subscribe.
//
// The rule for a child without checkpoint, parent by parent:
//
//   - a parent whose SHARD_END records an instant passes it on;
//   - a parent whose SHARD_END records none (read from a checkpoint, moved by a seek, opened at
//     its oldest record, or finished by an earlier version of this library) makes the child
//     open at its oldest record: nothing after the reshard is skipped;
//   - a parent not known to be finished (trimmed, its row deleted) gates nothing.
//
// With several parents (a merge), one of the second kind is enough for the oldest record;
// otherwise the child opens at the earliest instant passed on. Without a finished parent it
// opens at the initial position. Called with the table's lock held.
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
			return AtTimestamp(time.UnixMilli(ms)), true
		}
	case seq != "":
		return Position{kind: posAfter, shard: id, sequence: seq, sub: int(max(cp.SubSequence, 0))}, false
	}
	if in := t.installed; in != nil {
		return in.later, false
	}
	var from Position
	for _, p := range t.listing[id].parents {
		if !t.finished[p] {
			continue
		}
		at, ok := childStart(t.endOf(p))
		if !ok {
			return Horizon(), false
		}
		if from.IsZero() || at.unixNano < from.unixNano {
			from = at
		}
	}
	if !from.IsZero() {
		return from, true
	}
	return initial, true
}

// endOf returns the SHARD_END checkpoint of finished shard id: as its lease row showed it, or
// as a life here wrote it, when no listing showed it yet. A zero Checkpoint when neither is
// known (the row, taken and found finished, was not listed since): its children open at
// their oldest record. Called with the table's lock held.
func (t *shardTable) endOf(id string) lease.Checkpoint {
	if cp := t.leases[id].Checkpoint; cp.Sequence == lease.ShardEnd {
		return cp
	}
	if w := t.workers[id]; w != nil {
		if cp := w.shown.Load(); cp != nil && cp.Sequence == lease.ShardEnd {
			return *cp
		}
	}
	return t.shardEnds[id]
}

// endCheckpoint is the SHARD_END checkpoint of shard w, read to its end: with the instant its
// children open at as its sub-sequence (milliseconds since the epoch) when w opened at a
// stream-wide instant it passes on (startInput) and no seek moved it since. A sub-sequence
// says nothing else of SHARD_END, and a library that does not know this reads the row as
// SHARD_END all the same (its children then open at their oldest record). An instant at or
// before the epoch is not recorded: every record arrived after it.
func (w *worker) endCheckpoint() lease.Checkpoint {
	end := lease.Checkpoint{Sequence: lease.ShardEnd}
	if w.fromStart.Load() && w.start.kind == posTimestamp {
		end.SubSequence = max(time.Unix(0, w.start.unixNano).UnixMilli(), 0)
	}
	return end
}

// childStart returns the instant a shard's SHARD_END checkpoint end passes on to its children,
// or false when it passes none: the children open at their oldest record.
func childStart(end lease.Checkpoint) (Position, bool) {
	if end.Sequence != lease.ShardEnd || end.SubSequence <= 0 {
		return Position{}, false
	}
	return AtTimestamp(time.UnixMilli(end.SubSequence)), true
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
