package protosim

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gostream/kinesub/internal/protocol"
)

// ShardEnd is the checkpoint of a shard read to its end (lease.ShardEnd).
const ShardEnd = "SHARD_END"

// table is the lease table: one item per key, each write applied atomically under its
// condition, as DynamoDB applies a conditional UpdateItem, and as lease.Store's doc and the
// memory store say. A write's conditions compare expiries with its sender's wall clock when
// it sent the write, and its expiry counts from there, as the DynamoDB store does. Every read
// of an item is current; only a listing may miss rows that entered the index lately.
type table struct {
	rows map[string]*trow
}

type trow struct {
	protocol.Row
	order   int64         // the last ordered checkpoint's order (counter<<32 | n); 0: none
	indexed time.Duration // when the item entered the index (was created), true time
	cpBy    protocol.Tenure
	str     string // String, once made (the explorer's hash); emptied by every write
}

func (r *trow) String() string {
	return fmt.Sprintf("%s owner=%s c=%d exp=%s cp=%s fin=%t note=%q ord=%d", r.Key, r.Owner, r.Counter,
		fmtWall(r.Expiry), r.Checkpoint, r.Finished, r.Note, r.order)
}

func newTable() *table { return &table{rows: map[string]*trow{}} }

func (t *table) clone() *table {
	c := &table{rows: make(map[string]*trow, len(t.rows))}
	for k, r := range t.rows {
		cr := *r
		c.rows[k] = &cr
	}
	return c
}

// write is one applied write, for the checker and the log.
type write struct {
	op            protocol.Op
	before, after protocol.Row
	existed       bool
	exists        bool
	cpBefore      protocol.Tenure // the holding that wrote the checkpoint before
}

// held reports whether r is held at now (the sender's wall clock): an owner with no expiry,
// or one not yet past.
func held(r protocol.Row, now time.Time) bool {
	return r.Owner != "" && (r.Expiry.IsZero() || now.Before(r.Expiry))
}

func expiry(now time.Time, ttl time.Duration) time.Time {
	if ttl == 0 {
		return time.Time{}
	}
	return time.UnixMilli(now.Add(ttl).UnixMilli())
}

// apply performs op, sent at wall instant sent, at true time at. It returns the outcome
// (Applied or Refused), the rows a read or a listing returns, and the write when one changed
// an item. lag leaves out of a listing the rows created less than lag before at.
func (t *table) apply(op protocol.Op, sent time.Time, at, lag time.Duration) (protocol.Outcome, []protocol.Row, *write) {
	r, ok := t.rows[op.Key]
	switch op.Kind {
	case protocol.OpList:
		var out []protocol.Row
		for k, r := range t.rows {
			if strings.HasPrefix(k, op.Key) && r.indexed <= at-lag {
				out = append(out, r.Row)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
		return protocol.Applied, out, nil
	case protocol.OpRead:
		if !ok {
			return protocol.Applied, []protocol.Row{{Key: op.Key}}, nil
		}
		return protocol.Applied, []protocol.Row{r.Row}, nil
	}
	w := &write{op: op, existed: ok}
	if ok {
		r.str = ""
		w.before, w.cpBefore = r.Row, r.cpBy
	} else {
		r = &trow{Row: protocol.Row{Key: op.Key}, indexed: at}
	}
	mine := ok && r.Owner == op.Owner && r.Counter == op.Counter
	switch op.Kind {
	case protocol.OpAcquire, protocol.OpCreate:
		if op.Kind == protocol.OpCreate && ok {
			return protocol.Refused, nil, nil
		}
		if r.Owner != op.Owner && held(r.Row, sent) {
			return protocol.Refused, nil, nil
		}
		r.Owner, r.Expiry = op.Owner, expiry(sent, op.TTL)
		r.Counter++
	case protocol.OpSteal:
		if !ok || r.Counter != op.Counter {
			return protocol.Refused, nil, nil
		}
		r.Owner, r.Expiry = op.Owner, expiry(sent, op.TTL)
		r.Counter++
		r.Note = op.Note // StealNote
	case protocol.OpRelease:
		if !mine {
			return protocol.Refused, nil, nil
		}
		r.Owner, r.Expiry = "", time.Time{}
		r.Counter++
	case protocol.OpCheckpoint:
		if !mine {
			return protocol.Refused, nil, nil
		}
		if op.Order == 0 {
			r.order = 0
		} else if o := op.Counter<<32 | op.Order; o >= r.order {
			r.order = o
		} else {
			return protocol.Applied, nil, nil // a newer write of the holding stands
		}
		r.Checkpoint, r.Finished = op.Checkpoint, op.Finished || op.Checkpoint == ShardEnd
		r.cpBy = protocol.Tenure{Owner: op.Owner, Counter: op.Counter}
	case protocol.OpDelete:
		if !ok || r.Counter != op.Counter || held(r.Row, sent) {
			return protocol.Refused, nil, nil
		}
		delete(t.rows, op.Key)
		return protocol.Applied, nil, w
	default:
		panic(fmt.Sprintf("protosim: unknown op kind %d", op.Kind))
	}
	if !ok {
		t.rows[op.Key] = r
	}
	w.after, w.exists = r.Row, true
	return protocol.Applied, nil, w
}

// String is the table, canonical: rows sorted by key.
func (t *table) String() string {
	keys := make([]string, 0, len(t.rows))
	for k := range t.rows {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(t.rows[k].String())
		b.WriteByte('\n')
	}
	return b.String()
}

func fmtWall(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("15:04:05.000")
}
