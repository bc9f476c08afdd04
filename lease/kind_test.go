package lease_test

import (
	"fmt"
	"testing"

	"github.com/gostream/kinesub/lease"
)

// TestKindOf: every row kinesub writes in a lease table is told apart by its key alone, so
// that a tool counting the shards an owner holds counts neither heartbeat rows, nor the change
// row, nor the protocol's mark (held with an expiry decades off under a name of its own).
func TestKindOf(t *testing.T) {
	cases := []struct {
		key  string
		want lease.Kind
	}{
		{"orders/shardId-000000000000", lease.KindShard},
		{"orders/shardId-000000000042", lease.KindShard},
		{"my.stream_1-x/shardId-000000000001", lease.KindShard},
		{"orders/~v2/owner/i0#0a1b2c3d", lease.KindHeartbeat},
		{"orders/~table/changes", lease.KindChanges},
		{"orders/kinesub-lease-protocol-2", lease.KindProtocolMark},
		{"orders/kinesub-lease-protocol-3", lease.KindProtocolMark},
		{"orders/kinesub-lease-protocol-12", lease.KindProtocolMark},
		{"orders/~owner/i0#0a1b2c3d", lease.KindHeartbeatV1},
		// A later protocol's heartbeat row, and rows kinesub never writes.
		{"orders/~v3/owner/i0#0a1b2c3d", lease.KindOther},
		{"orders/~table/other", lease.KindOther},
		{"orders/~v2/owner/", lease.KindOther},
		{"orders/~owner/", lease.KindOther},
		{"orders/~x", lease.KindOther},
		{"orders/a/b", lease.KindOther},
		{"orders/", lease.KindOther},
		{"/shardId-000000000000", lease.KindOther},
		{"orders", lease.KindOther},
		{"", lease.KindOther},
		// Not a mark without a number after it: a shard-like id.
		{"orders/kinesub-lease-protocol-2b", lease.KindShard},
		{"orders/kinesub-lease-protocol-", lease.KindShard},
	}
	for _, c := range cases {
		if got := lease.KindOf(c.key); got != c.want {
			t.Errorf("KindOf(%q) = %v, want %v", c.key, got, c.want)
		}
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[lease.Kind]string{
		lease.KindOther: "other", lease.KindShard: "shard", lease.KindHeartbeat: "heartbeat",
		lease.KindChanges: "changes", lease.KindProtocolMark: "protocol mark",
		lease.KindHeartbeatV1: "heartbeat (protocol 1)", lease.Kind(99): "other",
	} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
}

// ExampleKindOf counts the shards each owner holds in a listing of a stream's rows, leaving
// out the lease protocol's own rows.
func ExampleKindOf() {
	rows := []lease.Lease{
		{Key: "orders/shardId-000000000000", Owner: "i0#0a1b2c3d"},
		{Key: "orders/shardId-000000000001", Owner: "i1#4e5f6a7b"},
		{Key: "orders/~v2/owner/i0#0a1b2c3d", Owner: "i0#0a1b2c3d"},
		{Key: "orders/~v2/owner/i1#4e5f6a7b", Owner: "i1#4e5f6a7b"},
		{Key: "orders/kinesub-lease-protocol-2", Owner: "kinesub lease protocol 2"},
		{Key: "orders/~table/changes"},
	}
	held := map[string]int{}
	for _, l := range rows {
		if lease.KindOf(l.Key) == lease.KindShard && l.Owner != "" {
			held[l.Owner]++
		}
	}
	fmt.Println(len(held), held["i0#0a1b2c3d"], held["i1#4e5f6a7b"])
	// Output: 2 1 1
}
