package protocol

import (
	"strconv"
	"strings"
	"time"
)

// Instances of one fleet may run with different lease TTLs: a rolling change of the TTL, or one
// service of many configured differently. Every wait that protects another owner's hand-outs
// must then count in that owner's TTL, not the waiter's: a holder hands out until HandOutFor of
// its own TTL after its last confirmation, and a peer that reaped its row after ReapAfter of a
// shorter TTL, or read a shard stolen from it after StealWait of a shorter one, would read
// while it still hands out. So each heartbeat row notes its holder's TTL (in the note its
// renewals write, from the join on), and
//
//   - a peer's row is judged by the TTL it notes (BeatSeen.TTL): silent after SilentAfter,
//     taken over after ReapAfter of that TTL;
//   - a pending lease is read StealWait of the longest TTL among this instance's and every
//     heartbeat row it has seen (Peers.LongestTTL), which includes the victim's: the victim's
//     row is read in the round that steals from it.
//
// A row that notes no TTL (an owner of a version that did not note it) is judged by the
// reader's own TTL, as before.

// ttlField starts the field of a heartbeat row's note that holds its holder's lease TTL, in
// milliseconds. Notes are space-separated fields; readers of other fields ignore it.
const ttlField = "ttl/"

// NoteTTL returns note with its holder's lease TTL added as a field of its own.
func NoteTTL(note string, ttl time.Duration) string {
	f := ttlField + strconv.FormatInt(ttl.Milliseconds(), 10)
	if note == "" {
		return f
	}
	return note + " " + f
}

// NotedTTL returns the lease TTL a heartbeat row's note gives, and false when it gives none.
func NotedTTL(note string) (time.Duration, bool) {
	for _, f := range strings.Fields(note) {
		if v, ok := strings.CutPrefix(f, ttlField); ok {
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil || ms <= 0 {
				return 0, false
			}
			return time.Duration(ms) * time.Millisecond, true
		}
	}
	return 0, false
}

// TTL returns the lease TTL of the row's holder as its note gives it, or own when it gives none.
func (b *BeatSeen) TTL(own time.Duration) time.Duration {
	if b != nil {
		if ttl, ok := NotedTTL(b.Row.Note); ok {
			return ttl
		}
	}
	return own
}

// LongestTTL returns the longest lease TTL among own and those of every heartbeat row seen
// (as their notes give them): what a wait protecting any of their holders counts in.
func (p *Peers) LongestTTL(own time.Duration) time.Duration {
	ttl := own
	for _, b := range p.Seen {
		ttl = max(ttl, b.TTL(own))
	}
	return ttl
}
