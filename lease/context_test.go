package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gostream/kinesub/lease"
)

// TestNilContext: every method of both stores refuses a nil ctx with an error wrapping
// ErrInvalidArgument that names the method, before any I/O (the DynamoDB store here has no
// client: a call that got past the check would fail otherwise).
func TestNilContext(t *testing.T) {
	var ctx context.Context // nil, as a caller's variable would hold it
	dynamo := lease.NewDynamoDB(nil, "leases")
	held := lease.Tenure{Owner: "o", Counter: 1}
	for _, tc := range []struct {
		name string
		s    lease.Store
	}{{"Memory", lease.NewMemory()}, {"DynamoDB", dynamo}} {
		calls := map[string]func() error{
			"Acquire": func() error { _, err := tc.s.Acquire(ctx, "s/k", "o", time.Second); return err },
			"Steal":   func() error { _, err := tc.s.Steal(ctx, "s/k", "o", 1, time.Second); return err },
			"StealNote": func() error {
				_, err := tc.s.StealNote(ctx, "s/k", "o", 1, time.Second, "n")
				return err
			},
			"Renew": func() error { _, err := tc.s.Renew(ctx, "s/k", held, time.Second); return err },
			"Checkpoint": func() error {
				_, err := tc.s.Checkpoint(ctx, "s/k", held, lease.Checkpoint{Sequence: "1"})
				return err
			},
			"CheckpointOrdered": func() error {
				_, err := tc.s.CheckpointOrdered(ctx, "s/k", held, lease.Checkpoint{Sequence: "1"}, 1)
				return err
			},
			"Read":       func() error { _, err := tc.s.Read(ctx, "s/k"); return err },
			"Release":    func() error { _, err := tc.s.Release(ctx, "s/k", held); return err },
			"Delete":     func() error { _, err := tc.s.Delete(ctx, "s/k", 1); return err },
			"List":       func() error { _, err := tc.s.List(ctx); return err },
			"ListPrefix": func() error { _, err := tc.s.ListPrefix(ctx, "s/"); return err },
		}
		if tc.name == "DynamoDB" {
			calls["ReadWeak"] = func() error { _, err := dynamo.ReadWeak(ctx, "s/k"); return err }
			calls["EnsureTable"] = func() error { return dynamo.EnsureTable(ctx) }
		}
		for method, call := range calls {
			t.Run(tc.name+"."+method, func(t *testing.T) {
				err := call()
				if !errors.Is(err, lease.ErrInvalidArgument) {
					t.Fatalf("err = %v, want ErrInvalidArgument", err)
				}
				for _, want := range []string{tc.name + "." + method + ": nil context", "pass context.Background()"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not say %q", err, want)
					}
				}
			})
		}
	}
}
