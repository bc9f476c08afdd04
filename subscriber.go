package kinesub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"golang.org/x/time/rate"

	"github.com/gostream/kinesub/internal/kinesisiface"
	"github.com/gostream/kinesub/lease"
)

// Service limits a reader keeps to on each shard.
const (
	getRecordsPerSecond = 5                // GetRecords calls per second per shard
	bytesPerSecond      = 2 << 20          // read throughput per shard
	bytesBurst          = 10 << 20         // the largest response; a larger read pauses the shard
	cancelDrain         = 2 * time.Second  // drain allowed when Subscribe's ctx is cancelled
	defaultDrain        = 10 * time.Second // drain allowed by Close when its ctx has no deadline
	backoffMin          = 50 * time.Millisecond
	backoffMax          = 5 * time.Second
	errorsBuffer        = 64
	leasePoll           = time.Second // the longest wait before a released lease is noticed
	tipSkew             = 5 * time.Second
	claimParallel       = 8 // lease writes in flight at once while claiming
	handBackDrain       = 2 * time.Second
)

// Subscriber reads every shard of one stream that it holds a lease for and delivers the
// records on Messages. Create one with Subscribe; it is safe for concurrent use.
type Subscriber struct {
	cfg    config
	client kinesisiface.Kinesis
	stream string
	log    *slog.Logger
	seeker *Seeker

	in    chan []Message     // readers → publisher, a page at a time
	out   chan *Message      // publisher → consumer
	fence chan chan struct{} // seekers and Close re-check the publisher's held delivery
	errs  chan error
	wake  chan struct{} // asks the coordinator for an early round

	runCtx   context.Context // ends when the subscription stops reading
	stopRun  context.CancelFunc
	pubDone  chan struct{}  // closed when the publisher has returned
	readers  sync.WaitGroup // coordinator and readers
	keepers  sync.WaitGroup // lease keepers and publisher
	watchers sync.WaitGroup

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
	gone      map[string]time.Time   // finished shard → first listing that lacked it (cleanup)

	live map[string]bool // owners live in the coordinator's previous claim round

	errMu      sync.Mutex
	errsClosed bool

	closeOnce sync.Once
	done      chan struct{}
	err       error
	closeErr  error
}

// install is a stream-wide position installed by WithStartAt or Seek: shards opened after it
// open there.
type install struct {
	pos   Position
	epoch uint64
	known map[string]bool // shards listed when it was installed
}

// shardInfo is one shard as ListShards shows it.
type shardInfo struct {
	id      string
	parents []string
	closed  bool
}

// Subscribe starts consuming stream and returns once the stream is known to exist (or was
// created, with WithCreateIfMissing) and the lease store answered. Options are validated
// before any I/O. The subscription runs until Close, a fatal error (the stream was deleted),
// or until ctx is cancelled, which behaves like Close with a short drain.
func Subscribe(ctx context.Context, client *kinesis.Client, stream string, opts ...Option) (*Subscriber, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: client is nil", ErrInvalidOption)
	}
	return subscribe(ctx, client, stream, opts...)
}

func subscribe(ctx context.Context, client kinesisiface.Kinesis, stream string, opts ...Option) (*Subscriber, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := checkStreamName(stream); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Subscriber{
		cfg:      cfg,
		client:   client,
		stream:   stream,
		log:      cfg.logger.With(logStream, stream),
		in:       make(chan []Message, cfg.bufferPages),
		out:      make(chan *Message),
		fence:    make(chan chan struct{}),
		errs:     make(chan error, errorsBuffer),
		wake:     make(chan struct{}, 1),
		pubDone:  make(chan struct{}),
		workers:  make(map[string]*worker),
		shards:   make(map[string]shardInfo),
		finished: make(map[string]bool),
		waiting:  make(map[string]string),
		applied:  make(map[string]uint64),
		done:     make(chan struct{}),
	}
	s.seeker = &Seeker{s: s}
	if err := s.ensureStream(ctx); err != nil {
		return nil, err
	}
	if err := s.checkStore(ctx); err != nil {
		return nil, err
	}
	if cfg.startAt != nil {
		s.epoch++
		s.installed = &install{pos: *cfg.startAt, epoch: s.epoch, known: map[string]bool{}}
	}
	s.runCtx, s.stopRun = context.WithCancel(context.Background())
	s.keepers.Add(1)
	go s.publish()
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

func checkStreamName(name string) error {
	if name == "" || len(name) > 128 {
		return fmt.Errorf("%w: stream name %q: must be 1 to 128 characters", ErrInvalidOption, name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return fmt.Errorf("%w: stream name %q: only letters, digits, '_', '.' and '-' are allowed", ErrInvalidOption, name)
		}
	}
	return nil
}

// ensureStream checks that the stream exists, creating it with WithCreateIfMissing, and waits
// until it can be read.
func (s *Subscriber) ensureStream(ctx context.Context) error {
	created := false
	for {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
		out, err := s.client.DescribeStreamSummary(cctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(s.stream)})
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

// Messages returns the channel of delivered records. It is closed exactly once, after Close,
// after ctx cancellation or after a fatal error (see Err), so ranging over it always ends.
// Records of one shard arrive in order; records of different shards interleave.
func (s *Subscriber) Messages() <-chan *Message { return s.out }

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

// StreamName returns the name of the stream being consumed.
func (s *Subscriber) StreamName() string { return s.stream }

// Commit writes every owned shard's acknowledged watermark to the lease store now, and returns
// once the writes are durable. Ack never waits on the store; Commit is for callers that need a
// checkpoint at a chosen moment. A shard whose lease was lost is skipped.
func (s *Subscriber) Commit(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
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

// Close stops reading, lets the deliveries already handed out settle until ctx ends (10s
// when ctx has no deadline), writes every shard's checkpoint, releases every lease so that a
// peer can take the shards at once, and closes Messages and Errors. It returns the errors of
// the final checkpoint and release writes. Calling it again waits for the first call and
// returns nil.
func (s *Subscriber) Close(ctx context.Context) error {
	first := false
	s.closeOnce.Do(func() { first = true })
	if !first {
		<-s.done
		return nil
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
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultDrain)
		defer cancel()
	}
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
		w.gate.Add(1)
	}
	s.fencePublisher(context.Background())

	// Let what the consumer holds settle, within the caller's deadline.
	for handedOut(ws) > 0 && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}

	// Write checkpoints and hand the leases back, even when ctx has ended. The heartbeat goes
	// first: until the leases are released they count this owner live anyway, and once they
	// are, peers take them all in one round.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*s.cfg.requestTimeout)
	defer cancel()
	var errs []error
	if err := s.dropHeartbeat(wctx); err != nil {
		errs = append(errs, err)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.retire(wctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	s.fence <- nil // stops the publisher
	<-s.pubDone
	s.keepers.Wait()
	s.errMu.Lock()
	s.errsClosed = true
	close(s.errs)
	s.errMu.Unlock()
	s.closeErr = errors.Join(errs...)
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
	s.log.Error("subscription failed", "err", err)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), cancelDrain)
		defer cancel()
		s.shutdown(ctx, err)
	}()
}

// report hands a non-fatal error to Errors, dropping the oldest one when nobody reads.
func (s *Subscriber) report(err error) {
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

func (s *Subscriber) nudge() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// publish moves deliveries from the readers to the consumer, dropping those whose shard has
// moved on (sought, lost, closing) since they were fetched. A seeker's fence makes it re-check
// the delivery it holds, so nothing fetched before a seek reaches the consumer after it.
func (s *Subscriber) publish() {
	defer s.keepers.Done()
	defer close(s.pubDone)
	defer close(s.out)
	var page []Message // what is left of one reader's page: one shard, one generation
	for {
		if len(page) == 0 {
			select {
			case page = <-s.in:
			case ack := <-s.fence:
				if ack == nil {
					return
				}
				close(ack)
			}
			continue
		}
		m := &page[0]
		if m.gen != m.shard.gate.Load() {
			page = nil
			continue
		}
		m.shard.handedOut.Add(1)
		select {
		case s.out <- m:
			page = page[1:]
		case ack := <-s.fence:
			// The loop re-checks the gate before the next send.
			m.shard.handedOut.Add(-1)
			if ack == nil {
				return
			}
			close(ack)
		}
	}
}

// fencePublisher returns once the publisher has re-checked the delivery it holds.
func (s *Subscriber) fencePublisher(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case s.fence <- ack:
	case <-s.pubDone:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// coordinate lists shards, claims leases and balances them until the subscription stops.
func (s *Subscriber) coordinate() {
	defer s.readers.Done()
	// The lease table is read often enough that a released lease is taken within a second.
	claimEvery := min(s.cfg.shardSyncInterval, s.cfg.leaseTTL/3, leasePoll)
	syncT := time.NewTicker(s.cfg.shardSyncInterval)
	claimT := time.NewTicker(claimEvery)
	balanceT := time.NewTicker(s.cfg.balanceInterval)
	beatT := time.NewTicker(s.cfg.leaseTTL / 3)
	defer syncT.Stop()
	defer claimT.Stop()
	defer balanceT.Stop()
	defer beatT.Stop()
	ctx := s.runCtx
	s.beat(ctx)
	s.syncShards(ctx)
	s.claim(ctx, false)
	for {
		select {
		case <-ctx.Done():
			return
		case <-beatT.C:
			s.beat(ctx)
		case <-syncT.C:
			s.syncShards(ctx)
			s.cleanup(ctx, s.claim(ctx, false))
		case <-claimT.C:
			s.claim(ctx, false)
		case <-s.wake:
			s.claim(ctx, false)
		case <-balanceT.C:
			s.claim(ctx, true)
		}
	}
}

// syncShards refreshes the shard list.
func (s *Subscriber) syncShards(ctx context.Context) {
	shards, err := s.listShards(ctx)
	if err != nil {
		var nf *types.ResourceNotFoundException
		if errors.As(err, &nf) {
			s.fail(fmt.Errorf("%w: %s: %w", ErrStreamNotFound, s.stream, err))
			return
		}
		if ctx.Err() == nil {
			s.log.Warn("list shards failed", "err", err)
			s.report(&ShardError{Stream: s.stream, Op: "ListShards", Err: err})
		}
		return
	}
	s.mu.Lock()
	s.shards = shards
	s.listed = true
	s.listedAt = time.Now()
	if s.installed != nil && s.installed.epoch == 1 && len(s.installed.known) == 0 && s.cfg.startAt != nil {
		for id := range shards {
			s.installed.known[id] = true
		}
	}
	s.mu.Unlock()
}

func (s *Subscriber) listShards(ctx context.Context) (map[string]shardInfo, error) {
	shards := make(map[string]shardInfo)
	var token *string
	for {
		in := &kinesis.ListShardsInput{StreamName: aws.String(s.stream)}
		if token != nil {
			// The API takes the token alone on continuation calls.
			in = &kinesis.ListShardsInput{NextToken: token}
		}
		cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
		out, err := s.client.ListShards(cctx, in)
		cancel()
		if err != nil {
			return nil, err
		}
		for _, sh := range out.Shards {
			info := shardInfo{id: aws.ToString(sh.ShardId)}
			for _, p := range []*string{sh.ParentShardId, sh.AdjacentParentShardId} {
				if p != nil && *p != "" {
					info.parents = append(info.parents, *p)
				}
			}
			info.closed = sh.SequenceNumberRange != nil && sh.SequenceNumberRange.EndingSequenceNumber != nil
			shards[info.id] = info
		}
		if out.NextToken == nil || *out.NextToken == "" {
			return shards, nil
		}
		token = out.NextToken
	}
}

// view is one round's picture of the stream's shards and their leases.
type view struct {
	now      time.Time
	leases   map[string]lease.Lease // by shard id
	beats    map[string]lease.Lease // heartbeat rows by owner
	readable []string               // shards that may be read now: not finished, parents done
	owners   map[string]int         // live owner → readable shards it holds
}

// look reads the lease table and works out which shards can be read.
func (s *Subscriber) look(ctx context.Context) (*view, error) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	all, err := s.cfg.store.List(cctx)
	cancel()
	if err != nil {
		return nil, err
	}
	v := &view{now: time.Now(), leases: make(map[string]lease.Lease), beats: make(map[string]lease.Lease),
		owners: map[string]int{s.cfg.owner: 0}}
	prefix := s.stream + "/"
	for _, l := range all {
		id, ok := strings.CutPrefix(l.Key, prefix)
		if !ok {
			continue
		}
		if owner, ok := ownerOf(id); ok {
			v.beats[owner] = l
			continue
		}
		v.leases[id] = l
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leases = v.leases
	atTip := s.installed == nil && s.initial().kind == posLatest || s.installed != nil && s.installed.pos.kind == posLatest
	ids := make([]string, 0, len(s.shards))
	for id := range s.shards {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if v.leases[id].Checkpoint == lease.ShardEnd {
			s.finished[id] = true
			delete(s.waiting, id)
			continue
		}
		if p := s.blockingParent(v, id, atTip); p != "" {
			s.waiting[id] = p
			continue
		}
		delete(s.waiting, id)
		v.readable = append(v.readable, id)
		if l := v.leases[id]; l.Held(v.now) {
			v.owners[l.Owner]++
		}
	}
	// An owner whose heartbeat is live counts though it holds no shard yet.
	for _, l := range v.beats {
		if _, counted := v.owners[l.Owner]; !counted && l.Held(v.now) {
			v.owners[l.Owner] = 0
		}
	}
	return v, nil
}

// blockingParent returns a parent of shard id that is not yet done, or "". A parent is done
// when it was read to its end (SHARD_END), when it is gone from the listing (trimmed), or, for
// a subscription starting at the tip, when it is closed and nobody ever leased it: reading it
// from the tip would yield nothing.
func (s *Subscriber) blockingParent(v *view, id string, atTip bool) string {
	for _, p := range s.shards[id].parents {
		pl := v.leases[p]
		info, listed := s.shards[p]
		switch {
		case pl.Checkpoint == lease.ShardEnd, !listed:
		case atTip && info.closed && pl.Checkpoint == "" && pl.Owner == "" && pl.Counter == 0:
		default:
			return p
		}
	}
	return ""
}

// claim takes free and expired leases up to this subscriber's fair share and, when balance is
// set, steals one lease from the most loaded owner if this one holds too few. It returns the
// round's view, or nil when the shards or the leases could not be read.
func (s *Subscriber) claim(ctx context.Context, balance bool) *view {
	s.mu.Lock()
	listed := s.listed
	s.mu.Unlock()
	if !listed {
		return nil
	}
	v, err := s.look(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("list leases failed", "err", err)
			s.report(fmt.Errorf("kinesub: list leases: %w", err))
		}
		return nil
	}
	n, k := len(v.readable), len(v.owners)
	// This subscriber's own count is its running readers, not its rows that look held: a
	// renewal that lands late leaves a row lapsed while its reader goes on.
	mine := s.reading(v.readable)
	v.owners[s.cfg.owner] = mine
	fair := (n + k - 1) / k
	// Free leases first, in a random order so that instances starting together spread out,
	// several at a time so that taking many shards does not wait on one slow write.
	order := slices.Clone(v.readable)
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var want []string
	for _, id := range order {
		if len(want) >= fair-mine {
			break
		}
		l := v.leases[id]
		if s.owns(id) || l.Held(v.now) && l.Owner != s.cfg.owner {
			continue
		}
		want = append(want, id)
	}
	var taken atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, claimParallel)
	for _, id := range want {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if s.take(ctx, id, false, func(cctx context.Context) (bool, error) {
				return s.cfg.store.Acquire(cctx, s.leaseKey(id), s.cfg.owner, s.cfg.leaseTTL)
			}) {
				taken.Add(1)
			}
		}()
	}
	wg.Wait()
	mine += int(taken.Load())
	v.owners[s.cfg.owner] = mine
	// An owner that just became live is handed its share now rather than at the next balance
	// round.
	joined := false
	for o := range v.owners {
		joined = joined || !s.live[o]
	}
	s.live = make(map[string]bool, len(v.owners))
	for o := range v.owners {
		s.live[o] = true
	}
	if balance || joined {
		s.shed(v, n, k, mine)
	}
	if balance {
		s.steal(ctx, v, n, k, mine)
	}
	return v
}

// shed hands back, cleanly, the leases this subscriber holds beyond its fair share
// (ceil(n/k)) once other owners are live: checkpoint written, lease released, so a peer takes
// each at once and resumes exactly after what was acked, instead of stealing it later. Leases
// still being handed back from an earlier round count as gone.
func (s *Subscriber) shed(v *view, n, k, mine int) {
	fair := (n + k - 1) / k
	if k < 2 || mine <= fair {
		return
	}
	s.mu.Lock()
	var mineNow []*worker
	leaving := 0
	for _, id := range v.readable {
		switch w := s.workers[id]; {
		case w == nil || w.lost.Load() || w.ended.Load():
		case w.leaving.Load():
			leaving++
		default:
			mineNow = append(mineNow, w)
		}
	}
	s.mu.Unlock()
	rand.Shuffle(len(mineNow), func(i, j int) { mineNow[i], mineNow[j] = mineNow[j], mineNow[i] })
	for _, w := range mineNow[:max(min(mine-leaving-fair, len(mineNow)), 0)] {
		w.leaving.Store(true)
		s.keepers.Add(1)
		go func() {
			defer s.keepers.Done()
			w.handBack()
		}()
	}
}

// steal takes one lease from the most loaded live owner when this subscriber holds fewer than
// its share: below floor(n/k), or at it while another owner holds two or more above it. The
// takeover is conditional on the counter observed, so a lease that moved meanwhile is left.
// An owner above the ceiling whose heartbeat is live is left alone: it sheds its excess itself,
// cleanly, by its next balance round.
func (s *Subscriber) steal(ctx context.Context, v *view, n, k, mine int) {
	floor := n / k
	victim, most := "", 0
	for o, c := range v.owners {
		if o != s.cfg.owner && (c > most || c == most && o < victim) {
			victim, most = o, c
		}
	}
	if victim == "" || !(mine < floor && most > floor || mine == floor && most >= floor+2) {
		return
	}
	if most > (n+k-1)/k && v.beats[victim].Held(v.now) {
		return
	}
	var candidates []string
	for _, id := range v.readable {
		if l := v.leases[id]; l.Owner == victim && l.Held(v.now) {
			candidates = append(candidates, id)
		}
	}
	if len(candidates) == 0 {
		return
	}
	id := candidates[rand.IntN(len(candidates))]
	counter := v.leases[id].Counter
	if s.take(ctx, id, true, func(cctx context.Context) (bool, error) {
		return s.cfg.store.Steal(cctx, s.leaseKey(id), s.cfg.owner, counter, s.cfg.leaseTTL)
	}) {
		s.log.Info("lease taken over for balance", logShard, id, "from", victim)
	}
}

// reading counts the shards of ids that this subscriber has a reader for, its lease not lost.
func (s *Subscriber) reading(ids []string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, id := range ids {
		if w := s.workers[id]; w != nil && !w.lost.Load() {
			n++
		}
	}
	return n
}

func (s *Subscriber) owns(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.workers[id] != nil
}

// take runs a lease write and, when it wins, starts the shard's reader.
func (s *Subscriber) take(ctx context.Context, id string, stolen bool, write func(context.Context) (bool, error)) bool {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	ok, err := write(cctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			s.report(&ShardError{Stream: s.stream, Shard: id, Op: "Acquire", Err: err})
		}
		return false
	}
	if !ok {
		return false
	}
	acquired := time.Now()
	cctx, cancel = context.WithTimeout(ctx, s.cfg.requestTimeout)
	l, err := s.cfg.store.Read(cctx, s.leaseKey(id))
	cancel()
	if err != nil {
		s.report(&ShardError{Stream: s.stream, Shard: id, Op: "ReadLease", Err: err})
		s.releaseKey(id)
		return false
	}
	if l.Owner != s.cfg.owner {
		return false
	}
	if l.Checkpoint == lease.ShardEnd {
		s.releaseKey(id)
		s.mu.Lock()
		s.finished[id] = true
		s.mu.Unlock()
		return false
	}
	w := s.startWorker(id, l, acquired, stolen)
	return w
}

func (s *Subscriber) releaseKey(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.requestTimeout)
	defer cancel()
	if err := s.cfg.store.Release(ctx, s.leaseKey(id), s.cfg.owner); err != nil {
		s.report(&ShardError{Stream: s.stream, Shard: id, Op: "Release", Err: err})
	}
}

// startWorker registers the shard's worker and starts its reader and lease keeper. The start
// position is chosen under the same lock that a stream-wide Seek installs under, so a reader
// either opens at a new installed position or is moved by the seek.
//
// A stolen shard's reader waits one renew period first: the previous owner learns of the
// takeover on its next renewal and stops, so the two never read the shard at once.
func (s *Subscriber) startWorker(id string, l lease.Lease, acquired time.Time, stolen bool) bool {
	s.mu.Lock()
	if s.closed || s.workers[id] != nil {
		s.mu.Unlock()
		s.releaseKey(id)
		return false
	}
	w := newWorker(s, id, acquired)
	w.setWritten(l.Checkpoint)
	if stolen {
		w.startDelay = s.cfg.leaseTTL / 3
	}
	pos := s.startInput(id, l.Checkpoint)
	w.start, w.startPos = pos.iteratorInput(s.stream, id), pos.String()
	w.readCtx, w.cancelRead = context.WithCancel(s.runCtx)
	s.workers[id] = w
	delete(s.waiting, id)
	s.mu.Unlock()
	if l.Checkpoint == "" {
		// Record where this first reader opens, so that the shard's next owner does not open at
		// a later tip should this one stop before its first checkpoint.
		if m := marker(pos); m != "" {
			ctx, cancel := context.WithTimeout(s.runCtx, s.cfg.requestTimeout)
			if _, err := s.cfg.store.Checkpoint(ctx, w.key, s.cfg.owner, m); err != nil {
				s.report(&ShardError{Stream: s.stream, Shard: id, Op: "Checkpoint", Err: err})
			} else {
				w.setWritten(m)
			}
			cancel()
		}
	}
	w.log.Info("lease taken", "checkpoint", l.Checkpoint, "start", w.startPos)
	s.readers.Add(1)
	s.keepers.Add(1)
	go w.keep()
	go w.run()
	return true
}

// startInput picks where a shard's new reader opens. An installed stream-wide position comes
// first, once per shard; then the checkpoint (or a position marker a previous owner left); a
// shard without one opens at the oldest record when a parent was read to its end here (so
// nothing after a reshard is skipped), and at the initial position (the tip by default)
// otherwise. Called with s.mu held.
func (s *Subscriber) startInput(id, checkpoint string) Position {
	if in := s.installed; in != nil && s.applied[id] != in.epoch {
		s.applied[id] = in.epoch
		if in.pos.kind == posLatest && !in.known[id] && s.listed {
			// A shard born after a seek to the tip holds only newer records.
			return Horizon()
		}
		return in.pos
	}
	switch {
	case checkpoint == lease.TrimHorizon:
		return Horizon()
	case strings.HasPrefix(checkpoint, lease.AtTimestampPrefix):
		if ms, err := strconv.ParseInt(checkpoint[len(lease.AtTimestampPrefix):], 10, 64); err == nil {
			return AtTimestamp(time.UnixMilli(ms))
		}
	case checkpoint != "":
		return Position{kind: posAfter, sequence: checkpoint}
	}
	if in := s.installed; in != nil {
		return in.pos
	}
	for _, p := range s.shards[id].parents {
		if s.finished[p] {
			return Horizon()
		}
	}
	return s.initial()
}

// initial is where a shard without checkpoint opens: WithInitialPosition, by default the tip.
func (s *Subscriber) initial() Position {
	if s.cfg.initialPos != nil {
		return *s.cfg.initialPos
	}
	return Latest()
}

// marker is the checkpoint value that makes a later owner open a shard where p opened it.
// The tip is recorded as an instant a little in the past, covering clock skew: a few records
// may be delivered twice, none skipped.
func marker(p Position) string {
	switch p.kind {
	case posHorizon:
		return lease.TrimHorizon
	case posLatest:
		return lease.AtTimestampPrefix + strconv.FormatInt(time.Now().Add(-tipSkew).UnixMilli(), 10)
	case posTimestamp:
		return lease.AtTimestampPrefix + strconv.FormatInt(time.Unix(0, p.unixNano).UnixMilli(), 10)
	}
	return ""
}

// forget removes a worker that stopped on its own (finished, lease lost).
func (s *Subscriber) forget(w *worker, finished bool) {
	s.mu.Lock()
	if s.workers[w.id] == w {
		delete(s.workers, w.id)
	}
	if finished {
		s.finished[w.id] = true
	}
	s.mu.Unlock()
	s.nudge()
}

// backoff returns the wait before retry attempt n (from 0): exponential with full jitter
// over its upper half.
func backoff(n int) time.Duration {
	d := backoffMin << min(n, 16)
	if d > backoffMax || d <= 0 {
		d = backoffMax
	}
	return d/2 + rand.N(d/2+1)
}

// errKind classifies an SDK error for the reader.
type errKind int

const (
	errTransient errKind = iota // network, 5xx, timeout: retry with backoff
	errThrottled                // the shard's read budget is spent: retry with backoff
	errExpired                  // the iterator expired: reopen
	errGone                     // the stream or shard no longer exists
	errRejected                 // the request was invalid (for example a bad sequence number)
	errStopped                  // the reader's context ended
)

func classify(ctx context.Context, err error) errKind {
	var (
		expired  *types.ExpiredIteratorException
		throttle *types.ProvisionedThroughputExceededException
		limit    *types.LimitExceededException
		kms      *types.KMSThrottlingException
		nf       *types.ResourceNotFoundException
		invalid  *types.InvalidArgumentException
	)
	switch {
	case ctx.Err() != nil:
		return errStopped
	case errors.As(err, &expired):
		return errExpired
	case errors.As(err, &throttle), errors.As(err, &limit), errors.As(err, &kms):
		return errThrottled
	case errors.As(err, &nf):
		return errGone
	case errors.As(err, &invalid):
		return errRejected
	}
	return errTransient
}

// noRetry makes the SDK try once: kinesub's readers retry with their own backoff and rate
// budget, so retries do not multiply.
func noRetry(o *kinesis.Options) { o.RetryMaxAttempts = 1 }

// worker reads one leased shard and keeps its lease and checkpoint.
type worker struct {
	sub        *Subscriber
	id         string
	key        string
	log        *slog.Logger
	start      *kinesis.GetShardIteratorInput
	startPos   string
	startDelay time.Duration

	gate atomic.Uint64 // current generation; deliveries stamped otherwise are stale

	mu      sync.Mutex
	wm      watermark
	gen     uint64 // generation of wm
	dirty   bool   // wm.mark not yet written
	lastSeq string // newest sequence number fetched in this generation

	flushMu sync.Mutex
	written string                 // newest checkpoint in the store as far as this worker knows
	shown   atomic.Pointer[string] // written, for Shards, which must not wait on a write

	handedOut   atomic.Int64 // handed to the consumer, not yet settled
	waitingRoom atomic.Bool
	room        chan struct{}

	seekMu   sync.Mutex
	seekReq  *seekCmd
	seekNote chan struct{}

	readCtx    context.Context // ends when the reader must stop
	cancelRead context.CancelFunc
	readerDone chan struct{}
	keeperStop chan struct{}
	keeperDone chan struct{}
	stopOnce   sync.Once
	lost       atomic.Bool
	ended      atomic.Bool // read to SHARD_END and checkpointed
	leaving    atomic.Bool // being handed back for balance
	lastRenew  atomic.Int64

	millisBehind atomic.Int64
	throttled    atomic.Bool
	limiter      *rate.Limiter
	bytes        *rate.Limiter
	checkpoints  atomic.Int64
}

// seekCmd asks a reader to reopen its shard.
type seekCmd struct {
	pos  Position
	iter *string // already opened by the seeker, or nil: the reader opens pos itself
	gen  uint64
	done chan error
}

func newWorker(s *Subscriber, id string, acquired time.Time) *worker {
	w := &worker{
		sub:        s,
		id:         id,
		key:        s.leaseKey(id),
		log:        s.log.With(logShard, id),
		room:       make(chan struct{}, 1),
		seekNote:   make(chan struct{}, 1),
		readerDone: make(chan struct{}),
		keeperStop: make(chan struct{}),
		keeperDone: make(chan struct{}),
		limiter:    rate.NewLimiter(getRecordsPerSecond, 1),
		bytes:      rate.NewLimiter(bytesPerSecond, bytesBurst),
	}
	w.lastRenew.Store(acquired.UnixNano())
	return w
}

// keep renews the lease every TTL/3 and flushes the checkpoint every checkpoint interval, on
// its own schedule: a consumer that stops reading does not stop either. Flushes run on a
// goroutine of their own, so that a checkpoint write stuck for up to the request timeout never
// delays a renewal past the TTL.
func (w *worker) keep() {
	s := w.sub
	defer s.keepers.Done()
	defer close(w.keeperDone)
	var flusher sync.WaitGroup
	defer flusher.Wait()
	if s.cfg.checkpointInterval > 0 {
		flusher.Add(1)
		go func() {
			defer flusher.Done()
			w.flushEvery(s.cfg.checkpointInterval)
		}()
	}
	renew := time.NewTicker(s.cfg.leaseTTL / 3)
	defer renew.Stop()
	for {
		select {
		case <-w.keeperStop:
			return
		case <-renew.C:
			if !w.renew() {
				return
			}
		}
	}
}

// flushEvery writes the checkpoint every d until the keeper stops or the lease is lost.
func (w *worker) flushEvery(d time.Duration) {
	s := w.sub
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-w.keeperStop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.requestTimeout)
			if err := w.flush(ctx); err != nil {
				s.report(err)
			}
			cancel()
			if w.lost.Load() {
				return
			}
		}
	}
}

// renew extends the lease; it reports false when the lease is lost: fenced by another owner,
// or not renewed within its TTL, after which another owner may hold it.
func (w *worker) renew() bool {
	s := w.sub
	ctx, cancel := context.WithTimeout(context.Background(), min(s.cfg.requestTimeout, s.cfg.leaseTTL/3))
	defer cancel()
	before := time.Now()
	ok, err := s.cfg.store.Renew(ctx, w.key, s.cfg.owner, s.cfg.leaseTTL)
	switch {
	case err == nil && ok:
		w.lastRenew.Store(before.UnixNano())
		return true
	case err == nil:
		w.lose("fenced by another owner")
		return false
	}
	s.report(&ShardError{Stream: s.stream, Shard: w.id, Op: "Renew", Err: err})
	if time.Since(time.Unix(0, w.lastRenew.Load())) >= s.cfg.leaseTTL*2/3 {
		w.lose("not renewed in time")
		return false
	}
	return true
}

// lose stops the shard after its lease was lost: no further checkpoint, buffered deliveries
// dropped. The new owner replays from the last checkpoint.
func (w *worker) lose(why string) {
	if !w.lost.CompareAndSwap(false, true) {
		return
	}
	w.gate.Add(1)
	w.log.Info("lease lost", "why", why)
	w.sub.report(&ShardError{Stream: w.sub.stream, Shard: w.id, Op: "Lease", Err: fmt.Errorf("%w: %s", ErrLeaseLost, why)})
	w.cancelRead()
	w.stopKeeper()
}

// setWritten records the newest checkpoint written; called with flushMu held (or before the
// worker starts).
func (w *worker) setWritten(seq string) {
	w.written = seq
	w.shown.Store(&seq)
}

func (w *worker) stopKeeper() { w.stopOnce.Do(func() { close(w.keeperStop) }) }

// settle records the consumer's verdict on m.
func (w *worker) settle(ctx context.Context, m *Message, handled bool) error {
	s := w.sub
	w.handedOut.Add(-1)
	if !handled {
		return nil
	}
	w.mu.Lock()
	if m.gen != w.gen {
		w.mu.Unlock()
		return nil
	}
	advanced := w.wm.settle(m.index)
	if advanced {
		w.dirty = true
	}
	// A waiting reader is woken only once the room it waits for is there (which includes every
	// delivery settled, what a finishing reader waits for), not by every ack.
	roomy := s.cfg.maxInFlight-w.wm.unsettled() >= s.refill()
	w.mu.Unlock()
	if roomy && w.waitingRoom.Load() {
		select {
		case w.room <- struct{}{}:
		default:
		}
	}
	if advanced && s.cfg.checkpointInterval == 0 {
		return w.flush(ctx)
	}
	return nil
}

// flush writes the watermark to the lease store if it moved since the last write. A fenced
// write stops the shard and is not an error: the new owner replays.
func (w *worker) flush(ctx context.Context) error {
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	if w.lost.Load() {
		return nil
	}
	w.mu.Lock()
	mark, dirty := w.wm.mark, w.dirty
	w.dirty = false
	w.mu.Unlock()
	if !dirty || mark == "" || mark == w.written {
		return nil
	}
	s := w.sub
	ok, err := s.cfg.store.Checkpoint(ctx, w.key, s.cfg.owner, mark)
	if err != nil {
		w.mu.Lock()
		w.dirty = true
		w.mu.Unlock()
		return &ShardError{Stream: s.stream, Shard: w.id, Op: "Checkpoint", Err: err}
	}
	if !ok {
		w.lose("checkpoint fenced")
		return nil
	}
	w.setWritten(mark)
	w.checkpoints.Add(1)
	// LogAttrs: the variadic Debug boxes mark into an interface, an allocation on every write
	// even with debug logging off.
	w.log.LogAttrs(ctx, slog.LevelDebug, "checkpoint", slog.String("sequence", mark))
	return nil
}

// retire ends an owned shard at Close: final checkpoint, then release.
func (w *worker) retire(ctx context.Context) error {
	w.stopKeeper()
	<-w.keeperDone
	if w.lost.Load() || w.ended.Load() {
		return nil
	}
	err := w.flush(ctx)
	if w.lost.Load() {
		return err
	}
	if rerr := w.sub.cfg.store.Release(ctx, w.key, w.sub.cfg.owner); rerr != nil {
		err = errors.Join(err, &ShardError{Stream: w.sub.stream, Shard: w.id, Op: "Release", Err: rerr})
	} else {
		w.log.Info("lease released")
	}
	return err
}

// handBack stops reading the shard and releases its lease after a final checkpoint, for
// balancing. Deliveries not yet handed out are dropped; the next owner reads them again.
// Those handed out get up to handBackDrain to be settled first.
func (w *worker) handBack() {
	s := w.sub
	w.gate.Add(1)
	w.cancelRead()
	<-w.readerDone
	// Let the consumer settle what it holds from this shard, so that the next owner resumes
	// after it rather than delivering it again. The lease is still renewed meanwhile.
	if s.fencePublisher(context.Background()) == nil {
		for deadline := time.Now().Add(handBackDrain); w.handedOut.Load() > 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*s.cfg.requestTimeout)
	defer cancel()
	if err := w.retire(ctx); err != nil {
		s.report(err)
	}
	w.log.Info("lease handed back for balance")
	s.forget(w, false)
}

// run reads the shard until it ends, the lease is lost or the subscription stops.
func (w *worker) run() {
	s := w.sub
	defer s.readers.Done()
	defer close(w.readerDone)
	defer w.cancelRead()
	if w.startDelay > 0 {
		select {
		case <-time.After(w.startDelay):
		case <-w.readCtx.Done():
		}
	}
	r := reader{w: w, ctx: w.readCtx, gen: w.gate.Load(), start: w.start}
	finished := r.loop()
	switch {
	case finished:
		w.ended.Store(true)
		w.stopKeeper()
		<-w.keeperDone
		w.releaseFinished()
		s.forget(w, true)
	case w.lost.Load():
		// A checkpoint write still in flight must end before the shard can be taken again:
		// landing after a new reader's writes, it would move the checkpoint back.
		<-w.keeperDone
		s.forget(w, false)
	}
}

// releaseFinished hands back the lease of a shard read to its end.
func (w *worker) releaseFinished() {
	s := w.sub
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.requestTimeout)
	defer cancel()
	if err := s.cfg.store.Release(ctx, w.key, s.cfg.owner); err != nil {
		s.report(&ShardError{Stream: s.stream, Shard: w.id, Op: "Release", Err: err})
	}
	w.log.Info("shard finished")
}

// reader is the state of one shard's read loop.
type reader struct {
	w       *worker
	ctx     context.Context
	gen     uint64
	start   *kinesis.GetShardIteratorInput
	iter    *string
	attempt int
}

// loop reads until the shard ends (true) or the reader must stop (false).
func (r *reader) loop() bool {
	w, s := r.w, r.w.sub
	for {
		if r.ctx.Err() != nil {
			return false
		}
		if cmd := w.takeSeek(); cmd != nil {
			r.apply(cmd)
			continue
		}
		if r.iter == nil && !r.open() {
			continue
		}
		if !r.waitRoom() {
			continue
		}
		if err := w.limiter.Wait(r.ctx); err != nil {
			continue
		}
		// Ask for no more than the cap has room for, so that a batch does not carry the shard
		// past its cap. The room is taken after the rate wait, which acks may have widened.
		limit := min(int(s.cfg.batchSize), r.room())
		cctx, cancel := context.WithTimeout(r.ctx, s.cfg.requestTimeout)
		out, err := s.client.GetRecords(cctx, &kinesis.GetRecordsInput{
			ShardIterator: r.iter, Limit: aws.Int32(int32(limit)),
		}, noRetry)
		cancel()
		if err != nil {
			r.failed("GetRecords", err)
			continue
		}
		r.attempt = 0
		w.throttled.Store(false)
		w.millisBehind.Store(aws.ToInt64(out.MillisBehindLatest))
		size := 0
		for i := range out.Records {
			size += len(out.Records[i].Data)
		}
		if !r.deliver(out.Records) {
			continue
		}
		// A very large read spends the shard's byte budget: pause before the next call as the
		// service would throttle it.
		if size > 0 {
			if res := w.bytes.ReserveN(time.Now(), min(size, bytesBurst)); res.OK() {
				if d := res.Delay(); d > 0 && !r.sleep(d) {
					continue
				}
			}
		}
		w.log.Debug("poll", "records", len(out.Records), "millis_behind", aws.ToInt64(out.MillisBehindLatest))
		if out.NextShardIterator == nil {
			if r.finish() {
				return true
			}
			continue
		}
		r.iter = out.NextShardIterator
		if len(out.Records) == 0 {
			r.sleep(s.cfg.pollInterval)
		}
	}
}

// open gets an iterator: after the newest record fetched in this generation (so nothing
// delivered is fetched twice and nothing is skipped), or at the generation's start.
func (r *reader) open() bool {
	w, s := r.w, r.w.sub
	in := r.start
	w.mu.Lock()
	if w.lastSeq != "" && w.gen == r.gen {
		in = afterSequence(s.stream, w.id, w.lastSeq)
	}
	w.mu.Unlock()
	cctx, cancel := context.WithTimeout(r.ctx, s.cfg.requestTimeout)
	out, err := s.client.GetShardIterator(cctx, in, noRetry)
	cancel()
	if err != nil {
		r.failed("GetShardIterator", err)
		return false
	}
	r.iter = out.ShardIterator
	return true
}

// failed handles a failed call: fatal, reopen, or back off and retry.
func (r *reader) failed(op string, err error) {
	w, s := r.w, r.w.sub
	kind := classify(r.ctx, err)
	switch kind {
	case errStopped:
		return
	case errExpired:
		w.log.Debug("iterator expired")
		r.iter = nil
		return
	case errGone:
		s.fail(fmt.Errorf("%w: %s: %w", ErrStreamNotFound, s.stream, &ShardError{Stream: s.stream, Shard: w.id, Op: op, Err: err}))
		<-r.ctx.Done()
		return
	case errThrottled:
		w.throttled.Store(true)
		w.log.Warn("throttled", "op", op, "attempt", r.attempt)
	case errRejected:
		// The iterator or position was refused: reopen from the last known place.
		r.iter = nil
		w.log.Warn("request rejected", "op", op, "err", err)
	default:
		w.log.Warn("call failed", "op", op, "attempt", r.attempt, "err", err)
	}
	s.report(&ShardError{Stream: s.stream, Shard: w.id, Op: op, Err: err})
	r.sleep(backoff(r.attempt))
	r.attempt++
}

// sleep waits d, or less when the reader stops or a seek arrives. It reports whether the
// full time passed.
func (r *reader) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.ctx.Done():
	case <-r.w.seekNote:
		r.w.renote()
	}
	return false
}

// refill is the room below its cap that a shard's reader waits for before it fetches again:
// a batch, or half the cap when that is smaller. Fetches never carry a shard past its cap, and
// a consumer at the cap that acks one record at a time does not turn into one small GetRecords
// call (of the shard's 5 per second) per ack.
func (s *Subscriber) refill() int { return min(int(s.cfg.batchSize), max(s.cfg.maxInFlight/2, 1)) }

// waitRoom blocks while the shard has less room below its cap of unsettled deliveries than
// refill.
func (r *reader) waitRoom() bool {
	w := r.w
	return r.waitUntil(func() bool {
		return w.gen != r.gen || w.sub.cfg.maxInFlight-w.wm.unsettled() >= w.sub.refill()
	})
}

// waitUntil blocks until ok, checked with w.mu held, holds; acks wake it to check again. It
// reports false when the reader must stop or a seek arrives first.
func (r *reader) waitUntil(ok func() bool) bool {
	w := r.w
	for {
		w.mu.Lock()
		done := ok()
		w.waitingRoom.Store(!done)
		w.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-w.room:
		case <-r.ctx.Done():
			return false
		case <-w.seekNote:
			w.renote()
			return false
		}
	}
}

// room returns how many more deliveries the shard may take before its cap: at least refill,
// as only this reader adds deliveries and it calls room after waitRoom.
func (r *reader) room() int {
	w := r.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gen != r.gen {
		return w.sub.cfg.maxInFlight
	}
	return max(w.sub.cfg.maxInFlight-w.wm.unsettled(), 1)
}

// deliver tracks a batch in the watermark and sends it to the publisher. It reports false when
// interrupted by a seek or a stop: the rest of the batch is dropped, and the reader reopens.
func (r *reader) deliver(records []types.Record) bool {
	if len(records) == 0 {
		return true
	}
	w, s := r.w, r.w.sub
	msgs := make([]Message, 0, len(records))
	var bad []error
	w.mu.Lock()
	if w.gen != r.gen {
		w.mu.Unlock()
		return false
	}
	for i := range records {
		rec := &records[i]
		seq := aws.ToString(rec.SequenceNumber)
		arrival := aws.ToTime(rec.ApproximateArrivalTimestamp)
		if !isAggregated(rec.Data) {
			m := Message{sequence: seq, shard: w, gen: r.gen, partitionKey: aws.ToString(rec.PartitionKey), arrival: arrival}
			m.headers, m.data = splitEnvelope(rec.Data)
			if len(m.headers) == 0 {
				m.headers = nil
			}
			m.index = w.wm.track(seq)
			msgs = append(msgs, m)
			w.lastSeq = seq
			continue
		}
		subs, err := deaggregate(rec.Data)
		if err != nil {
			// Reported, not delivered, and handled at once so that the shard moves on.
			w.wm.settle(w.wm.track(seq))
			w.dirty = true
			w.lastSeq = seq
			bad = append(bad, fmt.Errorf("%w: sequence number %s: %w", ErrAggregatedRecord, seq, err))
			continue
		}
		for j, sub := range subs {
			m := Message{sequence: seq, sub: j, shard: w, gen: r.gen, partitionKey: sub.partitionKey, arrival: arrival}
			m.headers, m.data = splitEnvelope(sub.data)
			if len(m.headers) == 0 {
				m.headers = nil
			}
			// Until the last user record of the aggregate is handled, the checkpoint may only
			// reach the record before it: resuming after seq would skip the rest.
			mark := w.lastSeq
			if j == len(subs)-1 {
				mark = seq
			}
			m.index = w.wm.track(mark)
			msgs = append(msgs, m)
		}
		w.lastSeq = seq
	}
	w.mu.Unlock()
	for _, err := range bad {
		s.report(&ShardError{Stream: s.stream, Shard: w.id, Op: "Decode", Err: err})
	}
	if len(msgs) == 0 {
		return true
	}
	select {
	case s.in <- msgs:
		return true
	case <-r.ctx.Done():
	case <-w.seekNote:
		w.renote()
	}
	return false
}

// finish completes a shard that returned its last records: once every delivery is settled,
// it checkpoints SHARD_END so that children may start. It reports false when interrupted (a
// seek, a stop, a lost lease, or a failed write to retry).
func (r *reader) finish() bool {
	w, s := r.w, r.w.sub
	if !r.waitUntil(func() bool { return w.wm.unsettled() == 0 }) {
		return false
	}
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	ctx, cancel := context.WithTimeout(r.ctx, s.cfg.requestTimeout)
	defer cancel()
	ok, err := s.cfg.store.Checkpoint(ctx, w.key, s.cfg.owner, lease.ShardEnd)
	if err != nil {
		s.report(&ShardError{Stream: s.stream, Shard: w.id, Op: "Checkpoint", Err: err})
		r.iter = nil // the shard's end is found again after the backoff
		r.sleep(backoff(r.attempt))
		r.attempt++
		return false
	}
	if !ok {
		w.lose("checkpoint fenced")
		return false
	}
	w.setWritten(lease.ShardEnd)
	return true
}

// takeSeek returns the pending seek command, if any, and clears its notification: a note
// left armed would keep cutting every later batch short, and the reader would fetch (and
// deliver) the cut batch again from the same iterator.
func (w *worker) takeSeek() *seekCmd {
	w.seekMu.Lock()
	defer w.seekMu.Unlock()
	select {
	case <-w.seekNote:
	default:
	}
	cmd := w.seekReq
	w.seekReq = nil
	return cmd
}

// renote re-arms the seek notification after a wait consumed it, so the loop sees it.
func (w *worker) renote() {
	select {
	case w.seekNote <- struct{}{}:
	default:
	}
}

// apply reopens the shard where a seek asked.
func (r *reader) apply(cmd *seekCmd) {
	w, s := r.w, r.w.sub
	r.gen = cmd.gen
	r.start = cmd.pos.iteratorInput(s.stream, w.id)
	r.attempt = 0
	if cmd.iter != nil {
		r.iter = cmd.iter
		cmd.done <- nil
		return
	}
	r.iter = nil
	cctx, cancel := context.WithTimeout(r.ctx, s.cfg.requestTimeout)
	out, err := s.client.GetShardIterator(cctx, r.start, noRetry)
	cancel()
	if err != nil {
		cmd.done <- &ShardError{Stream: s.stream, Shard: w.id, Op: "Seek", Err: err}
		r.failed("GetShardIterator", err)
		return
	}
	r.iter = out.ShardIterator
	cmd.done <- nil
}
