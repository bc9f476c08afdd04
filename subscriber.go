package kinesub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/gostream/kinesub/internal/kinesisiface"
	"github.com/gostream/kinesub/lease"
)

const (
	cancelDrain  = 2 * time.Second  // drain allowed when Subscribe's ctx is cancelled
	defaultDrain = 10 * time.Second // drain allowed by Close when its ctx has no deadline
	errorsBuffer = 64
)

// Subscriber reads every shard of one stream that it holds a lease for and delivers the
// records on Messages. Create one with Subscribe; it is safe for concurrent use.
type Subscriber struct {
	cfg    config
	client kinesisiface.Kinesis
	stream string // the stream's name, also when Subscribe was given its ARN
	ref    streamRef
	log    *slog.Logger
	seeker *Seeker

	metrics *metrics // OpenTelemetry instruments (metrics.go)

	hand  *handoff       // readers → consumer
	out   chan *Message  // dispatcher → consumer (Messages), messagesBuffer deliveries of one shard
	fence chan *fenceReq // seekers and Close re-check the dispatcher's held delivery (dispatch.go)
	// fenceSem: one fencer at a time; fencing: a fencer is at work, and the dispatcher, which
	// looks at the flag between two sends, must wait for its request.
	fenceSem chan struct{}
	fencing  atomic.Bool

	dispatchMu    sync.Mutex
	dispatchState int // dispatchIdle, dispatchRunning, dispatchStopped
	// dispatchChosen: Messages was called (the state is no longer dispatchIdle), read without
	// the lock.
	dispatchChosen atomic.Bool
	errs           chan error
	wake           chan struct{} // asks the coordinator for an early round

	runCtx       context.Context // ends when the subscription stops reading
	stopRun      context.CancelFunc
	bgCtx        context.Context // ends at Close's deadline: bounds every background store call
	stopBg       context.CancelFunc
	dispatchDone chan struct{}  // closed when the dispatcher has returned
	readers      sync.WaitGroup // coordinator and readers
	keepers      sync.WaitGroup // lease keepers and dispatcher
	watchers     sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	workers   map[string]*worker
	shards    map[string]shardInfo
	listed    bool
	listedAt  time.Time // when s.shards was listed
	finished  map[string]bool
	waiting   map[string]string // shard → parent it waits for
	installed *install
	applied   map[string]uint64 // shard → install epoch its reader opened at
	epoch     uint64
	leases    map[string]lease.Lease // by shard id, as the last round read them
	leasesAt  time.Time              // when that round read them
	gone      map[string]time.Time   // finished shard → first listing that lacked it (cleanup)

	live    map[string]bool // owners live in the coordinator's previous claim round
	changes *changeRow      // set at Subscribe; nil when the store cannot list one stream's rows

	errMu      sync.Mutex
	errsClosed bool

	closeOnce sync.Once
	done      chan struct{}
	err       error
	closeErr  error
}

// Subscribe starts consuming stream, given by name or by ARN
// ("arn:aws:kinesis:<region>:<account>:stream/<name>"), and returns once the stream is known to exist (or was
// created, with WithCreateIfMissing) and the lease store answered. Options are validated
// before any I/O. The subscription runs until Close, a fatal error (the stream was deleted),
// or until ctx is cancelled, which behaves like Close with a short drain.
func Subscribe(ctx context.Context, client *kinesis.Client, stream string, opts ...Option) (*Subscriber, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: client is nil", ErrInvalidOption)
	}
	return subscribe(ctx, client, stream, append(opts[:len(opts):len(opts)], withClientPerSubscription(client))...)
}

func subscribe(ctx context.Context, client kinesisiface.Kinesis, stream string, opts ...Option) (*Subscriber, error) {
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
	m, err := newMetrics(cfg.meterProvider, ref.name)
	if err != nil {
		return nil, err
	}
	client = meteredKinesis{k: client, r: m.req}
	metered := meteredStore{s: cfg.store, m: m, prefix: ref.name + "/"}
	changes := newChangeRow(cfg.store, metered, ref.name)
	cfg.store = metered
	s := &Subscriber{
		metrics:      m,
		cfg:          cfg,
		client:       client,
		stream:       ref.name,
		ref:          ref,
		log:          cfg.logger.With(logStream, ref.name),
		hand:         newHandoff(cfg.bufferPages),
		out:          make(chan *Message, messagesBuffer),
		fence:        make(chan *fenceReq),
		fenceSem:     make(chan struct{}, 1),
		errs:         make(chan error, errorsBuffer),
		wake:         make(chan struct{}, 1),
		dispatchDone: make(chan struct{}),
		workers:      make(map[string]*worker),
		shards:       make(map[string]shardInfo),
		finished:     make(map[string]bool),
		waiting:      make(map[string]string),
		applied:      make(map[string]uint64),
		done:         make(chan struct{}),
		changes:      changes,
	}
	s.seeker = &Seeker{s: s}
	if err := s.ensureStream(ctx); err != nil {
		return nil, err
	}
	if err := s.checkStore(ctx); err != nil {
		return nil, err
	}
	if err := s.registerFanOut(ctx); err != nil {
		return nil, err
	}
	if cfg.startAt != nil {
		s.epoch++
		s.installed = &install{pos: *cfg.startAt, epoch: s.epoch, known: map[string]bool{}}
	}
	if err := m.observe(s.heldWorkers); err != nil {
		return nil, err
	}
	s.runCtx, s.stopRun = context.WithCancel(context.Background())
	s.bgCtx, s.stopBg = context.WithCancel(context.Background())
	// Owned by the subscriber: stop waits for the coordinator and every reader (readers) before
	// the final writes, and for the keepers (keepers) before it closes Errors; Close waits for
	// the watcher (watchers), which turns Subscribe's ctx ending into a shutdown.
	s.readers.Add(1)
	go s.coordinate()
	s.watchers.Add(1)
	go func() {
		defer s.watchers.Done()
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), cancelDrain)
			defer cancel()
			s.shutdown(dctx, nil)
		case <-s.runCtx.Done():
		}
	}()
	return s, nil
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
		case errors.As(err, &nf) && s.cfg.createShards > 0 && !created:
			cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
			_, err := s.client.CreateStream(cctx, &kinesis.CreateStreamInput{
				StreamName: aws.String(s.stream), ShardCount: aws.Int32(s.cfg.createShards),
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
			return fmt.Errorf("%w: %s (create it, or pass WithCreateIfMissing): %w", ErrStreamNotFound, s.stream, err)
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
func (s *Subscriber) Errors() <-chan error { return s.errs }

// Err returns why the subscription ended once Messages is closed: nil after Close or ctx
// cancellation, the fatal cause otherwise (for example ErrStreamNotFound).
func (s *Subscriber) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// StreamName returns the name of the stream being consumed, also when Subscribe was given its
// ARN.
func (s *Subscriber) StreamName() string { return s.stream }

// Commit writes every owned shard's acknowledged watermark to the lease store now, and returns
// once the writes are durable. Ack never waits on the store; Commit is for callers that need a
// checkpoint at a chosen moment. A shard whose lease was lost is skipped.
func (s *Subscriber) Commit(ctx context.Context) error {
	if !s.lockOpen() {
		return ErrClosed
	}
	ws := make([]*worker, 0, len(s.workers))
	for _, w := range s.workers {
		ws = append(ws, w)
	}
	s.mu.Unlock()
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
// without a deadline skips the settling but still writes. It returns the errors of the final
// checkpoint and release writes, each a *ShardError naming the shard whose checkpoint or
// release was not written (its deliveries since the last checkpoint are delivered again by the
// next owner, which takes the shard once its lease expires if it was not released). Every call
// returns the same result, including after the subscription stopped on its own (its ctx was
// cancelled, or a fatal error).
func (s *Subscriber) Close(ctx context.Context) error {
	first := false
	s.closeOnce.Do(func() { first = true })
	if !first {
		<-s.done
		return s.closeErr
	}
	s.stop(ctx, nil)
	s.watchers.Wait()
	return s.closeErr
}

// shutdown is Close for internal callers (cancellation, fatal errors).
func (s *Subscriber) shutdown(ctx context.Context, cause error) {
	first := false
	s.closeOnce.Do(func() { first = true })
	if first {
		s.stop(ctx, cause)
	}
}

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
	s.mu.Lock()
	s.closed = true
	s.err = cause
	s.mu.Unlock()

	// Stop fetching; what sits in the buffer was never handed out and replays from the
	// checkpoint, so it is stamped stale rather than delivered.
	s.stopRun()
	s.readers.Wait()
	s.mu.Lock()
	ws := make([]*worker, 0, len(s.workers))
	for _, w := range s.workers {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	for _, w := range ws {
		w.bumpDraining() // Process's running handlers keep their context until endDrain
	}
	s.fenceDispatch(context.Background())

	// Let what the consumer holds settle, within the caller's deadline.
	for handedOut(ws) > 0 && drain.Err() == nil {
		select {
		case <-drain.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
	for _, w := range ws {
		w.endDrain() // Process: handlers still running are cancelled (process_seam.go)
	}

	// Write checkpoints and hand the leases back, even when ctx was cancelled, but not past its
	// deadline. The heartbeat goes first: until the leases are released they count this owner
	// live anyway, and once they are, peers take them all in one round.
	wctx, cancel := context.WithDeadline(s.bgCtx, deadline)
	defer cancel()
	var errs []error
	if err := s.dropHeartbeat(wctx); err != nil {
		errs = append(errs, err)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() { // owned by stop, which waits for it
			defer wg.Done()
			if err := w.retire(wctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	s.stopBg() // whatever still writes (a hand-back, a finished shard's release) gives up now
	s.stopDispatch()
	s.keepers.Wait()
	s.errMu.Lock()
	s.errsClosed = true
	close(s.errs)
	s.errMu.Unlock()
	s.closeErr = errors.Join(errs...)
	s.metrics.stop()
	close(s.done)
}

// handedOut counts the deliveries of ws that the consumer holds and has not settled.
func handedOut(ws []*worker) int64 {
	var n int64
	for _, w := range ws {
		n += w.handedOut.Load()
	}
	return n
}

// fail ends the subscription with a fatal error.
func (s *Subscriber) fail(err error) {
	s.log.Error("subscription failed", "err", err) // also Err(): the one place the cause is in both, for a process that reads neither
	// Not owned by a WaitGroup: it is the shutdown itself, which Close (a caller's, or the one it
	// runs) waits for through s.done. It cannot run inside fail's caller, a reader that
	// shutdown waits for.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), cancelDrain)
		defer cancel()
		s.shutdown(ctx, err)
	}()
}

// report hands a non-fatal error to Errors, dropping the oldest one when nobody reads.
func (s *Subscriber) report(err *ShardError) {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.errsClosed {
		return
	}
	for {
		select {
		case s.errs <- err:
			return
		default:
		}
		select {
		case <-s.errs:
		default:
		}
	}
}

// reportAll reports what flush or retire returned: a *ShardError, or several joined.
func (s *Subscriber) reportAll(err error) {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			s.reportAll(e)
		}
		return
	}
	var se *ShardError
	if !errors.As(err, &se) {
		se = &ShardError{Stream: s.stream, Op: OpCheckpoint, Err: err}
	}
	s.report(se)
}

// lockOpen takes s.mu and reports true, unless the subscriber is closing or closed.
func (s *Subscriber) lockOpen() bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	return true
}

func (s *Subscriber) nudge() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
