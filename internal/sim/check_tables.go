package sim

// NewLeaseTable tells the checker that the fleet, stopped, starts again on a new lease table:
// lease counters start afresh there, so the holdings of the old table (the highest counter
// handed out per shard, where holdings started, what they acked) no longer order anything.
// Deliveries, keys and their order are kept.
func (c *Checker) NewLeaseTable() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.top)
	clear(c.started)
	clear(c.acked)
	clear(c.ackedBy)
	clear(c.drained)
	clear(c.taken)   // steals seen in the old table: its counters start again in the new one
	clear(c.rowGone) // heartbeat rows of the old table
}
