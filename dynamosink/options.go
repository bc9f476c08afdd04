package dynamosink

import (
	"fmt"
	"strings"
	"time"

	"github.com/gostream/kinesub"
)

// Option configures a Sink (New).
type Option func(*config)

type config struct {
	orderKey func(*kinesub.Message) string
	prefix   string
	stream   string
	leases   string
	epoch    func(*kinesub.Message) int64
	ttl      time.Duration
	now      func() time.Time
	errs     []error
}

func defaultConfig() config {
	return config{orderKey: (*kinesub.Message).PartitionKey, now: time.Now}
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

// WithOrderKey sets the key a record's mark is kept under (with its stream and shard),
// overriding the default, the record's partition key. Give it the function given to Process's
// kinesub.WithOrderKey, so that the records of a key in a shard are handled one at a time, in
// order: the mark orders them, and of two applied at once the later could pass the earlier,
// which would then be refused (ErrReplay under a broken contract). A function returning "" for
// every record keeps one mark per shard. nil is rejected.
func WithOrderKey(f func(*kinesub.Message) string) Option {
	return func(c *config) {
		if f == nil {
			c.reject("WithOrderKey", "nil", "must be a function")
			return
		}
		c.orderKey = f
	}
}

// WithKeyPrefix puts prefix before every mark's key in the mark table (default none), so that
// several applications can share one table: "orders/" and "billing/" keep apart the marks of
// equal keys. Two Sinks on one table need different prefixes: a Sink without its own would
// take the other's marks for its own (ErrOtherWrites when it sees it). At most MaxKeyPrefix
// bytes.
func WithKeyPrefix(prefix string) Option {
	return func(c *config) {
		if len(prefix) > MaxKeyPrefix {
			c.reject("WithKeyPrefix", fmt.Sprintf("%d bytes", len(prefix)), fmt.Sprintf("at most %d bytes", MaxKeyPrefix))
			return
		}
		c.prefix = prefix
	}
}

// WithStream sets the identity of the stream the Sink's records come from (default empty),
// kept in every mark's key: marks of different identities never meet. Give a Sink that applies
// the records of several streams one Sink per stream, each with its stream's name; and when a
// stream is deleted and created again under its name, give the new one a new identity (its
// name and creation time, say), since its shards are numbered afresh. At most 256 bytes, no
// '|'.
func WithStream(id string) Option {
	return func(c *config) {
		if len(id) > 256 || strings.Contains(id, "|") {
			c.reject("WithStream", id, "at most 256 bytes, without '|'")
			return
		}
		c.stream = id
	}
}

// WithLeaseTable sets the identity of the lease table the records' holdings are of (default
// empty: none): the name of the table given to lease.NewDynamoDB, say. A record is refused as
// superseded (ErrSuperseded) when its key's mark was written under a later holding of its
// shard, which lease counters tell only within one lease table: so holdings are compared only
// when the mark and the record carry the same non-empty identity. A new lease table restarts
// the counters; give it a new identity, and the marks written under the old one stop fencing
// (they still tell replays by position). Without it no holding is refused: an instance that
// lost its shard and applies a record above the mark applies it in order, as the new holder
// would have (see doc.go). At most 256 bytes.
func WithLeaseTable(id string) Option {
	return func(c *config) {
		if len(id) > 256 {
			c.reject("WithLeaseTable", fmt.Sprintf("%d bytes", len(id)), "at most 256 bytes")
			return
		}
		c.leases = id
	}
}

// WithEpoch sets the replay epoch of each record (default 0 for every record): a record of a
// higher epoch than its key's mark is applied whatever its position, and its mark then refuses
// the records of lower epochs (ErrSuperseded, with SupersededError.Epoch). To reprocess records
// already applied, seek their shards back (kinesub.Seeker) and raise the epoch of the records
// read after the seek, from a value your seek also sets: a seek back with the same epoch
// finds every record it delivers again a replay. f runs once per Apply and must return 0 to
// MaxEpoch; nil is rejected.
func WithEpoch(f func(*kinesub.Message) int64) Option {
	return func(c *config) {
		if f == nil {
			c.reject("WithEpoch", "nil", "must be a function")
			return
		}
		c.epoch = f
	}
}

// WithMarkTTL writes, with every mark, its expiry ttl later in TTLAttribute (default 0: none,
// marks are kept forever), for DynamoDB's time to live, which you enable on the table
// (UpdateTimeToLive, attribute TTLAttribute). A key's mark must outlive every delivery of its
// records: a record delivered again after its key's mark expired (a crash before its checkpoint
// after a long stall, a seek back, a redrive) is applied again. So ttl must exceed how long a
// record can stay unchecked plus any seek back you may make: at least the stream's retention
// if you seek to its start. Range 0 or 1 minute to 10 years.
func WithMarkTTL(ttl time.Duration) Option {
	return func(c *config) {
		if ttl != 0 && (ttl < time.Minute || ttl > 10*365*24*time.Hour) {
			c.reject("WithMarkTTL", ttl, "0 (none) or 1m to 10 years")
			return
		}
		c.ttl = ttl
	}
}
