package protocol

import "time"

// PendingTTL is the expiry a pending lease is written with: far enough that no clock reaches
// it, so that no Acquire takes it as expired; PendingAt tells it from a real expiry. The
// stream's protocol mark (heartbeat.go in the root) is held for as long.
const PendingTTL = 100 * 365 * 24 * time.Hour

// Held reports whether an owner holds the row at now (lease.Lease.Held): one whose expiry has
// not passed, or one that took it without a TTL.
func (r Row) Held(now time.Time) bool {
	return r.Owner != "" && (r.Expiry.IsZero() || now.Before(r.Expiry))
}

// Tenure returns the holding the row records: its owner and counter.
func (r Row) Tenure() Tenure { return Tenure{Owner: r.Owner, Counter: r.Counter} }

// PendingAt reports whether r is pending at now: held with an expiry decades away.
func PendingAt(r Row, now time.Time) bool {
	return r.Owner != "" && r.Expiry.After(now.Add(PendingTTL/2))
}
