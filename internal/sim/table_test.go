package sim

import (
	"testing"

	"github.com/gostream/kinesub/lease"
	"github.com/gostream/kinesub/lease/leasetest"
)

// TestTableConforms holds the model of the lease table to the suite every lease.Store passes,
// so that what the simulation finds holds for the memory and DynamoDB stores too.
func TestTableConforms(t *testing.T) {
	leasetest.Run(t, func(t *testing.T) lease.Store {
		return &Client{T: NewTable(), Name: "conformance", Gate: &Gate{}}
	})
}
