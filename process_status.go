package kinesub

import "time"

// FailingRecord is the record of a shard that has been failing longest in Process, as Shards
// shows it (ShardStatus.Failing): its key waits behind it, and the shard's checkpoint cannot
// pass it. A record that keeps failing stops its shard once WithMaxInFlight records are
// behind it, so an operator should look at one whose Since is old.
type FailingRecord struct {
	SequenceNumber    string    `json:"sequence_number"`
	SubSequenceNumber int       `json:"sub_sequence_number,omitempty"` // within a KPL aggregate
	OrderKey          string    `json:"order_key"`
	Attempts          int       `json:"attempts"`   // failed so far
	Since             time.Time `json:"since"`      // its first failure
	LastError         string    `json:"last_error"` // of its last attempt
	// Exhausted: it used WithMaxAttempts and there is no dead-letter function to take it, so
	// it is tried again at the maximum backoff until it succeeds.
	Exhausted bool `json:"exhausted,omitempty"`
	// Failing counts the shard's records failing now, this one included: one per key held up.
	Failing int `json:"failing"`
}

// maxLastError bounds FailingRecord.LastError.
const maxLastError = 1024

// publish shows the longest-failing record of shard w in its status. Called with p.mu held.
func (p *processor) publish(l *lane, w *worker) {
	if w == nil {
		return
	}
	var oldest *job
	n := 0
	for _, j := range l.failing {
		if j.m.shard() != w {
			continue
		}
		if n++; oldest == nil {
			oldest = j // l.failing is in order of first failure
		}
	}
	if oldest == nil {
		w.setProcessStatus(nil)
		delete(p.shown, w) // nothing to clear when Process returns: shown stays bounded
		return
	}
	m, of := oldest.m, p.fails[oldest]
	f := &FailingRecord{
		SequenceNumber: m.SequenceNumber(), SubSequenceNumber: m.SubSequenceNumber(), OrderKey: oldest.q.key,
		Attempts: of.attempts, Since: of.since,
		Exhausted: p.cfg.deadLetter == nil && p.cfg.maxAttempts > 0 && of.attempts >= p.cfg.maxAttempts,
		Failing:   n,
	}
	if of.failErr != nil {
		f.LastError = of.failErr.Error()
		if len(f.LastError) > maxLastError { // a panic's carries its stack
			f.LastError = f.LastError[:maxLastError] + "…"
		}
	}
	w.setProcessStatus(f)
	p.shown[w] = true
}

// unfail takes a finished job off its shard's failing records. Called with p.mu held.
func (p *processor) unfail(j *job) {
	l := j.q.lane
	for i, f := range l.failing {
		if f == j {
			l.failing = append(l.failing[:i], l.failing[i+1:]...)
			break
		}
	}
	p.publish(l, j.m.shard())
}

// unpublish clears what Process showed in Shards, when it returns: nothing is retried any more.
// Called with p.mu held.
func (p *processor) unpublish() {
	for w := range p.shown {
		w.setProcessStatus(nil)
	}
	clear(p.shown)
}
