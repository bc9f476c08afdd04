package kinesistest

import (
	"encoding/json"
	"time"
)

// Per-shard throughput limits of the service, enforced under WithLimits.
const (
	readCallsPerSecond    = 5
	readBytesPerSecond    = 2 << 20
	writeBytesPerSecond   = 1 << 20
	writeRecordsPerSecond = 1000
)

// shardLimits counts one shard's use against the service's limits, on the server's clock. The
// Server's mutex guards it.
type shardLimits struct {
	calls [readCallsPerSecond]time.Time // the last GetRecords calls, a ring
	next  int

	started    bool
	readBytes  float64 // may go negative: a large answer throttles the calls after it
	writeBytes float64
	writeRecs  float64
	last       time.Time
}

// refill adds what the time since the last call earned, up to a second's worth.
func (l *shardLimits) refill(now time.Time) {
	if !l.started {
		l.started = true
		l.readBytes, l.writeBytes, l.writeRecs, l.last = readBytesPerSecond, writeBytesPerSecond, writeRecordsPerSecond, now
		return
	}
	dt := now.Sub(l.last).Seconds()
	if dt <= 0 {
		return
	}
	l.last = now
	l.readBytes = min(readBytesPerSecond, l.readBytes+dt*readBytesPerSecond)
	l.writeBytes = min(writeBytesPerSecond, l.writeBytes+dt*writeBytesPerSecond)
	l.writeRecs = min(writeRecordsPerSecond, l.writeRecs+dt*writeRecordsPerSecond)
}

// readCall reports whether a GetRecords call may go ahead now, and counts it if so.
func (l *shardLimits) readCall(now time.Time) bool {
	l.refill(now)
	if oldest := l.calls[l.next]; !oldest.IsZero() && now.Sub(oldest) < time.Second {
		return false
	}
	if l.readBytes < 0 {
		return false
	}
	l.calls[l.next] = now
	l.next = (l.next + 1) % len(l.calls)
	return true
}

// read counts the bytes a GetRecords answer carried.
func (l *shardLimits) read(size int, now time.Time) {
	l.refill(now)
	l.readBytes -= float64(size)
}

// write reports whether a record of size bytes may be written now, and counts it if so.
func (l *shardLimits) write(size int, now time.Time) bool {
	l.refill(now)
	if l.writeRecs < 1 || l.writeBytes < float64(size) {
		return false
	}
	l.writeRecs--
	l.writeBytes -= float64(size)
	return true
}

func appendJSON(buf []byte, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only the server's own types reach here
	}
	return append(buf, b...)
}
