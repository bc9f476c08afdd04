package protocol

import "time"

// The shards held here: takes, the wait and binding of a pending lease, ordered checkpoints,
// hand-backs and releases.

// take writes the lease of shard id, bound to this instance's heartbeat row (no TTL of its own)
// or pending, and reads it back whatever the write's outcome: a write whose outcome is not
// known (an error, or a refusal that a retry of a write that landed also gets) is resolved by a
// strong read. rid is the claim round waiting for it (0: none).
func (m *Machine) take(out []Output, id string, how takeHow, rid int) []Output {
	ttl := noTTL
	if how.Pending {
		ttl = PendingTTL
	}
	op := Op{Kind: OpAcquire, Key: m.leaseKey(id), Owner: m.name, TTL: ttl}
	if how.Steal {
		op = Op{Kind: OpSteal, Key: m.leaseKey(id), Owner: m.name, Counter: how.Counter, TTL: ttl}
	}
	return m.send(out, op, &opCtx{purpose: pTakeWrite, shard: id, how: how, round: rid, counter: how.Counter})
}

// noTTL is the TTL of a bound lease: none of its own.
const noTTL time.Duration = 0

func (m *Machine) takeAnswered(out []Output, c *opCtx, oc Outcome, row Row) []Output {
	if c.purpose == pTakeWrite {
		if c.name != m.name || m.phase != phaseJoined {
			return m.tookFor(out, c.round, c.shard, false)
		}
		return m.send(out, Op{Kind: OpRead, Key: m.leaseKey(c.shard)},
			&opCtx{purpose: pTakeRead, shard: c.shard, how: c.how, round: c.round, ok: oc == Applied, counter: c.counter})
	}
	id, how := c.shard, c.how
	switch {
	case c.name != m.name || m.phase != phaseJoined || oc != Applied:
		// A take begun under an old name reads nothing; an unknown holding is found as it is by
		// a later round.
		return m.tookFor(out, c.round, id, false)
	case !TakeLanded(row, m.name, TakeHow(how), c.ok, m.now.Wall):
		return m.tookFor(out, c.round, id, false) // a later round finds the lease as it is
	case row.Counter <= m.readTop[id], m.held[id] != nil:
		// An older holding of this instance's, whose writes may still land: a later round
		// takes it up with a write of its own.
		return m.tookFor(out, c.round, id, false)
	}
	if row.Finished {
		m.finished[id] = true
		m.closeOuts++
		out = m.send(out, Op{Kind: OpRelease, Key: m.leaseKey(id), Owner: row.Owner, Counter: row.Counter},
			&opCtx{purpose: pRelease, shard: id, counter: row.Counter})
		return m.tookFor(out, c.round, id, false)
	}
	h := &heldShard{tenure: row.Tenure(), state: LocalReading, checkpoint: row.Checkpoint}
	m.held[id] = h
	if how.Pending {
		h.state = LocalStarting
		h.waitTTL = max(how.WaitTTL, m.cfg.TTL)
		if !how.After.IsZero() {
			h.waitKnown = true
			h.bindAt = max(m.now.Mono, how.After.Sub(epoch)+StealWait(h.waitTTL))
		} else {
			h.announce = true
			out = m.bump(out, id)
		}
	} else {
		out = m.startReading(out, id, h)
	}
	return m.tookFor(out, c.round, id, true)
}

// startReading starts reading a shard held here.
func (m *Machine) startReading(out []Output, id string, h *heldShard) []Output {
	h.state = LocalReading
	m.readTop[id] = max(m.readTop[id], h.tenure.Counter)
	return append(out, StartReading{Shard: id, Tenure: h.tenure, Checkpoint: h.checkpoint})
}

// bind makes a pending lease the shard's, once its wait is over: a Steal at the pending
// holding's counter without an expiry.
func (m *Machine) bind(out []Output, id string, h *heldShard) []Output {
	h.binding = true
	return m.send(out, Op{Kind: OpSteal, Key: m.leaseKey(id), Owner: h.tenure.Owner, Counter: h.tenure.Counter, TTL: noTTL},
		&opCtx{purpose: pBindWrite, shard: id, counter: h.tenure.Counter})
}

func (m *Machine) bindAnswered(out []Output, c *opCtx, oc Outcome, row Row) []Output {
	h := m.held[c.shard]
	if h == nil || h.state != LocalStarting || h.tenure.Counter != c.counter || c.name != m.name {
		return out
	}
	t := h.tenure
	if c.purpose == pBindWrite && oc != Applied {
		return m.send(out, Op{Kind: OpRead, Key: m.leaseKey(c.shard)}, &opCtx{purpose: pBindRead, shard: c.shard, counter: c.counter})
	}
	if c.purpose == pBindRead {
		switch {
		case oc == Applied && row.Owner == t.Owner && row.Counter == t.Counter+1 && row.Expiry.IsZero():
			// bound: its answer was lost
		case oc == Applied && row.Tenure() != t:
			return m.lose(out, c.shard, "taken over before it was read")
		default:
			// Not landed, or not known: tried again a claim tick later.
			h.binding = false
			h.bindAt = m.now.Mono + m.cfg.ClaimTick
			return out
		}
	}
	h.binding = false
	h.tenure.Counter++
	return m.startReading(out, c.shard, h)
}

// checkpointed writes the shard's checkpoint, numbered within the holding so that a write
// applied late changes nothing (CheckpointOrdered). Once SHARD_END was sent, every later write
// of the holding says SHARD_END.
func (m *Machine) checkpointed(out []Output, in Checkpointed) []Output {
	h := m.held[in.Shard]
	if h == nil || h.state != LocalReading && h.state != LocalDraining {
		return out
	}
	if h.endSent {
		in.Finished = true
	}
	h.endSent = h.endSent || in.Finished
	h.order++
	h.ckpts++
	h.checkpoint = in.Checkpoint
	return m.send(out, Op{Kind: OpCheckpoint, Key: m.leaseKey(in.Shard), Owner: h.tenure.Owner, Counter: h.tenure.Counter,
		Checkpoint: in.Checkpoint, Finished: in.Finished, Order: h.order}, &opCtx{purpose: pCheckpoint, shard: in.Shard, counter: h.tenure.Counter})
}

func (m *Machine) checkpointAnswered(out []Output, c *opCtx, oc Outcome) []Output {
	h := m.held[c.shard]
	if h == nil || h.tenure.Counter != c.counter {
		return out
	}
	h.ckpts--
	if oc == Refused {
		return m.lose(out, c.shard, "checkpoint refused: the lease is another holding's")
	}
	return m.maybeRelease(out, c.shard, h)
}

// handBack gives shard id back cleanly: its reader finishes what was handed out, its last
// checkpoint is written (Checkpointed), and once it stopped (ReaderStopped) its lease is
// released. A lease taken pending and not read yet is left pending: its previous owner may
// still read, and whoever took it released would read at once.
func (m *Machine) handBack(out []Output, id, why string) []Output {
	h := m.held[id]
	switch {
	case h == nil:
		return out
	case h.state == LocalStarting:
		return m.ended(out, id)
	case h.state != LocalReading:
		return out
	}
	h.state = LocalDraining
	return append(out, StopReading{Shard: id, Tenure: h.tenure, Clean: true, Why: why})
}

// readerStopped: the shard's reader stopped. Draining, or at the shard's end, its lease is
// released once its checkpoint writes were answered. A reader that stopped by itself otherwise
// gives the shard up with no write: a later round takes the lease up.
func (m *Machine) readerStopped(out []Output, in ReaderStopped) []Output {
	h := m.held[in.Shard]
	if h == nil || h.stopped {
		return out
	}
	h.stopped = true
	switch {
	case in.Finished:
		h.finished, h.state = true, LocalEnded
	case h.state != LocalDraining:
		return m.ended(out, in.Shard)
	}
	return m.maybeRelease(out, in.Shard, h)
}

// maybeRelease releases a stopped shard's lease once its checkpoint writes were answered.
func (m *Machine) maybeRelease(out []Output, id string, h *heldShard) []Output {
	if !h.stopped || h.ckpts > 0 || h.releasing {
		return out
	}
	h.releasing = true
	m.closeOuts++
	return m.send(out, Op{Kind: OpRelease, Key: m.leaseKey(id), Owner: h.tenure.Owner, Counter: h.tenure.Counter},
		&opCtx{purpose: pRelease, shard: id, counter: h.tenure.Counter, final: h.finished})
}

func (m *Machine) releaseAnswered(out []Output, c *opCtx, oc Outcome) []Output {
	m.closeOuts--
	if h := m.held[c.shard]; h != nil && h.tenure.Counter == c.counter && h.releasing {
		out = m.ended(out, c.shard)
		if c.final {
			m.finished[c.shard] = true
		}
	}
	if oc == Applied && c.name == m.name && (m.phase == phaseJoined || m.phase == phaseClosing) {
		out = m.bump(out, "")
	}
	return m.closeIfDrained(out)
}
