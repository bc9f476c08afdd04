package lease_test

import (
	"testing"

	"github.com/gostream/kinesub/lease"
	"github.com/gostream/kinesub/lease/leasetest"
)

func TestMemory(t *testing.T) {
	leasetest.Run(t, func(*testing.T) lease.Store { return lease.NewMemory() })
}
