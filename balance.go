package kinesub

import (
	"math/rand/v2"

	"github.com/gostream/kinesub/internal/protocol"
	"github.com/gostream/kinesub/lease"
)

// Balancing decides, from one read of the lease table, which leases this subscriber takes,
// hands back and steals: the planner is the protocol core's (internal/protocol, balance.go and
// balance_load.go), pure; claim.go carries its decisions out. What is here converts this
// package's types to the core's at that boundary, and draws the randomness the core asks for.

// chooser is a source of randomness: math/rand/v2's top-level functions, or a seeded one.
type chooser = protocol.Chooser

// globalRand draws from math/rand/v2's top-level source.
type globalRand struct{}

func (globalRand) IntN(n int) int { return rand.IntN(n) }

// rowOf returns l as the core's Row.
func rowOf(l lease.Lease) protocol.Row {
	return protocol.Row{Key: l.Key, Owner: l.Owner, Expiry: l.Expiry, Counter: l.Counter,
		Checkpoint: l.Checkpoint.Sequence, Finished: l.Checkpoint.Sequence == lease.ShardEnd, Note: l.Note}
}

// rowsOf returns ls as the core's Rows.
func rowsOf(ls map[string]lease.Lease) map[string]protocol.Row {
	out := make(map[string]protocol.Row, len(ls))
	for k, l := range ls {
		out[k] = rowOf(l)
	}
	return out
}

// localOf returns the core's name for a shard's state here.
func localOf(st shardState) protocol.LocalState {
	switch st {
	case stateStarting:
		return protocol.LocalStarting
	case stateReading:
		return protocol.LocalReading
	case stateDraining:
		return protocol.LocalDraining
	case stateReleased:
		return protocol.LocalReleased
	case stateLost:
		return protocol.LocalLost
	case stateEnded:
		return protocol.LocalEnded
	}
	return 0
}

// localsOf returns the states of the shards held here as the core names them.
func localsOf(states map[string]shardState) map[string]protocol.LocalState {
	out := make(map[string]protocol.LocalState, len(states))
	for id, st := range states {
		out[id] = localOf(st)
	}
	return out
}
