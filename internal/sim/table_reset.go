package sim

import (
	"strings"

	"github.com/gostream/kinesub/lease"
)

// ResetCheckpoints sets the checkpoint of every shard's lease under prefix (the stream's
// name and "/") to cp, leaving owners and counters, as an operator's tool that rewinds a
// stopped fleet's stream would, and returns how many it set. Applied is not told: no instance
// wrote it. Call it once the writes in flight have landed (Settle).
func (t *Table) ResetCheckpoints(prefix string, cp lease.Checkpoint) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for key, r := range t.rows {
		shard, ok := strings.CutPrefix(key, prefix)
		if !ok || !strings.HasPrefix(shard, "shardId-") || r.l.Key == "" {
			continue
		}
		r.l.Checkpoint, r.order = cp, 0
		n++
	}
	return n
}
