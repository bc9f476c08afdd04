package faultproxy

import (
	"math/rand/v2"
	"strings"
	"sync"
)

// X-Amz-Target prefixes of the two services the proxy understands.
const (
	kinesisPrefix  = "Kinesis_20131202."
	dynamoDBPrefix = "DynamoDB_20120810."
)

type service int

const (
	otherService service = iota
	kinesisService
	dynamoDBService
)

func serviceOf(op string) service {
	switch {
	case strings.HasPrefix(op, kinesisPrefix):
		return kinesisService
	case strings.HasPrefix(op, dynamoDBPrefix):
		return dynamoDBService
	}
	return otherService
}

// conditionalWriteOps are the DynamoDB operations that answer ConditionalCheckFailedException
// when their condition fails. TransactWriteItems reports failed conditions as
// TransactionCanceledException instead, so it is not here.
var conditionalWriteOps = map[string]bool{
	dynamoDBPrefix + "PutItem":    true,
	dynamoDBPrefix + "UpdateItem": true,
	dynamoDBPrefix + "DeleteItem": true,
}

// Applies reports whether fault kind k can happen to a request for operation op (its
// X-Amz-Target); conditional says whether the request carries a write condition.
func (k Kind) Applies(op string, conditional bool) bool {
	svc := serviceOf(op)
	if svc == otherService {
		return false
	}
	switch k {
	case Throttle, InternalFailure, DropConnection, Latency:
		return true
	case ExpiredIterator:
		return op == kinesisPrefix+"GetRecords"
	case ConditionalCheckFailed:
		return conditional && conditionalWriteOps[op]
	}
	return false
}

// decider makes the fault decisions of a Proxy. It is safe for concurrent use; the sequence
// of decisions depends only on the seed and the sequence of calls.
type decider struct {
	faults []Fault         // only positive weights; never modified
	ops    map[string]bool // nil: every operation is eligible
	mu     sync.Mutex      // guards the fields below
	rng    *rand.Rand
	rate   float64
}

func newDecider(p Plan) *decider {
	d := &decider{
		// PCG takes two words; the second is a fixed odd constant so one int64 seeds it.
		rng:  rand.New(rand.NewPCG(uint64(p.Seed), 0x9e3779b97f4a7c15)),
		rate: p.Rate,
	}
	for _, f := range p.Faults {
		if f.Weight > 0 {
			d.faults = append(d.faults, f)
		}
	}
	if len(p.Ops) > 0 {
		d.ops = make(map[string]bool, len(p.Ops))
		for _, op := range p.Ops {
			d.ops[op] = true
		}
	}
	return d
}

func (d *decider) setRate(r float64) {
	d.mu.Lock()
	d.rate = r
	d.mu.Unlock()
}

// decide returns the fault to inject into a request for op, if any. Requests that are not
// eligible, or to which no configured fault applies, draw nothing from the source, so they
// do not shift the decisions of the requests that are.
func (d *decider) decide(op string, conditional bool) (Kind, bool) {
	if d.ops != nil && !d.ops[op] {
		return 0, false
	}
	total := 0
	for _, f := range d.faults {
		if f.Kind.Applies(op, conditional) {
			total += f.Weight
		}
	}
	if total == 0 {
		return 0, false
	}
	d.mu.Lock()
	hit := d.rng.Float64() < d.rate
	n := 0
	if hit {
		n = d.rng.IntN(total)
	}
	d.mu.Unlock()
	if !hit {
		return 0, false
	}
	for _, f := range d.faults {
		if !f.Kind.Applies(op, conditional) {
			continue
		}
		if n < f.Weight {
			return f.Kind, true
		}
		n -= f.Weight
	}
	panic("unreachable: weighted choice out of range")
}
