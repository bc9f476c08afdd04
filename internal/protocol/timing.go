package protocol

import "time"

// The protocol's timing rules, each a fraction of the lease TTL, defined here once
// (docs/leases.md has the argument that ties them together). Every duration is measured on
// one host's monotonic clock; host clocks may be offset by any amount, and their rates must
// agree to within TTL/12 over a TTL.

// HandOutFor is how long after the send of the last renewal known to have landed, and after
// the send of the last confirmation, records may still be handed out (the deadline: 2/3 TTL).
func HandOutFor(ttl time.Duration) time.Duration { return ttl * 2 / 3 }

// StealWait is how long a thief waits, after a change-row move known to follow its steal,
// before it binds and reads the lease: the victim stops HandOutFor after the first such move,
// and TTL/12 covers the hosts' clock rates and the victim's scheduling.
func StealWait(ttl time.Duration) time.Duration { return ttl*2/3 + ttl/12 }

// ReapAfter is how long a heartbeat row's counter must have stood still, since a peer first
// read it, before the peer takes the row over: the owner stopped handing out HandOutFor after
// sending the renewal that set it, which was before that read.
func ReapAfter(ttl time.Duration) time.Duration { return StealWait(ttl) }

// SilentAfter is how long a row's counter stands still before its owner counts as having
// missed a renewal: lapsed, out of the fair share, and its pending leases' wait started.
func SilentAfter(ttl time.Duration) time.Duration { return ttl / 2 }

// RenewEvery is the renewal period of the heartbeat row, and how often a watcher reads each
// row it watches.
func RenewEvery(ttl time.Duration) time.Duration { return ttl / 3 }

// LeasePoll is the longest wait before a released lease is noticed: the change row is read at
// least this often.
const LeasePoll = time.Second

// ClaimTick is how often the change row is read (and the table when it moved): the shortest
// of the shard-sync interval, RenewEvery and LeasePoll.
func ClaimTick(shardSync, ttl time.Duration) time.Duration {
	return min(shardSync, RenewEvery(ttl), LeasePoll)
}

// WatchedPeers is how many live owners each instance watches (the next ones by name).
const WatchedPeers = 2
