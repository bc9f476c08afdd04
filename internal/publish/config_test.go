package publish

import (
	"testing"
	"time"
)

// TestPublishBackoff: the pause after refusals in a row grows from the first to the limit,
// random within its range; after WithPublishRetries' largest count, 100, it stays within it.
func TestPublishBackoff(t *testing.T) {
	c := Config{BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond}
	for retry, ceil := range []time.Duration{10, 20, 40, 80, 100, 100} {
		ceil *= time.Millisecond
		lo, hi := time.Duration(1<<62), time.Duration(0)
		for range 2000 {
			d := c.Backoff(retry)
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo < c.BackoffMin || hi > ceil {
			t.Errorf("Backoff(%d) in [%v, %v], want within [%v, %v]", retry, lo, hi, c.BackoffMin, ceil)
		}
		if retry > 0 && hi-lo < (ceil-c.BackoffMin)/2 {
			t.Errorf("Backoff(%d) in [%v, %v]: too little jitter for [%v, %v]", retry, lo, hi, c.BackoffMin, ceil)
		}
	}
	big := Config{BackoffMin: time.Minute, BackoffMax: 5 * time.Minute}
	if d := big.Backoff(100); d < time.Minute || d > 5*time.Minute {
		t.Errorf("Backoff(100) = %v, want within [1m, 5m]", d)
	}
}
