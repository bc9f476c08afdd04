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

// startInput picks where a shard's new reader opens. An installed stream-wide position comes
// first, once per shard; then the checkpoint (or a position marker a previous owner left); a
// shard without one opens at the oldest record when a parent was read to its end here (so
// nothing after a reshard is skipped), and at the initial position otherwise: by default the
// tip as of Subscribe, so that nothing published after Subscribe was called is skipped however
// late the shard's reader opens. Called with the table's lock held.
func (t *shardTable) startInput(id string, cp lease.Checkpoint, initial Position) Position {
	if in := t.installed; in != nil && t.applied[id] != in.epoch {
		t.applied[id] = in.epoch
		return in.later
	}
	switch seq := cp.Sequence; {
	case seq == lease.TrimHorizon:
		return Horizon()
	case strings.HasPrefix(seq, lease.AtTimestampPrefix):
		if ms, err := strconv.ParseInt(seq[len(lease.AtTimestampPrefix):], 10, 64); err == nil {
			return AtTimestamp(time.UnixMilli(ms))
		}
	case seq != "":
		return Position{kind: posAfter, sequence: seq, sub: int(max(cp.SubSequence, 0))}
	}
	if in := t.installed; in != nil {
		return in.later
	}
	for _, p := range t.listing[id].parents {
		if t.finished[p] {
			return Horizon()
		}
	}
	return initial
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
