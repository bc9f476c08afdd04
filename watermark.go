package kinesub

// watermark tracks one shard's deliveries in fetch order and finds the highest sequence number
// below which every delivery has been handled: the checkpoint. Deliveries are numbered with a
// monotonic index instead of comparing the service's 128-bit decimal sequence numbers.
//
// Acks may come in any order; the watermark advances over the contiguous handled prefix only,
// so one unhandled delivery holds it (and everything after it replays on the next lease).
// A watermark is not safe for concurrent use; its worker guards it.
type watermark struct {
	base    uint64 // index of pending[0]
	pending []slot // deliveries from base on, in fetch order
	head    int    // pending[:head] were handled and popped (compacted lazily)
	settled int    // handled deliveries still behind an unhandled one
	mark    string // checkpoint once the prefix is handled: a sequence number…
	markSub int    // …and, inside a KPL aggregate, how many of its user records are handled
	bytes   int    // sizes of pending[head:], what unsettled counts
	// fetched notes when each page was tracked: its first index and the time, oldest first,
	// trimmed to the pages that still hold unhandled deliveries.
	fetched []fetchMark
}

// fetchMark is when the deliveries from index first on were fetched (Unix ns).
type fetchMark struct {
	first uint64
	at    int64
}

// A slot's seq and sub are the checkpoint that its delivery, once handled with every one
// before it, moves the watermark to: (sequence number, 0) for a whole record, and for a user
// record of a KPL aggregate that is not its last, (the aggregate's sequence number, how many
// of its user records that makes handled).
type slot struct {
	seq     string
	sub     int32 // user records of an aggregate: far fewer than 2^31
	size    int32 // bytes of one record: at most 1 MiB
	handled bool
}

// track registers a delivery carrying size bytes, whose handling moves the checkpoint to
// (seq, sub), and returns its index.
func (w *watermark) track(seq string, sub, size int) uint64 {
	w.pending = append(w.pending, slot{seq: seq, sub: int32(sub), size: int32(size)})
	w.bytes += size
	return w.base + uint64(len(w.pending)-1)
}

// trackAll registers deliveries fetched at instant at (Unix ns), in order, as track does one,
// and returns the index of the first: one append for a page instead of one per record.
func (w *watermark) trackAll(slots []slot, at int64) uint64 {
	first := w.base + uint64(len(w.pending))
	if len(slots) > 0 {
		w.fetched = append(w.fetched, fetchMark{first: first, at: at})
	}
	w.pending = append(w.pending, slots...)
	for i := range slots {
		w.bytes += int(slots[i].size)
	}
	return first
}

// settle marks delivery idx handled. It reports whether the watermark advanced; the new
// checkpoint is then w.mark. An index never tracked, or already handled, changes nothing.
func (w *watermark) settle(idx uint64) bool {
	if idx < w.base || idx-w.base >= uint64(len(w.pending)) {
		return false
	}
	i := int(idx - w.base)
	if i < w.head || w.pending[i].handled {
		return false
	}
	w.pending[i].handled = true
	if i != w.head {
		w.settled++
		return false
	}
	for w.head < len(w.pending) && w.pending[w.head].handled {
		w.bytes -= int(w.pending[w.head].size)
		w.head++
		if w.head-1 != i {
			w.settled--
		}
	}
	last := &w.pending[w.head-1]
	w.mark, w.markSub = last.seq, int(last.sub)
	w.trimFetched()
	w.compact()
	return true
}

// trimFetched drops the notes of pages whose deliveries are all handled.
func (w *watermark) trimFetched() {
	oldest := w.base + uint64(w.head)
	n := 0
	for n+1 < len(w.fetched) && w.fetched[n+1].first <= oldest {
		n++
	}
	if n > 0 {
		w.fetched = append(w.fetched[:0], w.fetched[n:]...)
	}
}

// oldest returns the checkpoint value of the oldest unhandled delivery (its sequence number)
// and when it was fetched, or false when every delivery is handled.
func (w *watermark) oldest() (seq string, at int64, ok bool) {
	if w.head == len(w.pending) {
		return "", 0, false
	}
	w.trimFetched()
	if len(w.fetched) > 0 {
		at = w.fetched[0].at
	}
	return w.pending[w.head].seq, at, true
}

// compact drops the popped prefix once it is at least half of the slice, so the slice's
// memory follows the number of unhandled deliveries rather than the number ever tracked.
func (w *watermark) compact() {
	if w.head == len(w.pending) {
		// The popped slots are not cleared: what they hold is a few sequence numbers, bounded by
		// the in-flight cap, and overwritten by the next deliveries.
		w.base += uint64(w.head)
		w.pending = w.pending[:0]
		w.head = 0
		return
	}
	if w.head >= 1024 && w.head*2 >= len(w.pending) {
		n := copy(w.pending, w.pending[w.head:])
		clear(w.pending[n:])
		w.pending = w.pending[:n]
		w.base += uint64(w.head)
		w.head = 0
	}
}

// inFlight is the number of tracked deliveries not yet handled.
func (w *watermark) inFlight() int { return len(w.pending) - w.head - w.settled }

// unsettled is the number of deliveries between the watermark and the newest tracked one,
// handled or not: what keeps the watermark from reaching the newest delivery.
func (w *watermark) unsettled() int { return len(w.pending) - w.head }
