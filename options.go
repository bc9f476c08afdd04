package kinesub

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/gostream/kinesub/lease"
)

// Option configures Subscribe. Options are validated before any I/O; an invalid value makes
// Subscribe return an error wrapping ErrInvalidOption that names the option and its range.
type Option func(*config)

type config struct {
	store              lease.Store
	owner              string // WithOwner's name with this process's incarnation: the first heartbeat row's
	ownerBase          string // WithOwner's name
	batchSize          int
	pollInterval       time.Duration
	idlePollInterval   time.Duration // meaningful once idlePollSet; else 2 × pollInterval
	idlePollSet        bool
	shardSyncInterval  time.Duration
	leaseTTL           time.Duration
	createShards       int // 0: do not create
	logger             *slog.Logger
	checkpointInterval time.Duration
	maxInFlight        int
	maxInFlightBytes   int
	bufferPages        int
	requestTimeout     time.Duration
	balanceInterval    time.Duration // meaningful once balanceSet; else 2 × leaseTTL
	balanceSet         bool
	startAt            *Position
	initialPos         *Position
	source             func(shard string) shardSource // nil: the GetRecords poller; set by tests
	meterProvider      metric.MeterProvider
	fanOut             *fanOutConfig        // nil: poll with GetRecords (efo_options.go)
	clientRegion       string               // the Kinesis client's region; "" when unknown (a fake)
	listener           ShardListener        // WithShardListener (listener.go)
	tracerProvider     trace.TracerProvider // nil: no tracing (WithTracerProvider, tracing.go)
	scaleTarget        float64              // WithScaleTarget
	directGetRecords   bool                 // WithDirectGetRecords (poll.go)
	probes             *probeSet            // tests only (probe.go)

	errs []error // collected while applying options, reported by validate
}

func defaultConfig() config {
	return config{
		batchSize:          1000,
		pollInterval:       time.Second,
		shardSyncInterval:  10 * time.Second,
		leaseTTL:           10 * time.Second,
		checkpointInterval: 5 * time.Second,
		maxInFlight:        10000,
		maxInFlightBytes:   64 << 20,
		bufferPages:        4,
		requestTimeout:     10 * time.Second,
		owner:              defaultOwner(),
		logger:             slog.New(slog.DiscardHandler),
		meterProvider:      otel.GetMeterProvider(),
		scaleTarget:        defaultScaleTarget,
	}
}

// Limits of the options' ranges.
const (
	minBatchSize   = 1
	maxBatchSize   = 10000
	minInterval    = time.Millisecond
	maxInterval    = time.Hour
	minLeaseTTL    = 10 * time.Millisecond
	maxLeaseTTL    = time.Hour
	maxCreate      = 10000
	maxMaxInFlight = 10_000_000
	maxInFlightMax = 1 << 40 // bytes
	maxBufferPages = 10_000
	minTimeout     = 10 * time.Millisecond
	maxTimeout     = 5 * time.Minute
)

func (c *config) validate() error {
	if len(c.errs) > 0 {
		return c.errs[0]
	}
	switch {
	case c.batchSize < minBatchSize || c.batchSize > maxBatchSize:
		return optionError("WithBatchSize", c.batchSize, fmt.Sprintf("must be between %d and %d", minBatchSize, maxBatchSize))
	case c.pollInterval < minInterval || c.pollInterval > maxInterval:
		return optionError("WithPollInterval", c.pollInterval, fmt.Sprintf("must be between %v and %v", minInterval, maxInterval))
	case c.shardSyncInterval < minInterval || c.shardSyncInterval > maxInterval:
		return optionError("WithShardSyncInterval", c.shardSyncInterval, fmt.Sprintf("must be between %v and %v", minInterval, maxInterval))
	case c.leaseTTL < minLeaseTTL || c.leaseTTL > maxLeaseTTL:
		return optionError("WithLeaseTTL", c.leaseTTL, fmt.Sprintf("must be between %v and %v", minLeaseTTL, maxLeaseTTL))
	case c.createShards < 0 || c.createShards > maxCreate:
		return optionError("WithCreateIfMissing", c.createShards, fmt.Sprintf("must be between 1 and %d shards", maxCreate))
	case c.checkpointInterval < 0 || c.checkpointInterval > maxInterval:
		return optionError("WithCheckpointInterval", c.checkpointInterval, fmt.Sprintf("must be between 0 (every advance) and %v", maxInterval))
	case c.maxInFlight < 1 || c.maxInFlight > maxMaxInFlight:
		return optionError("WithMaxInFlight", c.maxInFlight, fmt.Sprintf("must be between 1 and %d", maxMaxInFlight))
	case c.maxInFlightBytes < 1 || c.maxInFlightBytes > maxInFlightMax:
		return optionError("WithMaxInFlightBytes", c.maxInFlightBytes, fmt.Sprintf("must be between 1 and %d (1 TiB)", maxInFlightMax))
	case c.bufferPages < 0 || c.bufferPages > maxBufferPages:
		return optionError("WithBufferPages", c.bufferPages, fmt.Sprintf("must be between 0 and %d", maxBufferPages))
	case c.requestTimeout < minTimeout || c.requestTimeout > maxTimeout:
		return optionError("WithRequestTimeout", c.requestTimeout, fmt.Sprintf("must be between %v and %v", minTimeout, maxTimeout))
	case c.idlePollSet && (c.idlePollInterval < c.pollInterval || c.idlePollInterval > maxInterval):
		return optionError("WithIdlePollInterval", c.idlePollInterval, fmt.Sprintf("must be between the poll interval (%v) and %v", c.pollInterval, maxInterval))
	case c.balanceSet && (c.balanceInterval < minInterval || c.balanceInterval > maxInterval):
		return optionError("WithBalanceInterval", c.balanceInterval, fmt.Sprintf("must be between %v and %v", minInterval, maxInterval))
	case c.store == nil:
		return errNoLeaseStore
	}
	// The defaults that follow another option's value.
	if !c.balanceSet {
		c.balanceInterval = 2 * c.leaseTTL
	}
	if !c.idlePollSet {
		c.idlePollInterval = min(2*c.pollInterval, maxInterval)
	}
	return nil
}

// errNoLeaseStore is Subscribe's error without WithLeaseStore. An in-memory default would be
// shared by nothing: every instance of a service that runs twice would read every record, and
// nothing would say so.
var errNoLeaseStore = optionError("WithLeaseStore", "missing",
	"must be given: lease.NewMemory() for one process (tests, a single instance whose checkpoints need not survive a restart), "+
		"or lease.NewDynamoDB(client, table) shared by every instance of the service")

func (c *config) reject(option string, value any, allowed string) {
	c.errs = append(c.errs, optionError(option, value, allowed))
}

func defaultOwner() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "host"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// WithLeaseStore sets where shard leases and checkpoints live. It is required: there is no
// default. lease.NewMemory() suits one process whose checkpoints need not survive a restart
// (tests, a tool run once); every instance of a service that runs more than once must share
// one lease.NewDynamoDB table, or each would read every record. nil is rejected.
func WithLeaseStore(s lease.Store) Option {
	return func(c *config) {
		if v := reflect.ValueOf(s); s == nil || v.Kind() == reflect.Pointer && v.IsNil() {
			c.reject("WithLeaseStore", "nil", "must be a lease.Store")
			return
		}
		c.store = s
	}
}

// WithOwner sets the name this subscriber writes into the leases it holds, followed by "#" and
// sixteen hex digits drawn at Subscribe (so the leases say "name#1f2e3d4c5b6a7988"): every Subscribe is
// an owner of its own, and a restarted instance never mistakes its predecessor's leases for its
// own. The default name is "<hostname>-<pid>-<random>". The name must be 1 to 256 characters
// (Unicode code points) of valid UTF-8.
func WithOwner(owner string) Option {
	return func(c *config) {
		if n := utf8.RuneCountInString(owner); n < 1 || n > 256 || !utf8.ValidString(owner) {
			c.reject("WithOwner", fmt.Sprintf("%q", owner), "must be 1 to 256 characters of valid UTF-8")
			return
		}
		c.owner = owner
	}
}

// WithBatchSize sets the most records one GetRecords call asks for, overriding the default 1000.
// Range 1 to 10000 (the service's limit).
func WithBatchSize(n int) Option { return func(c *config) { c.batchSize = n } }

// WithPollInterval sets how long a reader waits after an empty GetRecords response before it
// polls that shard again, overriding the default 1s (the service's advice for idle shards).
// After a non-empty response the reader polls again at once, within the per-shard rate limit.
// Range 1ms to 1h.
func WithPollInterval(d time.Duration) Option { return func(c *config) { c.pollInterval = d } }

// WithIdlePollInterval sets how long a reader waits after an empty GetRecords response once its
// shard has gone quiet: quietAfter (10) empty responses in a row at the tip of the shard
// (MillisBehindLatest 0). The first record read sets it back to WithPollInterval. It
// overrides the default, twice the poll interval (2s by default): a quiet shard costs half the
// calls, and a record that ends a quiet spell waits up to this long instead of up to the poll
// interval. Shards shows a quiet shard (ShardStatus.Quiet). Setting it to the poll interval
// polls every shard alike. Range: the poll interval to 1h.
func WithIdlePollInterval(d time.Duration) Option {
	return func(c *config) { c.idlePollInterval, c.idlePollSet = d, true }
}

// WithShardSyncInterval sets how often the shard list is refreshed to find new shards (after a
// split or a merge) and free leases, overriding the default 10s. Range 1ms to 1h.
func WithShardSyncInterval(d time.Duration) Option {
	return func(c *config) { c.shardSyncInterval = d }
}

// WithLeaseTTL sets how long this subscriber's hold on its shards lives unless renewed,
// overriding the default 10s. The hold is one heartbeat row, "<stream>/~owner/<owner>",
// renewed every TTL/3 on its own schedule, whatever the consumer does; the shard leases are
// bound to it and have no expiry of their own, so an instance writes to renew once per TTL/3
// however many shards it holds. Its readers stop 2/3 TTL after the last renewal that
// succeeded, however the lease store fails (errors or hangs); a peer takes the row over only
// once its counter stood still for 3/4 TTL, timed on the peer's own monotonic clock, and a
// subscriber that steals a lease for balance waits 3/4 TTL before reading it, so the two never
// read a shard at once. Clock offsets between hosts do not matter to either rule. A subscriber
// that dies holds its shards until a peer took its row over, then the peer takes them all at
// once (docs/leases.md).
//
// Instances sharing a lease table may use different TTLs, as in a rolling change of this
// option: each heartbeat row notes its holder's TTL, peers take a row over by the TTL it notes,
// and a steal waits 3/4 of the longest TTL among the rows it has seen. Range 10ms to 1h.
func WithLeaseTTL(d time.Duration) Option { return func(c *config) { c.leaseTTL = d } }

// WithCreateIfMissing makes Subscribe create the stream with the given number of shards
// (provisioned mode) when it does not exist, and wait until it is active. By default a missing
// stream is an error (ErrStreamNotFound). Range 1 to 10000.
func WithCreateIfMissing(shards int) Option {
	return func(c *config) {
		if shards < 1 || shards > maxCreate {
			c.reject("WithCreateIfMissing", shards, fmt.Sprintf("must be between 1 and %d shards", maxCreate))
			return
		}
		c.createShards = shards
	}
}

// WithLogger sets the logger; the default discards everything. Child loggers carry the keys
// "stream" and "shard_id". nil is rejected.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.reject("WithLogger", "nil", "must be a *slog.Logger")
			return
		}
		c.logger = l
	}
}

// WithMeterProvider sets where the subscriber's OpenTelemetry metrics go (listed in the
// repository's docs/metrics.md). The default is the global provider, otel.GetMeterProvider(), which
// discards everything until the application installs one with otel.SetMeterProvider (before
// or after Subscribe). nil is rejected.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if v := reflect.ValueOf(mp); mp == nil || v.Kind() == reflect.Pointer && v.IsNil() {
			c.reject("WithMeterProvider", "nil", "must be a metric.MeterProvider")
			return
		}
		c.meterProvider = mp
	}
}

// WithTracerProvider makes the subscriber trace what it delivers with OpenTelemetry (see the
// repository's docs/tracing.md): a span per record delivered to Messages, All or Batches,
// ended at its Ack or Nack and linked to the producer's span; and a span per handler call of
// Process, ended when the handler returns, a child of the producer's span, and carried by the
// handler's ctx. The producer's span context is read from the record's headers (W3C trace
// context, as a Publisher with WithPublishTracerProvider writes it). The subscriber changes no
// record: it is the Publisher's tracing that wraps every record in the header envelope, which
// a KCL application still reading the stream sees in its data (docs/migrating.md, "Running the
// KCL and kinesub side by side"). The default is no tracing, at no cost: the global provider is
// not used. nil is rejected.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if isNilProvider(tp) {
			c.reject("WithTracerProvider", "nil", "must be a trace.TracerProvider")
			return
		}
		c.tracerProvider = tp
	}
}

// WithCheckpointInterval sets how often each shard's acknowledged watermark is written to the
// lease store, overriding the default 5s. Ack itself never waits on the store: it advances the
// watermark in memory, and a per-shard flusher writes the newest one at most once per interval,
// and always at the shard's end, on lease release, before a seek and on Close. 0 writes on every
// advance. Range 0 to 1h. Commit forces a flush.
func WithCheckpointInterval(d time.Duration) Option {
	return func(c *config) { c.checkpointInterval = d }
}

// WithMaxInFlight caps the records per shard between the oldest one not yet settled and the
// newest one fetched, settled or not, overriding the default 10000: what the checkpoint cannot
// pass yet. A reader at the cap stops fetching until acks free a batch's worth of room (or half
// the cap, when that is less), and never asks for more than the room left, so memory stays
// bounded by roughly cap × (record size + about 250 bytes of bookkeeping) × owned shards
// whatever the consumer does. So one record never settled (a lost Ack, a Nack) stops its shard
// once cap more were fetched after it: Shards shows it (OldestUnsettled, and WaitingForAcks),
// and so does the kinesub.in_flight.oldest_age metric. Range 1 to 10000000.
func WithMaxInFlight(n int) Option { return func(c *config) { c.maxInFlight = n } }

// WithMaxInFlightBytes caps the data of a shard's delivered-but-unsettled records (counted as
// WithMaxInFlight counts them), overriding the default 64 MiB per shard. WithMaxInFlight alone
// would let 10000 records of 1 MiB hold 10 GiB per shard. A reader fetches again only once at
// most half of the cap is held, and asks for no more records than fit, estimated from the size
// of those it fetched last, so a shard holds at most the cap plus one record in the steady
// state, and the cap plus one GetRecords response (at most 10 MiB) when record sizes jump.
// Range 1 to 1 TiB.
func WithMaxInFlightBytes(n int) Option { return func(c *config) { c.maxInFlightBytes = n } }

// WithBufferPages sets how many fetched pages (one GetRecords response each) wait, across all
// shards, between the readers and the consumer, overriding the default 4. Readers hand over
// whole pages, not records; memory stays bounded by WithMaxInFlight, which counts buffered
// records too. Range 0 to 10000.
func WithBufferPages(n int) Option { return func(c *config) { c.bufferPages = n } }

// WithRequestTimeout sets the deadline of each call to Kinesis and to the lease store,
// overriding the default 10s. Range 10ms to 5m.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) { c.requestTimeout = d }
}

// WithBalanceInterval sets how often this subscriber compares its share of the leases with the
// other live owners' and takes one lease from the most loaded when under its fair share,
// overriding the default of twice the lease TTL. Range 1ms to 1h.
func WithBalanceInterval(d time.Duration) Option {
	return func(c *config) { c.balanceInterval, c.balanceSet = d, true }
}

// WithScaleTarget sets the utilization the fleet's consumers should run at, from which each
// subscriber works out the number of instances the fleet needs: the gauge
// kinesub.fleet.instances_needed, ceil(Σ utilization / target) over the live instances, at
// least 1 and at most the shards open for reading (the formula and how to scale a Deployment
// on it are in the repository's docs/metrics.md). A consumer's utilization is the share of
// time it was not waiting for records (kinesub.consumer.utilization). The default is 0.7:
// headroom for bursts and for the shards a failed instance leaves. Every instance sharing a
// lease table should use one target. Range (0, 1]: above 0 and at most 1.
func WithScaleTarget(u float64) Option {
	return func(c *config) {
		if !(u > 0 && u <= 1) { // NaN too
			c.reject("WithScaleTarget", u, "must be above 0 and at most 1")
			return
		}
		c.scaleTarget = u
	}
}

// WithStartAt opens every shard at p, ahead of any stored checkpoint: exactly a stream-wide
// Seek at the instant Subscribe is called (Latest is the tip as of then). It is a replay tool: every shard this subscriber
// opens for the first time opens at p, including shards it takes over from a peer later. To
// choose only where a new application starts, use WithInitialPosition. p must be stream-wide.
func WithStartAt(p Position) Option {
	return streamWideOption("WithStartAt", p, func(c *config) { c.startAt = &p })
}

// WithInitialPosition sets where a shard that has no checkpoint yet opens, overriding the
// default Latest: the tip as of the Subscribe call, so that every record published after
// Subscribe was called is read, however late the shard's reader opens (it opens at the
// records that arrived from then on, reaching 5 s further back for the offset between this
// host's clock and the service's: a few older records may come too). Horizon() makes a new
// application read everything retained. Shards with a checkpoint resume after it. The first
// reader of a shard records where it opened, so a later owner (another instance, or this one
// restarted) opens there too, not at its own Subscribe's tip. p must be stream-wide.
//
// p applies to every shard the application starts, the children of a split or merge included,
// in a fleet as in one instance: a parent without a lease row is read from p (a parent closed
// before p has nothing there), and a parent read from such a start to its end records the
// instant on its SHARD_END, where its children open whichever instance takes them (and
// whenever: an instance started or restarted later does not move it to its own Subscribe). So
// a new application on a stream split last week does not replay the children's week. A child
// of a parent read from a checkpoint, or moved by a Seek, or whose SHARD_END records no
// instant (written by an earlier version), opens at its oldest record, so that nothing after
// the reshard is skipped; of a merge's parents, one such is enough, and otherwise the child
// opens at the earliest instant its parents record.
func WithInitialPosition(p Position) Option {
	return streamWideOption("WithInitialPosition", p, func(c *config) { c.initialPos = &p })
}

// WithDirectGetRecords makes the readers send GetRecords themselves, as one signed HTTP
// request over the client's own HTTP client, credentials, signer and endpoint, without the
// SDK's middleware stack, and decode the answer themselves. By default every call goes through
// the SDK's request path. The direct path costs an idle shard's poll less than half the CPU
// (docs/performance.md): use it for many shards that are mostly idle, where polling is most of
// the consumer's CPU.
//
// It sends the request the SDK would, with the SDK's own user agent, invocation ID and
// attempt headers, and returns the SDK's typed errors in the SDK's wrapping. It skips what
// the SDK's path would run for that client: APIOptions middleware, interceptors, the
// Retryer, logging, the SDK's tracing and metrics, and any context value the SDK's
// middleware sets for the HTTP client to read. So Subscribe refuses it, with an error
// wrapping ErrInvalidOption that says why, before any I/O, for a client whose options would
// make its request differ: APIOptions or interceptors, a ClientLogMode, a tracer or meter
// provider, a Retryer other than the SDK's standard one (the adaptive one limits the rate of
// requests on the client), auth schemes, an auth scheme resolver, endpoint resolver or
// protocol other than the SDK's defaults, an HTTPClient other than the SDK's BuildableClient
// or an *http.Client over an *http.Transport (a RoundTripper of one's own may read those
// context values), anonymous credentials, a FIPS pseudo-region. DisableHTTPS is followed.
//
// A direct call that gets no answer (a transport error, a body cut short) is made again
// through the SDK; after three in a row that the SDK's path answered, that shard's reader
// keeps to the SDK's path. An answer the direct path does not handle as the SDK does (an error
// that is not one of GetRecords' own, such as an expired signature, or a body it cannot
// decode) is returned as it is and that reader's later calls go through the SDK. Each
// fallback is counted in kinesub.getrecords.fallbacks by reason, and the first of each reason
// is logged at Warn. With WithEnhancedFanOut, which reads without GetRecords, it changes
// nothing but these checks.
func WithDirectGetRecords() Option { return func(c *config) { c.directGetRecords = true } }

// withClientRegion records the Kinesis client's region, which errors about a stream given by
// ARN compare with the ARN's. Subscribe adds it.
func withClientRegion(region string) Option { return func(c *config) { c.clientRegion = region } }

// streamWideOption applies set when p is stream-wide, and rejects p otherwise.
func streamWideOption(name string, p Position, set func(*config)) Option {
	return func(c *config) {
		if !p.streamWide() {
			c.reject(name, p, "must be a stream-wide position: Horizon(), Latest() or AtTimestamp(t)")
			return
		}
		set(c)
	}
}
