package protosim

import (
	"fmt"
	"hash"
	"hash/fnv"
	"sort"
	"strings"
	"time"

	"github.com/gostream/kinesub/internal/protocol"
)

// eventLog is a run's log: every line goes into an FNV-64a hash, and the last few are kept
// for a failure's report.
type eventLog struct {
	h     hash.Hash64
	lines int
	tail  []string
	next  int
	all   bool // keep every line (tail grows)
}

func newEventLog(tail int, all bool) *eventLog {
	return &eventLog{h: fnv.New64a(), tail: make([]string, 0, tail), all: all}
}

func (l *eventLog) add(t time.Duration, line string) {
	s := fmt.Sprintf("%12.6f %s", t.Seconds(), line)
	l.h.Write([]byte(s))
	l.h.Write([]byte{'\n'})
	l.lines++
	if l.all || len(l.tail) < cap(l.tail) {
		l.tail = append(l.tail, s)
		return
	}
	if cap(l.tail) == 0 {
		return
	}
	l.tail[l.next] = s
	l.next = (l.next + 1) % len(l.tail)
}

// Tail returns the lines kept, oldest first.
func (l *eventLog) Tail() string {
	out := append(append([]string(nil), l.tail[l.next:]...), l.tail[:l.next]...)
	return strings.Join(out, "\n")
}

func fmtOp(op protocol.Op) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s %s", op.ID, opNames[op.Kind], op.Key)
	if op.Owner != "" {
		fmt.Fprintf(&b, " owner=%s", op.Owner)
	}
	switch op.Kind {
	case protocol.OpSteal, protocol.OpRelease, protocol.OpCheckpoint, protocol.OpDelete:
		fmt.Fprintf(&b, " c=%d", op.Counter)
	}
	if op.TTL != 0 {
		fmt.Fprintf(&b, " ttl=%v", op.TTL)
	}
	if op.Note != "" {
		fmt.Fprintf(&b, " note=%q", op.Note)
	}
	if op.Kind == protocol.OpCheckpoint {
		fmt.Fprintf(&b, " cp=%s fin=%t n=%d", op.Checkpoint, op.Finished, op.Order)
	}
	return b.String()
}

var opNames = map[protocol.OpKind]string{
	protocol.OpList: "List", protocol.OpRead: "Read", protocol.OpAcquire: "Acquire", protocol.OpCreate: "Create",
	protocol.OpSteal: "Steal", protocol.OpRelease: "Release", protocol.OpCheckpoint: "Checkpoint", protocol.OpDelete: "Delete",
}

func fmtOutcome(o protocol.Outcome) string {
	switch o {
	case protocol.Applied:
		return "applied"
	case protocol.Refused:
		return "refused"
	case protocol.Unknown:
		return "unknown"
	}
	return fmt.Sprintf("outcome%d", o)
}

func fmtRow(r protocol.Row) string {
	return fmt.Sprintf("%s owner=%s c=%d exp=%s cp=%s fin=%t note=%q", r.Key, r.Owner, r.Counter, fmtWall(r.Expiry), r.Checkpoint, r.Finished, r.Note)
}

func fmtInput(in protocol.Input) string {
	switch in := in.(type) {
	case protocol.Tick:
		return "Tick"
	case protocol.Answered:
		rows := make([]string, len(in.Rows))
		for i, r := range in.Rows {
			rows[i] = fmtRow(r)
		}
		return fmt.Sprintf("Answered #%d %s [%s]", in.ID, fmtOutcome(in.Outcome), strings.Join(rows, "; "))
	case protocol.ShardsListed:
		ss := make([]string, len(in.Shards))
		for i, s := range in.Shards {
			ss[i] = s.ID
			if len(s.Parents) > 0 {
				ss[i] += "<" + strings.Join(s.Parents, "+")
			}
			if s.Closed {
				ss[i] += "(closed)"
			}
		}
		sort.Strings(ss)
		return "ShardsListed " + strings.Join(ss, " ")
	case protocol.Join:
		return fmt.Sprintf("Join %x", in.Incarnation)
	case protocol.Close:
		return "Close"
	case protocol.HandBack:
		return "HandBack " + in.Shard
	case protocol.Checkpointed:
		return fmt.Sprintf("Checkpointed %s %s fin=%t", in.Shard, in.Checkpoint, in.Finished)
	case protocol.ReaderStopped:
		return fmt.Sprintf("ReaderStopped %s fin=%t", in.Shard, in.Finished)
	}
	return fmt.Sprintf("%T%+v", in, in)
}

func fmtOutputs(outs []protocol.Output) string {
	if len(outs) == 0 {
		return "-"
	}
	s := make([]string, len(outs))
	for i, o := range outs {
		switch o := o.(type) {
		case protocol.Send:
			s[i] = "Send " + fmtOp(o.Op)
		case protocol.StartReading:
			s[i] = fmt.Sprintf("StartReading %s %s/%d from %q", o.Shard, o.Tenure.Owner, o.Tenure.Counter, o.Checkpoint)
		case protocol.StopReading:
			s[i] = fmt.Sprintf("StopReading %s %s/%d clean=%t (%s)", o.Shard, o.Tenure.Owner, o.Tenure.Counter, o.Clean, o.Why)
		case protocol.Arm:
			s[i] = fmt.Sprintf("Arm %v", o.At)
		case protocol.Closed:
			s[i] = "Closed"
		default:
			s[i] = fmt.Sprintf("%T%+v", o, o)
		}
	}
	return strings.Join(s, ", ")
}
