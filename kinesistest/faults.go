package kinesistest

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// FaultKind is a kind of injected fault.
type FaultKind int

// Fault kinds. The zero FaultKind is invalid, so a Fault must name one.
const (
	// Throttle answers with the service's throttling error: ProvisionedThroughputExceededException
	// on GetRecords, GetShardIterator, PutRecord and PutRecords, LimitExceededException on the
	// other operations.
	Throttle FaultKind = iota + 1
	// InternalFailure answers 500 InternalFailureException.
	InternalFailure
	// DropConnection aborts the request without an answer.
	DropConnection
	// Latency answers as usual after Fault.Latency.
	Latency
	// ResetStream lets a SubscribeToShard subscription send Fault.AfterEvents events, then
	// resets its HTTP/2 stream (RST_STREAM) without ending it: a connection lost mid-stream.
	ResetStream
	// StreamError lets a SubscribeToShard subscription send Fault.AfterEvents events, then ends
	// it with an InternalFailureException in the event stream, as the service reports a failure
	// after the subscription started.
	StreamError
)

// Fault injects one kind of fault into a share of the calls of one operation.
type Fault struct {
	// Op is the operation's name ("GetRecords"); empty means every operation.
	Op   string
	Kind FaultKind
	// Probability is the share of matching calls that get the fault, in (0, 1].
	Probability float64
	// Latency is the delay of a Latency fault, in (0, 1m].
	Latency time.Duration
	// AfterEvents is how many SubscribeToShardEvents (idle ones included) a ResetStream or
	// StreamError subscription sends before the fault, at least 0.
	AfterEvents int
}

// FaultPlan is a seeded plan of faults: the same seed and the same sequence of calls give the
// same faults. The first Fault that matches a call and is drawn applies. Its server draws from
// it under a lock; do not change its fields once the server started.
type FaultPlan struct {
	Seed   uint64
	Faults []Fault

	mu  sync.Mutex
	rng *rand.Rand
}

// WithFaults injects the plan's faults into the server's answers, overriding the default of
// none. A plan must not be shared between servers.
func WithFaults(p *FaultPlan) Option { return func(c *config) { c.faults = p } }

func (p *FaultPlan) validate() error {
	for i, f := range p.Faults {
		if f.Kind < Throttle || f.Kind > StreamError {
			return fmt.Errorf("kinesistest: WithFaults: Faults[%d].Kind %d: must be Throttle, InternalFailure, DropConnection, Latency, ResetStream or StreamError", i, f.Kind)
		}
		if f.streamFault() && f.Op != "SubscribeToShard" {
			return fmt.Errorf("kinesistest: WithFaults: Faults[%d].Op %q: a ResetStream or StreamError fault must name SubscribeToShard", i, f.Op)
		}
		if f.AfterEvents < 0 {
			return fmt.Errorf("kinesistest: WithFaults: Faults[%d].AfterEvents %d: must be at least 0", i, f.AfterEvents)
		}
		if !(f.Probability > 0 && f.Probability <= 1) {
			return fmt.Errorf("kinesistest: WithFaults: Faults[%d].Probability %v: must be in (0, 1]", i, f.Probability)
		}
		if f.Kind == Latency && (f.Latency <= 0 || f.Latency > time.Minute) {
			return fmt.Errorf("kinesistest: WithFaults: Faults[%d].Latency %v: must be in (0, 1m]", i, f.Latency)
		}
	}
	p.rng = rand.New(rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15))
	return nil
}

// streamFault reports whether f breaks a subscription once it started, rather than the call.
func (f Fault) streamFault() bool { return f.Kind == ResetStream || f.Kind == StreamError }

// draw returns the fault for a call of op, if any.
func (p *FaultPlan) draw(op string) (Fault, bool) {
	if p == nil {
		return Fault{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.Faults {
		if f.Op != "" && f.Op != op {
			continue
		}
		if p.rng.Float64() < f.Probability {
			return f, true
		}
	}
	return Fault{}, false
}

func throttleError(op string) *apiError {
	switch op {
	case "GetRecords", "GetShardIterator", "PutRecord", "PutRecords":
		return errThroughput("Rate exceeded for shard (injected fault).")
	}
	return errLimit("Rate exceeded (injected fault).")
}
