package lease

import "context"

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
