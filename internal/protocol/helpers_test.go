package protocol

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// seeded returns a source of randomness for the test and logs its seed if the test fails;
// KINESUB_SEED replays a seed.
func seeded(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("KINESUB_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "KINESUB_SEED")
		seed = n
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("random seed %d (rerun with KINESUB_SEED=%d)", seed, seed)
		}
	})
	return rand.New(rand.NewPCG(seed, 0))
}

// globalRand draws from math/rand/v2's top-level source.
type globalRand struct{}

func (globalRand) IntN(n int) int { return rand.IntN(n) }
