// Package chaoslog is the line format that chaos consumers write and the chaos driver reads:
// one line per delivered record, one per acknowledged record and one per lease event, each
// stamped with the wall clock in nanoseconds and the writer's owner name, tab-separated.
//
//	D <unix ns> <owner> <shard> <sequence> <partition key> <quoted payload>
//	A <unix ns> <owner> <shard> <sequence>
//	E <unix ns> <owner> <message> <JSON object of string attributes>
package chaoslog

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Line kinds.
const (
	Delivery = 'D'
	Ack      = 'A'
	Event    = 'E'
)

// Writer appends lines to one log file. Deliveries are buffered until Flush; events are
// written through at once. It is safe for concurrent use.
type Writer struct {
	mu    sync.Mutex
	f     *os.File
	b     *bufio.Writer
	owner string
}

// Create opens path for appending (creating it) as owner's log.
func Create(path, owner string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Writer{f: f, b: bufio.NewWriterSize(f, 256<<10), owner: owner}, nil
}

// Delivery buffers the line of one delivered record.
func (w *Writer) Delivery(shard, seq, key string, payload []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(w.b, "D\t%d\t%s\t%s\t%s\t%s\t%s\n", time.Now().UnixNano(), w.owner, shard, seq, key, strconv.Quote(string(payload)))
}

// Ack buffers the line of a record whose Ack returned nil. Like deliveries, it reaches the
// file at the next Flush or Event: a process killed before then may have acknowledged records
// its log does not show.
func (w *Writer) Ack(shard, seq string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(w.b, "A\t%d\t%s\t%s\t%s\n", time.Now().UnixNano(), w.owner, shard, seq)
}

// Event writes an event line, and every buffered line before it, to the file.
func (w *Writer) Event(msg string, attrs map[string]string) error {
	js, err := json.Marshal(attrs)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(w.b, "E\t%d\t%s\t%s\t%s\n", time.Now().UnixNano(), w.owner, strings.ReplaceAll(msg, "\t", " "), js)
	return w.b.Flush()
}

// Flush hands every buffered line to the operating system, so that it survives the process
// being killed. A record may be acknowledged only once its line is flushed.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Flush()
}

// Close flushes and closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return errors.Join(w.b.Flush(), w.f.Close())
}

// Line is one parsed log line.
type Line struct {
	Kind  byte
	Time  time.Time
	Owner string

	// Delivery lines; Ack lines have Shard and Seq.
	Shard, Seq, Key, Payload string

	// Event lines.
	Msg   string
	Attrs map[string]string
}

// Parse reads one line (without its newline).
func Parse(s string) (Line, error) {
	f := strings.Split(s, "\t")
	if len(f) < 3 || len(f[0]) != 1 {
		return Line{}, fmt.Errorf("chaoslog: malformed line %q", s)
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return Line{}, fmt.Errorf("chaoslog: bad time in %q", s)
	}
	l := Line{Kind: f[0][0], Time: time.Unix(0, ns), Owner: f[2]}
	switch l.Kind {
	case Delivery:
		if len(f) != 7 {
			return Line{}, fmt.Errorf("chaoslog: malformed delivery %q", s)
		}
		l.Shard, l.Seq, l.Key = f[3], f[4], f[5]
		if l.Payload, err = strconv.Unquote(f[6]); err != nil {
			return Line{}, fmt.Errorf("chaoslog: bad payload in %q", s)
		}
	case Ack:
		if len(f) != 5 {
			return Line{}, fmt.Errorf("chaoslog: malformed ack %q", s)
		}
		l.Shard, l.Seq = f[3], f[4]
	case Event:
		if len(f) != 5 {
			return Line{}, fmt.Errorf("chaoslog: malformed event %q", s)
		}
		l.Msg = f[3]
		if err := json.Unmarshal([]byte(f[4]), &l.Attrs); err != nil {
			return Line{}, fmt.Errorf("chaoslog: bad attributes in %q", s)
		}
	default:
		return Line{}, fmt.Errorf("chaoslog: unknown line kind in %q", s)
	}
	return l, nil
}
