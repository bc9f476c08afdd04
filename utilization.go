package kinesub

import (
	"math"
	"sync"
	"time"
)

// Utilization is the share of time the consumer was busy over the load's window (load.go): not
// waiting for records. It is what the fleet's size is planned from (scale.go). A consumer that
// keeps up waits for records most of the time (utilization near 0); one that cannot keep up
// always has records waiting for it (near 1). For a single consumer this is the time its queue
// is not empty, which for a queue fed at random is its load (M/M/1: P(busy) = ρ).
//
// The meter is told of the consumer's transitions only, never of a record: a wait for records
// that blocks reads the clock as it starts and as it ends, and that is all.
//   - All and Batches: the consumer waits while its pull blocks on an empty hand-off.
//   - Messages: the consumer waits once the dispatcher has nothing left to send (the channel
//     has no buffer: the consumer has received everything). The dispatcher cannot see the
//     consumer finish with the record it took last: that handling counts as waiting. So with
//     Messages the utilization reads low while records come a few at a time to a consumer that
//     takes long over each.
//   - Process: its WithConcurrency workers are the consumer; a worker is busy while it runs
//     handlers (the times it reads around each run anyway), so the utilization is the mean
//     share of workers busy.
//
// While no consumer pulls (before the first, between two pull loops), the consumer counts as
// busy: whatever was fetched waits for it.

// utilSlot is the consumer's time in one slot (window/4 long), in server-nanoseconds: the
// consumer's capacity (one server, or WithConcurrency workers) and the part of it idle.
type utilSlot struct {
	slot      int64
	idle, cap int64
}

// utilMeter measures a consumer's utilization. It is safe for concurrent use.
type utilMeter struct {
	base  time.Time // the origin of the meter's monotonic times
	width int64     // a slot's length in nanoseconds

	mu      sync.Mutex
	servers int   // the consumer's capacity: 1, or Process's workers
	idle    int   // servers waiting for records now
	last    int64 // when servers or idle last changed (ns since base)
	slots   [meterSlots]utilSlot
}

func newUtilMeter(now time.Time, window time.Duration) *utilMeter {
	return &utilMeter{base: now, width: max(int64(window/4), 1), servers: 1}
}

// set notes that from at on the consumer has servers servers, idle of them waiting for
// records. A time before the last change counts as that change's (two goroutines may note
// times read a moment apart in the other order).
func (m *utilMeter) set(servers, idle int, at time.Time) {
	if m == nil {
		return
	}
	t := at.Sub(m.base).Nanoseconds()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.accrue(t)
	m.servers, m.idle = servers, min(max(idle, 0), servers)
}

// waiting notes that the single consumer started (true) or stopped waiting for records.
func (m *utilMeter) waiting(w bool) {
	if m == nil {
		return
	}
	idle := 0
	if w {
		idle = 1
	}
	m.set(1, idle, time.Now())
}

// accrue adds the time from the last change to t, at the current servers and idle, to the
// slots. Called with mu held.
func (m *utilMeter) accrue(t int64) {
	from := max(m.last, t-meterSlots*m.width) // older than the slots kept: nobody reads it
	for from < t {
		slot := from / m.width
		end := min((slot+1)*m.width, t)
		sl := &m.slots[slot%meterSlots]
		if sl.slot != slot {
			*sl = utilSlot{slot: slot}
		}
		sl.idle += int64(m.idle) * (end - from)
		sl.cap += int64(m.servers) * (end - from)
		from = end
	}
	m.last = max(m.last, t)
}

// utilization returns the share of the consumer's capacity that was busy over the last window
// to now (the four slots before the current one, and the current one so far), from 0 to 1.
func (m *utilMeter) utilization(now time.Time) float64 {
	if m == nil {
		return 0
	}
	t := now.Sub(m.base).Nanoseconds()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.accrue(t)
	first := t/m.width - 4
	var idle, capacity int64
	for _, sl := range m.slots {
		if sl.slot >= first {
			idle += sl.idle
			capacity += sl.cap
		}
	}
	if capacity <= 0 {
		return 0
	}
	return min(max(1-float64(idle)/float64(capacity), 0), 1)
}

// perMille returns u in thousandths, as the load note carries it.
func perMille(u float64) int64 { return int64(math.Round(min(max(u, 0), 1) * 1000)) }
