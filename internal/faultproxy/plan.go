package faultproxy

import (
	"fmt"
	"time"
)

// Kind is a kind of injected fault. The zero Kind is invalid, so a Fault must name one.
type Kind int

// Fault kinds. Each applies only to requests it could really happen to (see Applies); a
// request for which no configured kind applies is always forwarded.
const (
	// Throttle answers 400 with the service's throttling error: Kinesis
	// ProvisionedThroughputExceededException on GetRecords, GetShardIterator, PutRecord and
	// PutRecords, LimitExceededException on its other (control plane) operations; DynamoDB
	// ProvisionedThroughputExceededException on item operations, ThrottlingException on the
	// others. The request is not forwarded.
	Throttle Kind = iota + 1
	// InternalFailure answers 500: Kinesis InternalFailureException, DynamoDB
	// InternalServerError. The request is not forwarded.
	InternalFailure
	// ExpiredIterator answers 400 ExpiredIteratorException. Applies to Kinesis GetRecords only.
	ExpiredIterator
	// ConditionalCheckFailed answers 400 ConditionalCheckFailedException without forwarding, so
	// the write really did not happen. Applies to DynamoDB PutItem, UpdateItem and DeleteItem
	// requests that carry a ConditionExpression or Expected.
	ConditionalCheckFailed
	// DropConnection closes the TCP connection without a response, before forwarding.
	DropConnection
	// Latency forwards the request after Plan.Latency.
	Latency
)

var kindNames = [...]string{
	Throttle:               "Throttle",
	InternalFailure:        "InternalFailure",
	ExpiredIterator:        "ExpiredIterator",
	ConditionalCheckFailed: "ConditionalCheckFailed",
	DropConnection:         "DropConnection",
	Latency:                "Latency",
}

func (k Kind) valid() bool { return k >= Throttle && k <= Latency }

// String returns the kind's name, as used in Stats keys.
func (k Kind) String() string {
	if k.valid() {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Fault is one kind of fault and its weight in the choice among a Plan's faults.
type Fault struct {
	Kind   Kind
	Weight int
}

// Plan says which requests a Proxy faults and how.
//
// For each eligible request the proxy draws once from a source seeded with Seed: with
// probability Rate it injects a fault, chosen among the Faults that apply to the request in
// proportion to their weights. The same Plan and the same sequence of requests therefore give
// the same sequence of faults.
type Plan struct {
	// Seed seeds the decisions.
	Seed int64
	// Rate is the fraction of eligible requests faulted, in [0, 1].
	Rate float64
	// Faults are the kinds to choose from, weighted. Weights must be >= 0 and, when Rate > 0,
	// at least one must be positive.
	Faults []Fault
	// Ops lists the X-Amz-Target operations eligible for faults, such as
	// "Kinesis_20131202.GetRecords" or "DynamoDB_20120810.UpdateItem". Empty means every
	// Kinesis and DynamoDB operation.
	Ops []string
	// Latency is the delay added by a Latency fault; it must be positive when Faults has a
	// Latency entry with a positive weight.
	Latency time.Duration
}

func (p Plan) validate() error {
	if !validRate(p.Rate) {
		return fmt.Errorf("faultproxy: Plan.Rate %v out of range [0, 1]", p.Rate)
	}
	total := 0
	for i, f := range p.Faults {
		if !f.Kind.valid() {
			return fmt.Errorf("faultproxy: Plan.Faults[%d]: invalid kind %v", i, f.Kind)
		}
		if f.Weight < 0 {
			return fmt.Errorf("faultproxy: Plan.Faults[%d]: weight %d must be >= 0", i, f.Weight)
		}
		if f.Kind == Latency && f.Weight > 0 && p.Latency <= 0 {
			return fmt.Errorf("faultproxy: Plan.Latency must be positive for a Latency fault, got %v", p.Latency)
		}
		total += f.Weight
	}
	if p.Rate > 0 && total == 0 {
		return fmt.Errorf("faultproxy: Plan.Rate is %v but Plan.Faults has no positive weight", p.Rate)
	}
	return nil
}

// validRate also rejects NaN, which fails every comparison.
func validRate(r float64) bool { return r >= 0 && r <= 1 }
