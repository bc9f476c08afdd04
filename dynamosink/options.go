package dynamosink

import (
	"fmt"

	"github.com/gostream/kinesub"
)

// Option configures a Sink (New).
type Option func(*config)

type config struct {
	orderKey func(*kinesub.Message) string
	prefix   string
	errs     []error
}

func defaultConfig() config {
	return config{orderKey: (*kinesub.Message).PartitionKey}
}

// Limits of the options' ranges.
const (
	// MaxKeyPrefix is the longest WithKeyPrefix, in bytes: a mark's key (prefix and order key)
	// must fit DynamoDB's 2048-byte partition key.
	MaxKeyPrefix = 1024
	// MaxItems is how many items of its own a caller may write with one record: DynamoDB
	// takes 100 items in a transaction, and the mark is one of them.
	MaxItems = 99
)

func (c *config) reject(option string, value any, allowed string) {
	c.errs = append(c.errs, fmt.Errorf("%w: %s(%v): %s", ErrInvalidOption, option, value, allowed))
}

// WithOrderKey sets the key a record's mark is kept under, overriding the default, the
// record's partition key. Give it the function given to Process's kinesub.WithOrderKey, so
// that the records of a key are handled one at a time: the mark orders a key's records, and
// two of them applied at once would have the later one refuse the earlier as older. nil is
// rejected.
func WithOrderKey(f func(*kinesub.Message) string) Option {
	return func(c *config) {
		if f == nil {
			c.reject("WithOrderKey", "nil", "must be a function")
			return
		}
		c.orderKey = f
	}
}

// WithKeyPrefix puts prefix before every order key in the mark table (default none), so that
// several streams or applications can share one table: "orders/" and "billing/" keep apart
// marks of equal partition keys. At most MaxKeyPrefix bytes.
func WithKeyPrefix(prefix string) Option {
	return func(c *config) {
		if len(prefix) > MaxKeyPrefix {
			c.reject("WithKeyPrefix", fmt.Sprintf("%d bytes", len(prefix)), fmt.Sprintf("at most %d bytes", MaxKeyPrefix))
			return
		}
		c.prefix = prefix
	}
}
