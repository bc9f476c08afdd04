package publish

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Write limits of one shard, which the service enforces per second.
const (
	ShardRecordsPerSecond = 1000
	ShardBytesPerSecond   = 1 << 20 // data plus partition keys
)

// shardPacer paces the writes to one shard, for every call of a publisher: token buckets like
// the service's (a second's worth, refilled continuously), so that a burst is sent at the pace
// the shard takes it instead of being refused; a pause after a refusal; and when the shard last
// wrote a record. Safe for concurrent use.
type shardPacer struct {
	records *rate.Limiter
	bytes   *rate.Limiter

	mu          sync.Mutex
	resume      time.Time // nothing is sent before, after a refusal
	refusals    int       // refusals in a row: the next pause grows with them
	lastRefusal time.Time // when the last one counted was known
	lastWrite   time.Time
	last        time.Time // the latest time the limiters were read at
}

// PacerHeadStart is how much of a new pacer's first second is booked before it is used. The
// first calls of a burst travel slower than the next ones (a new connection's TLS handshake,
// the encoding of the burst's first megabytes), and a shard's bucket that was full does not
// fill further meanwhile: the service counts its second from when the first call arrives,
// the pacer from when it let it go, and without a head start the service would refuse what
// the pacer lets through a little later. A refusal costs more than the head start: the
// records refused are booked again.
const PacerHeadStart = 250 * time.Millisecond

func newShardPacer() *shardPacer {
	p := &shardPacer{
		records: rate.NewLimiter(ShardRecordsPerSecond, ShardRecordsPerSecond),
		bytes:   rate.NewLimiter(ShardBytesPerSecond, ShardBytesPerSecond),
	}
	p.last = time.Now()
	p.records.ReserveN(p.last, int(ShardRecordsPerSecond*PacerHeadStart/time.Second))
	p.bytes.ReserveN(p.last, int(ShardBytesPerSecond*PacerHeadStart/time.Second))
	return p
}

// newUnlimitedPacer paces nothing: for records whose shard is not known, and so whose limits
// are not either. Refusals still pause it.
func newUnlimitedPacer() *shardPacer {
	return &shardPacer{records: rate.NewLimiter(rate.Inf, 0), bytes: rate.NewLimiter(rate.Inf, 0)}
}

// reservation is room booked in a pacer for a group of records, from at on.
type reservation struct {
	records, bytes *rate.Reservation
	at             time.Time
}

// reserve books n records of size bytes (data plus partition keys) and returns when they may
// be sent. Bookings queue in the order they are made, so concurrent calls take turns. n and
// size never exceed a second's worth: groups are built to fit.
func (p *shardPacer) reserve(now time.Time, n, size int) reservation {
	p.mu.Lock()
	defer p.mu.Unlock()
	now = p.clock(now)
	r := reservation{records: p.records.ReserveN(now, n), bytes: p.bytes.ReserveN(now, size)}
	// Rounded up to the millisecond: the limiter truncates its delay to the nanosecond, and a
	// send a nanosecond early finds the service's bucket a few bytes short.
	d := max(r.records.DelayFrom(now), r.bytes.DelayFrom(now))
	if rem := d % time.Millisecond; rem != 0 {
		d += time.Millisecond - rem
	}
	r.at = now.Add(d)
	if r.at.Before(p.resume) {
		r.at = p.resume
	}
	return r
}

// clock returns now, or the latest time the limiters were read at when now is earlier: they
// must never be read at a time earlier than their last, or they would count the time between
// twice and hand out room the shard does not have. Concurrent calls read the time before they
// take the lock, so their times arrive out of order. The caller holds p.mu.
func (p *shardPacer) clock(now time.Time) time.Time {
	if now.Before(p.last) {
		return p.last
	}
	p.last = now
	return now
}

// cancel gives back what r booked in p, as far as it is still in the future.
func (p *shardPacer) cancel(r reservation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock(time.Now())
	r.records.CancelAt(now)
	r.bytes.CancelAt(now)
}

// resumeAt is when the shard may be sent to again after a refusal.
func (p *shardPacer) resumeAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resume
}

// refused notes the refusal of a call sent at sent, and pauses the shard for backoff(n) after
// the n+1-th refusal in a row (with no record written in between). Calls that were sent before
// the last refusal was known are the same episode, and count once. A throttle right after a
// write does not pause the shard: records go out at the pace the shard takes them, and the
// service's clock and ours never agree to the millisecond, so a throttle now and then is
// expected; the records refused are booked again in the pacer, which leaves the service that
// much more room. A shard that throttles again before writing anything is refusing because
// others write to it too: it waits.
func (p *shardPacer) refused(sent time.Time, throttled bool, backoff func(n int) time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sent.Before(p.lastRefusal) {
		return
	}
	now := time.Now()
	p.lastRefusal = now
	n := p.refusals
	p.refusals++
	if throttled {
		if n == 0 {
			return
		}
		n--
	}
	if at := now.Add(backoff(n)); at.After(p.resume) {
		p.resume = at
	}
}

// wrote notes a record written to the shard.
func (p *shardPacer) wrote(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusals = 0
	if now.After(p.lastWrite) {
		p.lastWrite = now
	}
}

// lastWritten is when the shard last wrote a record of this publisher (zero: never).
func (p *shardPacer) lastWritten() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastWrite
}
