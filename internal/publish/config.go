package publish

import (
	"math/rand/v2"
	"time"
)

// Config is what a publisher's options set of how its batches are sent.
type Config struct {
	Retries    int           // WithPublishRetries
	BackoffMin time.Duration // WithPublishBackoff
	BackoffMax time.Duration
	Timeout    time.Duration // WithPublishTimeout
	Aggregate  bool          // WithPublishAggregation
}

// Backoff returns the wait after refusal number retry+1 in a row: random between BackoffMin
// and BackoffMin×2^retry, capped at BackoffMax.
func (c *Config) Backoff(retry int) time.Duration {
	ceil := c.BackoffMin
	for i := 0; i < retry && ceil < c.BackoffMax; i++ {
		ceil *= 2
	}
	ceil = min(ceil, c.BackoffMax)
	return c.BackoffMin + rand.N(ceil-c.BackoffMin+1)
}
