package protocol

import "strconv"

// OwnerName returns the owner name of incarnation inc of owner: owner#<16 hex digits>. 64 bits,
// so that instances started with one owner name do not draw the same incarnation.
func OwnerName(owner string, inc uint64) string {
	h := strconv.FormatUint(inc, 16)
	for len(h) < 16 {
		h = "0" + h
	}
	return owner + "#" + h
}

// join makes the heartbeat row under a new incarnation: a write that creates it only where it
// is absent, then a strong read back. At Subscribe, and after the row was found taken over.
func (m *Machine) join(out []Output, j Join) []Output {
	if m.phase != phaseIdle && m.phase != phaseRejoining {
		return out
	}
	m.phase = phaseJoining
	m.name = OwnerName(m.cfg.Owner, j.Incarnation)
	m.joinSent = m.now.Mono
	return m.send(out, Op{Kind: OpCreate, Key: m.ownerKey(m.name), Owner: m.name, TTL: m.cfg.TTL}, &opCtx{purpose: pJoinCreate})
}

func (m *Machine) joinAnswered(out []Output, c *opCtx, oc Outcome, row Row) []Output {
	if m.phase != phaseJoining || c.name != m.name {
		return out
	}
	switch c.purpose {
	case pJoinCreate:
		switch oc {
		case Refused:
			return m.fail(out, "heartbeat row "+m.ownerKey(m.name)+" is held by another process with the owner name "+m.name)
		case Unknown:
			return m.fail(out, "heartbeat row "+m.ownerKey(m.name)+" not written")
		}
		return m.send(out, Op{Kind: OpRead, Key: m.ownerKey(m.name)}, &opCtx{purpose: pJoinRead})
	default:
		if oc != Applied {
			return m.fail(out, "heartbeat row "+m.ownerKey(m.name)+" not read back")
		}
		if row.Owner != m.name {
			return m.fail(out, "heartbeat row "+m.ownerKey(m.name)+" taken over as it was made")
		}
	}
	m.phase = phaseJoined
	m.hb = row.Tenure()
	m.noted = false
	m.d.Joined(at(m.joinSent), at(m.now.Mono))
	m.lastRound = roundResult{}
	now := m.now.Mono
	m.nextRenew = now + RenewEvery(m.cfg.TTL)
	m.nextClaim = now + m.cfg.ClaimTick
	m.nextBalance = now + m.cfg.Balance
	out = m.bump(out, "") // joined: peers count this instance at their next tick
	out = m.renew(out)    // at once, so that the row notes this instance's TTL
	return m.startRound(out, false)
}

// fail stops the Machine for good when its first join could not be made (Subscribe returns
// the error); a join anew is tried again at the next renewal tick, as the runtime does.
func (m *Machine) fail(out []Output, why string) []Output {
	if m.rejoins > 0 {
		m.phase = phaseRejoining
		m.name = ""
		m.nextRenew = m.now.Mono + RenewEvery(m.cfg.TTL)
		m.stoppedWhy = why
		return out
	}
	m.phase = phaseClosed
	m.stoppedWhy = why
	return append(out, Failed{Why: why})
}

// renew moves the heartbeat row's counter: a Steal at its own counter. One at a time.
func (m *Machine) renew(out []Output) []Output {
	if m.renewing {
		return out
	}
	m.renewing = true
	m.d.Attempt(at(m.now.Mono))
	return m.send(out, Op{Kind: OpSteal, Key: m.ownerKey(m.name), Owner: m.name, Counter: m.hb.Counter, TTL: m.cfg.TTL,
		Note: NoteTTL("", m.cfg.TTL)}, &opCtx{purpose: pRenew, counter: m.hb.Counter})
}

// renewAnswered: a renewal that landed moves the deadline; one whose outcome is not known (an
// error, or a refusal that a retry of a write that landed also gets) is resolved by a strong
// read. A row found another's means this instance was taken for dead: every shard is lost and
// it joins anew (Rejoin).
func (m *Machine) renewAnswered(out []Output, c *opCtx, oc Outcome, row Row) []Output {
	if c.name != m.name || m.phase != phaseJoined && m.phase != phaseClosing {
		return out
	}
	if c.purpose == pRenew {
		if oc == Applied {
			m.renewing, m.noted = false, true
			m.hb = Tenure{Owner: m.name, Counter: c.counter + 1}
			return m.applyDeadline(out, m.d.Renewed(at(m.now.Mono)))
		}
		return m.send(out, Op{Kind: OpRead, Key: m.ownerKey(m.name)}, &opCtx{purpose: pRenewRead, counter: c.counter})
	}
	m.renewing = false
	switch {
	case oc != Applied:
		// Unknown: the next tick tries again, and the deadline passes if none lands.
	case row.Owner == m.name && row.Counter > c.counter:
		m.hb = row.Tenure() // an attempt landed, its answer lost
		m.noted = true
		return m.applyDeadline(out, m.d.Renewed(at(m.now.Mono)))
	case row.Owner == m.name:
		// Not landed (yet): the next tick tries again.
	default:
		out = m.loseAll(out, "heartbeat row taken over by a peer")
		if m.phase == phaseClosing {
			return m.closed(out)
		}
		m.phase = phaseRejoining
		m.name = ""
		m.rejoins++
		m.round, m.again, m.againBal = nil, false, false
		m.renewing, m.confirming, m.checking = false, false, false
		return append(out, Rejoin{})
	}
	return out
}

// confirm reads the change row: unmoved since the leases were last read, it confirms them;
// moved, the leases are read again (a claim round, which confirms them).
func (m *Machine) confirm(out []Output) []Output {
	if m.confirming {
		return out
	}
	m.confirming = true
	return m.send(out, Op{Kind: OpRead, Key: m.changeKey()}, &opCtx{purpose: pConfirm})
}

func (m *Machine) confirmAnswered(out []Output, c *opCtx, oc Outcome, row Row) []Output {
	if c.name != m.name {
		return out
	}
	m.confirming = false
	if oc != Applied || m.phase != phaseJoined {
		return out
	}
	ok, ch := m.d.Confirm(at(c.sent.Mono), row.Counter, at(m.now.Mono))
	out = m.applyDeadline(out, ch)
	if !ok {
		out = m.startRound(out, false)
	}
	return out
}

// close stops cleanly: every shard read here drains (its reader finishes what was handed out and
// its checkpoint is written) and its lease is released; a lease taken pending and not read yet is
// left pending (its previous owner may still read). Then the deadline is resigned and the
// heartbeat row dropped.
func (m *Machine) close(out []Output) []Output {
	switch m.phase {
	case phaseIdle, phaseJoining, phaseRejoining:
		m.phase = phaseClosed
		return append(out, Closed{})
	case phaseJoined:
	default:
		return out
	}
	m.phase = phaseClosing
	m.round, m.again, m.againBal = nil, false, false
	for _, id := range sortedKeys(m.held) {
		out = m.handBack(out, id, "closing")
	}
	return m.closeIfDrained(out)
}

// closeIfDrained drops the heartbeat row once every shard was given up and every release
// answered.
func (m *Machine) closeIfDrained(out []Output) []Output {
	if m.phase != phaseClosing || len(m.held) > 0 || m.closeOuts > 0 {
		return out
	}
	m.phase = phaseDropping
	m.d.Resign()
	return m.send(out, Op{Kind: OpRead, Key: m.ownerKey(m.name)}, &opCtx{purpose: pDropRead})
}

// dropAnswered releases the heartbeat row, so that peers stop counting this owner at once,
// moves the change row, and deletes the row.
func (m *Machine) dropAnswered(out []Output, c *opCtx, oc Outcome, row Row) []Output {
	if m.phase != phaseDropping {
		return out
	}
	switch c.purpose {
	case pDropRead:
		if oc != Applied || row.Owner != m.name {
			return m.closed(out) // taken over by a peer, gone, or unreadable: a peer's cleanup deletes it
		}
		m.dropCount = row.Counter
		return m.send(out, Op{Kind: OpRelease, Key: m.ownerKey(m.name), Owner: m.name, Counter: row.Counter}, &opCtx{purpose: pDropRelease})
	case pDropRelease:
		if oc != Applied {
			return m.closed(out)
		}
		out = m.bump(out, "")
		return m.send(out, Op{Kind: OpDelete, Key: m.ownerKey(m.name), Counter: m.dropCount + 1}, &opCtx{purpose: pDropDelete})
	default:
		return m.closed(out)
	}
}

// closed ends the Machine after Close.
func (m *Machine) closed(out []Output) []Output {
	m.phase = phaseClosed
	m.d.Resign()
	return append(out, Closed{})
}
