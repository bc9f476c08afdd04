package protosim

import (
	"time"

	"github.com/gostream/kinesub/internal/protocol"
)

// Core is the state machine a simulated instance runs: protocol.Machine (see Machine), or a
// test's own. Step and MayHandOut are protocol.Machine's; Clone returns an independent copy
// (the explorer branches with it), String a canonical dump of the state (the explorer dedups
// states by it). MayHandOut must leave the state as it was: the explorer shares one core
// between branches until one of them steps it.
type Core interface {
	Step(now protocol.Instant, in protocol.Input) []protocol.Output
	MayHandOut(now time.Duration, shard string) (protocol.Tenure, bool)
	Clone() Core
	String() string
}

// NewCore returns a fresh machine for the instance in slot (0, 1, …); each slot runs one
// machine at a time, and a new one, joined under a new incarnation, after a crash or a Close.
// choose is the run's one seeded source, for every random choice the machine makes (nil in
// the explorer, which makes none at random).
type NewCore func(slot int, choose protocol.Chooser) Core
