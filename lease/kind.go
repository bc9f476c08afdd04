package lease

import "strings"

// Kind is what a row of a lease table is to kinesub, told from its key alone (KindOf). A
// stream's rows share the prefix "<stream name>/"; besides one lease per shard, kinesub keeps
// rows of its lease protocol there, which a tool that lists the table (to count the shards
// each owner holds, to show checkpoints) must leave out.
type Kind int

const (
	// KindOther is a key kinesub does not write, or one of a lease protocol this version does
	// not know: a key without a stream part ("<stream name>/"), or a row under "~" other
	// than those below (a later protocol's heartbeat row, "<stream name>/~v3/owner/<owner>").
	KindOther Kind = iota
	// KindShard is a shard's lease and checkpoint, "<stream name>/<shard id>". Its owner
	// holds the shard.
	KindShard
	// KindHeartbeat is a subscriber's heartbeat row, "<stream name>/~v2/owner/<owner>", which
	// its shard leases are bound to (lease protocol 2): held by the subscriber's owner name,
	// it holds no shard.
	KindHeartbeat
	// KindChanges is the stream's change row, "<stream name>/~table/changes", whose counter
	// subscribers move when the stream's leases change. Nobody holds it.
	KindChanges
	// KindProtocolMark is the row that marks the lease protocol of the stream's subscribers,
	// "<stream name>/kinesub-lease-protocol-<n>", held with an expiry decades off under a name
	// of the protocol's ("kinesub lease protocol 2"). It holds no shard.
	KindProtocolMark
	// KindHeartbeatV1 is the heartbeat row of a subscriber of kinesub 0.1 (lease protocol 1),
	// "<stream name>/~owner/<owner>". It holds no shard.
	KindHeartbeatV1
)

// The keys of the rows that are not shard leases, after "<stream name>/".
const (
	heartbeatPrefix   = "~v2/owner/"
	heartbeatV1Prefix = "~owner/"
	changesID         = "~table/changes"
	protocolPrefix    = "kinesub-lease-protocol-"
)

// KindOf returns what the row with key is. Stream names never contain '/' (Kinesis allows
// letters, digits, '_', '.' and '-'), and neither do shard ids, so a shard's key has exactly
// one. It is a pure function of the key: it reads nothing and is safe for concurrent use.
func KindOf(key string) Kind {
	stream, id, ok := strings.Cut(key, "/")
	if !ok || stream == "" || id == "" {
		return KindOther
	}
	switch {
	case strings.HasPrefix(id, heartbeatPrefix) && len(id) > len(heartbeatPrefix):
		return KindHeartbeat
	case id == changesID:
		return KindChanges
	case strings.HasPrefix(id, heartbeatV1Prefix) && len(id) > len(heartbeatV1Prefix):
		return KindHeartbeatV1
	case isProtocolMark(id):
		return KindProtocolMark
	case strings.HasPrefix(id, "~") || strings.Contains(id, "/"):
		return KindOther
	}
	return KindShard
}

// isProtocolMark reports whether id (a key after "<stream name>/") is a lease protocol's mark:
// "kinesub-lease-protocol-" and a number.
func isProtocolMark(id string) bool {
	n, ok := strings.CutPrefix(id, protocolPrefix)
	if !ok || n == "" {
		return false
	}
	for _, r := range n {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// String returns the kind's name: "shard", "heartbeat", "changes", "protocol mark",
// "heartbeat (protocol 1)" or "other".
func (k Kind) String() string {
	switch k {
	case KindShard:
		return "shard"
	case KindHeartbeat:
		return "heartbeat"
	case KindChanges:
		return "changes"
	case KindProtocolMark:
		return "protocol mark"
	case KindHeartbeatV1:
		return "heartbeat (protocol 1)"
	}
	return "other"
}
