package protosim

import (
	"fmt"
	"time"

	"github.com/gostream/kinesub/internal/protocol"
)

// machineCore is protocol.Machine as a Core.
type machineCore struct{ *protocol.Machine }

func (c machineCore) Clone() Core { return machineCore{c.Machine.Clone()} }

// Machines returns the production Core: a protocol.Machine per instance, owner "i<slot>", on
// stream with lease TTL ttl. Its planner draws from choose, the simulator's one seeded source
// (nil in the explorer: the planner takes its first choice, and the search's branching stands
// in for the draws).
func Machines(stream string, ttl time.Duration) NewCore {
	return func(slot int, choose protocol.Chooser) Core {
		return machineCore{protocol.New(protocol.Config{Stream: stream, Owner: fmt.Sprintf("i%d", slot), TTL: ttl, Choose: choose})}
	}
}

// MachinesMixed is Machines with mixed lease TTLs, as in a rolling change of WithLeaseTTL or
// one service of many configured differently: the machine in slot 0 runs with ttl, the others
// with half of it. The fleet's Config.TTL is ttl, the longest, in which its bounds count.
func MachinesMixed(stream string, ttl time.Duration) NewCore {
	return func(slot int, choose protocol.Chooser) Core {
		t := ttl
		if slot > 0 {
			t = ttl / 2
		}
		return machineCore{protocol.New(protocol.Config{Stream: stream, Owner: fmt.Sprintf("i%d", slot), TTL: t, Choose: choose})}
	}
}
