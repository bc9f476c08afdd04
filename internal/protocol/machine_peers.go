package protocol

import "sort"

// watchPeers looks at the heartbeat rows this instance watches: the next WatchedPeers live
// owners after it by name, and any between them that look silent; and the overlooked owners
// once they are due (Peers.Overlooked). A row due for a read (every RenewEvery) is read, and
// judged when its answer comes; the others are judged now: gone, or silent for ReapAfter (taken
// over), or for SilentAfter (missed a renewal: the table is read once). It reports whether the
// table should be read now.
func (m *Machine) watchPeers(out []Output) ([]Output, bool) {
	ttl := m.cfg.TTL
	now := at(m.now.Mono)
	owners := m.peers.LiveOwners(m.name)
	if len(owners) == 0 {
		m.watched = m.watched[:0]
		return out, false
	}
	start := sort.SearchStrings(owners, m.name)
	changed, live := false, 0
	m.watched = m.watched[:0]
	for i := 0; i < len(owners) && live < WatchedPeers; i++ {
		o := owners[(start+i)%len(owners)]
		m.watched = append(m.watched, o)
		b := m.peers.Seen[o]
		if now.Sub(b.Read) >= RenewEvery(ttl)-m.cfg.ClaimTick/2 {
			out = m.send(out, Op{Kind: OpRead, Key: m.ownerKey(o)}, &opCtx{purpose: pPeerRead, owner: o})
			live++ // judged on the answer
			continue
		}
		switch Judge(o, b, now, ttl) {
		case Gone:
			changed = true
			continue
		case Reap:
			if !m.reaping[o] {
				out = m.reap(out, o, b, 0)
			}
			continue
		case Silent:
			if !b.Missed {
				b.Missed, changed = true, true
			}
			continue
		}
		live++
	}
	for _, o := range m.peers.Overlooked(m.name, owners, m.watched) {
		if b := m.peers.Seen[o]; b.StillFor(now) < ReapAfter(b.TTL(ttl)) {
			continue
		}
		out = m.send(out, Op{Kind: OpRead, Key: m.ownerKey(o)}, &opCtx{purpose: pPeerRead, owner: o})
	}
	return out, changed
}

// peerAnswered judges a peer's row just read.
func (m *Machine) peerAnswered(out []Output, c *opCtx, oc Outcome, row Row) []Output {
	if c.name != m.name || m.phase != phaseJoined || oc != Applied {
		return out
	}
	b := m.peers.Observe(c.owner, row, at(m.now.Mono))
	switch Judge(c.owner, b, at(m.now.Mono), m.cfg.TTL) {
	case Gone:
		return m.startRound(out, false)
	case Reap:
		if !m.reaping[c.owner] {
			return m.reap(out, c.owner, b, 0)
		}
	case Silent:
		if !b.Missed {
			b.Missed = true
			return m.startRound(out, false)
		}
	}
	return out
}

// reap takes over the heartbeat row of owner, silent since b was read, so that its shards are
// free: a Steal at the counter read (resolved by a read when its outcome is not known), then a
// release and a delete of the row. rid is the claim round waiting for it (0: none; a round is
// started once the row is taken over).
func (m *Machine) reap(out []Output, owner string, b *BeatSeen, rid int) []Output {
	m.reaping[owner] = true
	return m.send(out, Op{Kind: OpSteal, Key: m.ownerKey(owner), Owner: m.name, Counter: b.Row.Counter, TTL: noTTL},
		&opCtx{purpose: pReapSteal, owner: owner, counter: b.Row.Counter, round: rid})
}

func (m *Machine) reapAnswered(out []Output, c *opCtx, oc Outcome, row Row) []Output {
	key := m.ownerKey(c.owner)
	switch c.purpose {
	case pReapRelease:
		if oc == Applied {
			out = m.send(out, Op{Kind: OpDelete, Key: key, Counter: c.counter + 1}, &opCtx{purpose: pReapDelete, owner: c.owner})
		}
		return out
	case pReapDelete:
		return out // else a peer's cleanup deletes it
	}
	if c.name != m.name || m.phase != phaseJoined {
		delete(m.reaping, c.owner)
		return m.reaped(out, c.round, c.owner, false)
	}
	if c.purpose == pReapSteal && oc != Applied {
		return m.send(out, Op{Kind: OpRead, Key: key}, &opCtx{purpose: pReapRead, owner: c.owner, counter: c.counter, round: c.round})
	}
	if c.purpose == pReapRead {
		if oc != Applied {
			delete(m.reaping, c.owner)
			return m.reaped(out, c.round, c.owner, false)
		}
		m.peers.Observe(c.owner, row, at(m.now.Mono))
		if taken, gone := ReapReadBack(row, m.name, c.owner, c.counter); !taken {
			delete(m.reaping, c.owner)
			return m.reaped(out, c.round, c.owner, gone) // renewed meanwhile (alive), or gone anyway
		}
	}
	delete(m.reaping, c.owner)
	taken := Tenure{Owner: m.name, Counter: c.counter + 1}
	m.peers.Observe(c.owner, Row{Key: key, Owner: m.name, Counter: taken.Counter}, at(m.now.Mono))
	out = m.send(out, Op{Kind: OpRelease, Key: key, Owner: taken.Owner, Counter: taken.Counter},
		&opCtx{purpose: pReapRelease, owner: c.owner, counter: taken.Counter})
	out = m.bump(out, "")
	if c.round == 0 {
		return m.startRound(out, false)
	}
	return m.reaped(out, c.round, c.owner, true)
}
