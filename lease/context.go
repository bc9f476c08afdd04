package lease

import (
	"context"
	"fmt"
)

// checkContext rejects a nil ctx before a store method does anything, naming the method: a
// nil ctx would otherwise panic deep inside the SDK or the standard library.
func checkContext(ctx context.Context, method string) error {
	if ctx == nil {
		return fmt.Errorf("%w: %s: nil context: pass context.Background()", ErrInvalidArgument, method)
	}
	return nil
}
