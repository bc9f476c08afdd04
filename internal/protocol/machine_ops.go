package protocol

import (
	"strconv"
	"strings"
	"time"
)

// purpose is what an operation in flight is for: what its answer continues.
type purpose int

const (
	pJoinCreate  purpose = iota + 1 // the joining write of the heartbeat row
	pJoinRead                       // its read back
	pRenew                          // a renewal (Steal at the row's own counter)
	pRenewRead                      // a renewal's outcome, read
	pConfirm                        // the renewal tick's read of the change row
	pTickChange                     // the claim tick's read of the change row
	pPeerRead                       // a watched (or overlooked) owner's heartbeat row
	pReapSteal                      // taking a silent owner's row over
	pReapRead                       // its outcome, read
	pReapRelease                    // releasing the row taken over
	pReapDelete                     // deleting it
	pRoundChange                    // a claim round's read of the change row
	pRoundList                      // a claim round's listing
	pOwnerRead                      // a claim round's read of an owner's row its listing lacked
	pTakeWrite                      // a take's write
	pTakeRead                       // a take's read back
	pBumpRead                       // a bump's read of the change row
	pBumpWrite                      // a bump's move of it
	pBindWrite                      // binding a pending lease
	pBindRead                       // its outcome, read
	pCheckpoint                     // a checkpoint write
	pRelease                        // releasing a lease (hand-back, Close, finished)
	pDropRead                       // Close: reading the heartbeat row
	pDropRelease                    // Close: releasing it
	pDropDelete                     // Close: deleting it
)

var purposeNames = [...]string{"", "join-create", "join-read", "renew", "renew-read", "confirm", "tick-change", "peer-read",
	"reap-steal", "reap-read", "reap-release", "reap-delete", "round-change", "round-list", "owner-read", "take-write",
	"take-read", "bump-read", "bump-write", "bind-write", "bind-read", "checkpoint", "release", "drop-read",
	"drop-release", "drop-delete"}

// opCtx is what the Machine remembers of an operation in flight.
type opCtx struct {
	purpose purpose
	sent    Instant
	name    string // the owner name it was sent under
	shard   string
	owner   string  // the peer it concerns
	counter int64   // the counter it is conditional on (or read at)
	round   int     // the claim round it belongs to (0: none)
	how     takeHow // a take's
	ok      bool    // a take's write was applied
	bumpFor string  // a bump announcing this shard's steal ("": none)
	readAt  Instant // a bump's read's send
	final   bool    // a release that ends a finished shard
}

func (o *opCtx) String() string {
	return strings.Join([]string{purposeNames[o.purpose], strconv.FormatInt(int64(o.sent.Mono), 10), strconv.Quote(o.name),
		strconv.Quote(o.shard), strconv.Quote(o.owner), strconv.FormatInt(o.counter, 10), strconv.Itoa(o.round), o.how.String(),
		strconv.FormatBool(o.ok), strconv.Quote(o.bumpFor), strconv.FormatInt(int64(o.readAt.Mono), 10), strconv.FormatBool(o.final)}, " ")
}

// takeHow is TakeHow (round.go) in the Machine's state.
type takeHow TakeHow

func (h takeHow) String() string {
	after := "-"
	if !h.After.IsZero() {
		after = strconv.FormatInt(int64(h.After.Sub(epoch)), 10)
	}
	return strings.Join([]string{strconv.FormatBool(h.Steal), strconv.FormatInt(h.Counter, 10), strconv.FormatBool(h.Pending),
		strconv.FormatBool(h.Own), after}, ",")
}

// answered continues what the operation was sent for.
func (m *Machine) answered(out []Output, a Answered) []Output {
	c := m.ops[a.ID]
	if c == nil {
		return out // answered twice, or never sent
	}
	delete(m.ops, a.ID)
	row := Row{}
	if len(a.Rows) > 0 {
		row = a.Rows[0]
	}
	switch c.purpose {
	case pJoinCreate, pJoinRead:
		return m.joinAnswered(out, c, a.Outcome, row)
	case pRenew, pRenewRead:
		return m.renewAnswered(out, c, a.Outcome, row)
	case pConfirm:
		return m.confirmAnswered(out, c, a.Outcome, row)
	case pTickChange:
		return m.tickChangeAnswered(out, c, a.Outcome, row)
	case pPeerRead:
		return m.peerAnswered(out, c, a.Outcome, row)
	case pReapSteal, pReapRead, pReapRelease, pReapDelete:
		return m.reapAnswered(out, c, a.Outcome, row)
	case pRoundChange, pRoundList, pOwnerRead:
		return m.roundAnswered(out, c, a)
	case pTakeWrite, pTakeRead:
		return m.takeAnswered(out, c, a.Outcome, row)
	case pBumpRead, pBumpWrite:
		return m.bumpAnswered(out, c, a.Outcome, row)
	case pBindWrite, pBindRead:
		return m.bindAnswered(out, c, a.Outcome, row)
	case pCheckpoint:
		return m.checkpointAnswered(out, c, a.Outcome)
	case pRelease:
		return m.releaseAnswered(out, c, a.Outcome)
	case pDropRead, pDropRelease, pDropDelete:
		return m.dropAnswered(out, c, a.Outcome, row)
	}
	return out
}

// bump moves the stream's change row (read it, then take it over at the counter read), so that
// peers read the lease table at their next claim tick. forShard, when set, is a steal whose
// wait starts when the move is known.
func (m *Machine) bump(out []Output, forShard string) []Output {
	return m.send(out, Op{Kind: OpRead, Key: m.changeKey()}, &opCtx{purpose: pBumpRead, bumpFor: forShard})
}

// changeHold is how long a bump holds the change row: nothing waits for it.
const changeHold = time.Second

func (m *Machine) bumpAnswered(out []Output, c *opCtx, oc Outcome, row Row) []Output {
	switch c.purpose {
	case pBumpRead:
		if oc != Applied {
			return m.bumpFailed(out, c)
		}
		m.pending.ChangeRead(at(c.sent.Mono), at(m.now.Mono), row.Counter)
		op := Op{Kind: OpSteal, Key: m.changeKey(), Owner: m.name, Counter: row.Counter, TTL: changeHold}
		if row.Counter == 0 {
			op = Op{Kind: OpAcquire, Key: m.changeKey(), Owner: m.name, TTL: changeHold}
		}
		return m.send(out, op, &opCtx{purpose: pBumpWrite, bumpFor: c.bumpFor, readAt: c.sent})
	default:
		if oc == Unknown {
			return m.bumpFailed(out, c)
		}
		// Written, or refused because a peer moved the row after the read: either way a move
		// landed after the read.
		m.pending.MovedBy(at(c.readAt.Mono), at(m.now.Mono))
		if h := m.held[c.bumpFor]; c.bumpFor != "" && h != nil && h.announce {
			h.announce, h.waitKnown = false, true
			h.bindAt = m.now.Mono + StealWait(h.waitTTL)
		}
		return out
	}
}

// bumpFailed: a bump for a steal is tried again until it lands (the steal's wait begins only
// then); others are left (peers notice at their next balance round).
func (m *Machine) bumpFailed(out []Output, c *opCtx) []Output {
	if h := m.held[c.bumpFor]; c.bumpFor != "" && h != nil && h.announce && m.phase == phaseJoined {
		return m.bump(out, c.bumpFor)
	}
	return out
}
