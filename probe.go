package kinesub

import (
	"time"

	"github.com/gostream/kinesub/lease"
)

// probeSet holds the points inside a subscriber where a test observes and steers it: the fleet
// simulation (sim_test.go) holds a paused instance at them, so that what a paused process
// would do late it does late here too, and records every delivery handed out and the lease
// protocol's steps. They are nil in production: each call site costs a nil check.
type probeSet struct {
	// pause is called by the subscriber's own goroutines where a paused process would stand
	// still: before a delivery is handed out (and before anything is checked for it), and
	// before the readers' deadline acts (tenure.go). It returns once the instance may run.
	pause func()
	// handedOut is called for each delivery as it is handed to the consumer's code: yielded by
	// All or Batches, sent into Messages (right after the send completed: the consumer has it),
	// or passed to a Process handler. checked is when the deadline was checked for it: a moment
	// before, except for a send into Messages that waited for the consumer to receive.
	handedOut func(m *Message, checked time.Time)
	// checked is called between a delivery's last check (the deadline, its shard's generation
	// or drain) and its hand-out: for a Process job before its handler's call, for a record of
	// All before it is yielded, for the first record of a Batch of Batches, for a record of
	// Messages before its send. It is where a stalled process has let a record pass its checks
	// and not yet handed it out. The fleet simulation notes there when a record of Messages was
	// checked, and judges it when its consumer receives it.
	checked func(m *Message)
	// step is called at named steps of the lease protocol (see the call sites), in the
	// goroutine that takes them.
	step func(name, shard string, t lease.Tenure)
	// incarnation names this process's holdings in place of a random name, and choose draws
	// the balancing's random choices: a simulation replays what a seed drew.
	incarnation func() string
	choose      chooser
}

// newIncarnation returns a name for a new holding of this subscriber (heartbeat.go).
func (p *probeSet) newIncarnation() string {
	if p != nil && p.incarnation != nil {
		return p.incarnation()
	}
	return incarnation()
}

// chooser returns the source of balancing's random choices.
func (p *probeSet) chooser() chooser {
	if p != nil && p.choose != nil {
		return p.choose
	}
	return globalRand{}
}

// withProbes installs p: tests only.
func withProbes(p *probeSet) Option { return func(c *config) { c.probes = p } }

func (p *probeSet) hold() {
	if p != nil && p.pause != nil {
		p.pause()
	}
}

func (p *probeSet) handOut(m *Message) {
	if p != nil && p.handedOut != nil {
		p.handedOut(m, time.Now())
	}
}

// handOutChecked is handOut for a delivery whose deadline was checked at checked.
func (p *probeSet) handOutChecked(m *Message, checked time.Time) {
	if p != nil && p.handedOut != nil {
		p.handedOut(m, checked)
	}
}

func (p *probeSet) passed(m *Message) {
	if p != nil && p.checked != nil {
		p.checked(m)
	}
}

func (p *probeSet) at(name, shard string, t lease.Tenure) {
	if p != nil && p.step != nil {
		p.step(name, shard, t)
	}
}
