package kinesub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/gostream/kinesub/internal/kinesisiface"
	"github.com/gostream/kinesub/internal/telemetry"
)

const (
	cancelDrain  = 2 * time.Second  // drain allowed when Subscribe's ctx is cancelled
	defaultDrain = 10 * time.Second // drain allowed by Close when its ctx has no deadline
	errorsBuffer = 64
)

// Subscriber reads every shard of one stream that it holds a lease for and delivers the
// records on Messages (or to All, Batches). Create one with Subscribe; it is safe for
// concurrent use.
type Subscriber struct {
	cfg     config
	client  kinesisiface.Kinesis
	direct  *directPath // GetRecords without the SDK's middleware (WithDirectGetRecords); nil: through the SDK
	stream  string      // the stream's name, also when Subscribe was given its ARN
	ref     streamRef
	log     *slog.Logger
	metrics *metrics // OpenTelemetry instruments (metrics.go)
	seeker  *Seeker
	changes *changeRow // the stream's change row (changes.go)
	// subscribedAt is when Subscribe was called: a shard without a checkpoint opens at the tip
	// as of then (WithInitialPosition).
	subscribedAt time.Time

	env    *shardEnv    // what every shard held here shares (shard.go)
	table  *shardTable  // the shards known and held; its own lock (registry.go)
	coord  *coordinator // lists, claims, balances; owned by its goroutine (coordinator.go)
	tenure *tenure      // the heartbeat row and the readers' deadline (tenure.go)
	del    *delivery    // readers → consumer: the hand-off and the Messages dispatcher (dispatch.go)
	errs   *reporter    // Errors
	fleet  fleetFigures // the fleet's size, for the metrics (scale.go)

	runCtx  context.Context // ends when the subscription stops reading
	stopRun context.CancelFunc
	bgCtx   context.Context // ends at Close's deadline: bounds every background store call
	stopBg  context.CancelFunc
	failed  chan error    // a fatal error, for the watcher to shut down with
	done    chan struct{} // closed once the subscription is closed
	// coordinating is closed when the coordinator has returned, after every shard's life;
	// watching waits for the watcher, which turns Subscribe's ctx ending or a fatal error into
	// a shutdown.
	coordinating chan struct{}
	watching     sync.WaitGroup
	// stopTenure ends keepTenure, and tenureDone is closed when it has returned: Close stops it
	// once every shard drained, before it drops the heartbeat row.
	stopTenure context.CancelFunc
	tenureDone chan struct{}

	closeOnce sync.Once
	errMu     sync.Mutex
	err       error // why it ended: Err
	closeErr  error // Close's result
}

// Subscribe starts consuming stream, given by name or by ARN
// ("arn:aws:kinesis:<region>:<account>:stream/<name>"), and returns once the stream is known to
// exist (or was created, with WithCreateIfMissing) and the lease store answered. Options are
// validated before any I/O; WithLeaseStore is required. A nil ctx is an error wrapping
// ErrInvalidOption.
//
// ctx is the subscription's lifetime, not only Subscribe's: the subscription runs until
// Close, a fatal error (the stream was deleted), or until ctx ends, which closes it with a
// two-second drain; Err then wraps context.Cause(ctx). Pass a context that lives as long as
// the consumer should (not a request's, and not one with a deadline meant for Subscribe
// alone).
func Subscribe(ctx context.Context, client *kinesis.Client, stream string, opts ...Option) (*Subscriber, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: client is nil", ErrInvalidOption)
	}
	return subscribe(ctx, client, stream, append(opts[:len(opts):len(opts)], withClientPerSubscription(client), withClientRegion(client.Options().Region))...)
}

func subscribe(ctx context.Context, client kinesisiface.Kinesis, stream string, opts ...Option) (*Subscriber, error) {
	if ctx == nil {
		return nil, nilContext("Subscribe")
	}
	subscribedAt := time.Now()
	cfg := defaultConfig()
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: option %d of Subscribe is nil", ErrInvalidOption, i)
		}
		o(&cfg)
	}
	ref, err := parseStream("Subscribe", stream)
	if err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// Each process holds leases under an owner name of its own, even a restarted one that keeps
	// its WithOwner name: its heartbeat row is its own, and the leases of a process that died are
	// freed when its row is found lapsed, never confused with its successor's.
	cfg.ownerBase = cfg.owner
	cfg.owner += "#" + cfg.probes.newIncarnation()
	m, err := newMetrics(cfg.meterProvider, ref.name)
	if err != nil {
		return nil, err
	}
	directPath, err := newDirectPath(&cfg, client, m, cfg.logger.With(logStream, ref.name))
	if err != nil {
		return nil, err
	}
	client = telemetry.Kinesis{Client: client, Requests: m.req}
	cfg.store = m.store(cfg.store, ref.name+"/")
	changes := newChangeRow(ref.name)
	s := &Subscriber{
		metrics:      m,
		cfg:          cfg,
		client:       client,
		direct:       directPath,
		stream:       ref.name,
		ref:          ref,
		log:          cfg.logger.With(logStream, ref.name),
		changes:      changes,
		subscribedAt: subscribedAt,
		table:        newShardTable(cfg.startAt, subscribedAt),
		del:          newDelivery(newHandoff(cfg.bufferPages), m, cfg.probes),
		errs:         newReporter(),
		failed:       make(chan error, 1),
		done:         make(chan struct{}),
		coordinating: make(chan struct{}),
	}
	s.seeker = &Seeker{s: s}
	s.coord = newCoordinator(s)
	s.tenure = newTenure(cfg.owner, s.ownerKeyOf(cfg.owner), cfg.leaseTTL, func() { s.loseAll("not renewed in time") })
	s.tenure.probes = cfg.probes
	if err := s.ensureStream(ctx); err != nil {
		return nil, err
	}
	if err := s.checkStore(ctx); err != nil {
		return nil, err
	}
	if err := s.registerFanOut(ctx); err != nil {
		return nil, err
	}
	if err := s.checkPeers(ctx); err != nil {
		return nil, err
	}
	if err := m.observe(s.table.reading, s.fleetNow); err != nil {
		return nil, err
	}
	s.runCtx, s.stopRun = context.WithCancel(context.Background())
	s.bgCtx, s.stopBg = context.WithCancel(context.Background())
	s.env = &shardEnv{
		cfg: &s.cfg, store: s.cfg.store, client: client, stream: s.stream, ref: ref,
		hand: s.del.hand, metrics: m, bgCtx: s.bgCtx, runCtx: s.runCtx, done: s.done,
		report: s.report, reportAll: s.reportAll, changed: s.changed, announce: s.announce, fence: s.del.fenceDispatch,
		fail: s.fail, forget: s.coord.forget, source: s.sourceFor, log: s.log,
		tracer: newTracer(cfg.tracerProvider, ref.name),
		loads:  newLoadBook(s.cfg.leaseTTL, s.cfg.balanceInterval),
	}
	s.del.hand.tenure = s.tenure
	s.del.hand.util = s.env.loads.util
	if err := s.join(ctx, false); err != nil {
		s.stopRun()
		s.stopBg()
		m.stop()
		return nil, fmt.Errorf("kinesub: lease store: heartbeat row: %w", err)
	}
	s.noteJoined(ctx)
	// Owned by the subscriber: stop waits for the tenure keeper (tenureDone) and the coordinator
	// (coordinating), which waits for every shard's life; Close waits for the watcher (watching).
	var tenureCtx context.Context
	tenureCtx, s.stopTenure = context.WithCancel(context.Background())
	s.tenureDone = make(chan struct{})
	go func() {
		defer close(s.tenureDone)
		s.keepTenure(tenureCtx)
	}()
	go func() {
		defer close(s.coordinating)
		s.coord.coordinate(s.runCtx)
	}()
	s.watching.Add(1)
	go func() {
		defer s.watching.Done()
		s.watch(ctx)
	}()
	return s, nil
}

// watch shuts the subscription down when Subscribe's ctx ends or a fatal error comes, unless
// Close does first.
func (s *Subscriber) watch(ctx context.Context) {
	var cause error
	drain := cancelDrain
	select {
	case <-ctx.Done():
		cause = fmt.Errorf("%w: %w", ErrSubscriptionEnded, context.Cause(ctx))
		s.log.Info("subscription ended by its context", "cause", context.Cause(ctx))
	case cause = <-s.failed:
		s.log.Error("subscription failed", "err", cause) // also Err(): the one place the cause is in both, for a process that reads neither
	case <-s.runCtx.Done():
		return
	}
	dctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	s.shutdown(dctx, cause)
}

// Log keys carried by the child loggers.
const (
	logStream = "stream"
	logShard  = "shard_id"
)

// ensureStream checks that the stream exists, creating it with WithCreateIfMissing, and waits
// until it can be read.
func (s *Subscriber) ensureStream(ctx context.Context) error {
	created := false
	for {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
		out, err := s.client.DescribeStreamSummary(cctx, &kinesis.DescribeStreamSummaryInput{StreamName: s.ref.streamName(), StreamARN: s.ref.streamARN()})
		cancel()
		var nf *types.ResourceNotFoundException
		switch {
		case errors.As(err, &nf) && s.cfg.createShards > 0 && !created && s.ref.creatable(s.cfg.clientRegion):
			cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
			_, err := s.client.CreateStream(cctx, &kinesis.CreateStreamInput{
				StreamName: aws.String(s.stream), ShardCount: aws.Int32(int32(s.cfg.createShards)),
				StreamModeDetails: &types.StreamModeDetails{StreamMode: types.StreamModeProvisioned},
			})
			cancel()
			var inUse *types.ResourceInUseException
			if err != nil && !errors.As(err, &inUse) {
				return fmt.Errorf("kinesub: create stream %s: %w", s.stream, err)
			}
			created = true
			s.log.Info("stream created", "shards", s.cfg.createShards)
			continue
		case errors.As(err, &nf):
			return s.ref.notFound(s.cfg.clientRegion, created, err)
		case err != nil:
			return fmt.Errorf("kinesub: describe stream %s: %w", s.stream, err)
		}
		switch out.StreamDescriptionSummary.StreamStatus {
		case types.StreamStatusActive, types.StreamStatusUpdating:
			return nil
		case types.StreamStatusDeleting:
			return fmt.Errorf("%w: %s is being deleted", ErrStreamNotFound, s.stream)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kinesub: waiting for stream %s to become active: %w", s.stream, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkStore asks the lease store once, so that a missing table fails Subscribe rather than
// every later round.
func (s *Subscriber) checkStore(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	defer cancel()
	if _, err := s.cfg.store.Read(cctx, s.leaseKey("probe")); err != nil {
		return fmt.Errorf("kinesub: lease store: %w", err)
	}
	return nil
}

func (s *Subscriber) leaseKey(shard string) string { return s.stream + "/" + shard }

// Errors returns non-fatal problems as they happen (a shard's read failed and is retried, a
// lease store call failed, a lease was lost, a record could not be decoded). Reading it is
// optional: when nobody does, the oldest errors are dropped. It is closed with Messages.
func (s *Subscriber) Errors() <-chan error { return s.errs.ch }

// Err returns why the subscription ended, once Messages is closed: nil after Close; an error
// wrapping ErrSubscriptionEnded and context.Cause of Subscribe's ctx when that ctx ended it;
// the fatal cause otherwise (for example ErrStreamNotFound).
func (s *Subscriber) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// StreamName returns the name of the stream being consumed, also when Subscribe was given its
// ARN.
func (s *Subscriber) StreamName() string { return s.stream }

// Commit writes every owned shard's acknowledged watermark to the lease store now, and returns
// once the writes are durable. Ack never waits on the store; Commit is for callers that need a
// checkpoint at a chosen moment. A shard whose lease was lost is skipped. A nil ctx is an
// error wrapping ErrInvalidOption.
func (s *Subscriber) Commit(ctx context.Context) error {
	if ctx == nil {
		return nilContext("Commit")
	}
	ws, open := s.table.held()
	if !open {
		return ErrClosed
	}
	var errs []error
	for _, w := range ws {
		errs = append(errs, w.flush(ctx))
	}
	return errors.Join(errs...)
}

// Seeker returns the Seeker that repositions this subscription.
func (s *Subscriber) Seeker() *Seeker { return s.seeker }

// Close stops reading, lets the deliveries already handed out settle, writes every shard's
// checkpoint, releases every lease so that a peer can take the shards at once (but one stolen
// and not yet read, whose previous owner may still read it: that one expires), and closes
// Messages and Errors. It returns by ctx's deadline (10s from the call when ctx has none):
// the settling ends early enough to leave the final writes the request timeout, or half of
// what is left, and writes still running at the deadline are abandoned. A ctx cancelled
// without a deadline skips the settling but still writes. Each shard that waits for
// deliveries to be settled logs so at Info, with how many and until when. Close returns the
// errors of the final checkpoint and release writes, each a *ShardError naming the shard whose
// checkpoint or release was not written (its deliveries since the last checkpoint are
// delivered again by the next owner, which takes the shard once its lease expires if it was
// not released). A shard with a record that passed its checks and had not reached the
// consumer's code by the deadline is not released either, nor is the heartbeat row deleted
// (a *ShardError with OpDeleteHeartbeat): the next owner takes it once the row lapses, so
// that the record is never handed out while another instance reads the shard. Close also
// waits for a shard handed back for balance and still draining. Every call returns the same
// result, including after the subscription stopped
// on its own (its ctx ended, or a fatal error). A nil ctx is context.Background(): Close
// never refuses.
func (s *Subscriber) Close(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	first := false
	s.closeOnce.Do(func() { first = true })
	if !first {
		<-s.done
		return s.closeErr
	}
	s.stop(ctx, nil)
	s.watching.Wait()
	return s.closeErr
}

// shutdown is Close for the watcher (Subscribe's ctx ended, a fatal error).
func (s *Subscriber) shutdown(ctx context.Context, cause error) {
	first := false
	s.closeOnce.Do(func() { first = true })
	if first {
		s.stop(ctx, cause)
	}
}

// stop closes the subscription, as Close describes; cause is what Err returns.
func (s *Subscriber) stop(ctx context.Context, cause error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(defaultDrain)
	}
	// Every store call still running at the deadline is abandoned, so Close returns by it.
	abort := time.AfterFunc(time.Until(deadline), s.stopBg)
	defer abort.Stop()
	defer s.stopBg()
	// The consumer may settle until only the final writes' share of the time is left.
	reserve := min(s.cfg.requestTimeout, time.Until(deadline)/2)
	drain, cancelDrain := context.WithDeadline(ctx, deadline.Add(-reserve))
	defer cancelDrain()
	write, cancelWrite := context.WithDeadline(s.bgCtx, deadline)
	defer cancelWrite()
	s.errMu.Lock()
	s.err = cause
	s.errMu.Unlock()

	// Stop claiming, and end every shard's generation: what sits in the hand-off was never
	// handed out and replays from the checkpoint, so it is dropped rather than delivered.
	// Each shard then drains and, once all have, releases its lease (ending.release), with
	// the heartbeat row dropped in between: until the leases are released they count this
	// owner live anyway, and once they are, peers take them all in one round. A shard still
	// draining after a hand-back is waited for too: peers take it the moment the row is gone.
	ws, _ := s.table.close()
	var drained sync.WaitGroup
	release := make(chan struct{})
	var errs errList
	s.env.invalidate(ws, &ending{cause: causeClose, why: "subscription closing", drain: drain, write: write,
		drained: &drained, release: release, errs: &errs})
	s.stopRun()
	drained.Wait()
	// Every draining shard wrote its last checkpoint and hands nothing out any more: the
	// heartbeat row may go, and with it the deadline that would lose them. Unless a record
	// was still on its way to the consumer when a drain's time ran out: that shard's lease is
	// left bound, and so is the row, which peers take over once it stood still for 3/4 TTL,
	// as after a crash; the record was handed out by then.
	s.stopTenure()
	<-s.tenureDone
	s.tenure.resign()
	if leftBound(ws) {
		s.log.Warn("heartbeat row left to lapse: a lease is left bound to it")
		errs.add(&ShardError{Stream: s.stream, Op: OpDeleteHeartbeat, Err: errors.New(
			"not dropped: a lease is left bound to it, with a record on its way to the consumer; peers take the row over once it lapses")})
	} else {
		errs.add(s.dropHeartbeat(write))
	}
	close(release)
	<-s.coordinating
	s.stopBg() // whatever still writes (a finished shard's release) gives up now
	s.del.stop()
	s.del.hand.discard()
	s.errs.close()
	s.closeErr = errors.Join(errs.errs...)
	s.metrics.stop()
	close(s.done)
}

// leftBound reports whether a drain of ws left its lease bound to the heartbeat row (drain).
func leftBound(ws []*worker) bool {
	for _, w := range ws {
		if w.leftBound.Load() {
			return true
		}
	}
	return false
}

// fail ends the subscription with a fatal error: the watcher shuts it down (a reader that
// calls fail cannot: stop waits for it).
func (s *Subscriber) fail(err error) {
	select {
	case s.failed <- err:
	default: // one fatal error is enough
	}
}

// report hands a non-fatal error to Errors, dropping the oldest one when nobody reads.
func (s *Subscriber) report(err *ShardError) { s.errs.report(err) }

// reportAll reports what flush or retire returned: a *ShardError, or several joined.
func (s *Subscriber) reportAll(err error) {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			s.reportAll(e)
		}
		return
	}
	if err == nil {
		return
	}
	var se *ShardError
	if !errors.As(err, &se) {
		se = &ShardError{Stream: s.stream, Op: OpCheckpoint, Err: err}
	}
	s.report(se)
}

// reporter is the Errors channel: non-fatal errors, the oldest dropped when nobody reads.
type reporter struct {
	ch     chan error
	mu     sync.Mutex
	closed bool
}

func newReporter() *reporter { return &reporter{ch: make(chan error, errorsBuffer)} }

func (r *reporter) report(err *ShardError) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	for {
		select {
		case r.ch <- err:
			return
		default:
		}
		select {
		case <-r.ch:
		default:
		}
	}
}

// close closes the channel; later reports are dropped.
func (r *reporter) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	close(r.ch)
}
