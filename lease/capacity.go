package lease

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

type capacityKey struct{}

// WithConsumedCapacity returns a copy of ctx under which the DynamoDB store asks every call it
// makes for the capacity it consumed (ReturnConsumedCapacity TOTAL) and passes the units of
// each answer to report, from the calling goroutine. A conditional write whose condition
// failed reports nothing (DynamoDB bills it all the same). The memory store ignores it.
func WithConsumedCapacity(ctx context.Context, report func(units float64)) context.Context {
	return context.WithValue(ctx, capacityKey{}, report)
}

// capacityReport returns the function WithConsumedCapacity put in ctx, or nil.
func capacityReport(ctx context.Context) func(float64) {
	f, _ := ctx.Value(capacityKey{}).(func(float64))
	return f
}

// asked is the ReturnConsumedCapacity of a call: TOTAL when a report was asked for
// (WithConsumedCapacity), the default (none) otherwise.
func asked(report func(float64)) types.ReturnConsumedCapacity {
	if report == nil {
		return ""
	}
	return types.ReturnConsumedCapacityTotal
}

// consumed passes what a call consumed to report.
func consumed(report func(float64), c *types.ConsumedCapacity) {
	if report != nil && c != nil && c.CapacityUnits != nil {
		report(*c.CapacityUnits)
	}
}
