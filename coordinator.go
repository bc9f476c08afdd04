package kinesub

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/gostream/kinesub/internal/kpl"
	"github.com/gostream/kinesub/internal/protocol"
	"github.com/gostream/kinesub/lease"
)

// coordinator lists the stream's shards, claims and balances their leases, and runs the life
// of every shard it takes. Its fields belong to its goroutine (coordinate), except wake; what
// others read of its work is in the shard table.
type coordinator struct {
	s          *Subscriber
	wake       chan struct{}  // asks for an early claim round; safe from any goroutine
	lives      sync.WaitGroup // the life of every shard taken (shard.go); coordinate waits for them
	live       map[string]bool
	gone       map[string]time.Time // finished shard → first listing that lacked it (cleanup)
	watch      watch                // what the last claim round saw (changes.go)
	claimEvery time.Duration        // the claim tick
	peers      peers                // what it saw of the other owners' heartbeat rows (reap.go)
	watched    []string             // the owners watchPeers read last time
	balanced   atomic.Int64         // balance rounds done, for tests that count rounds, not time
	// orphanSince holds, for each lease found free because its owner stopped, the send of the
	// first listing in a row that found it so (overdue, claim.go).
	orphanSince protocol.OrphanClock
}

func newCoordinator(s *Subscriber) *coordinator {
	return &coordinator{s: s, wake: make(chan struct{}, 1), gone: map[string]time.Time{}, orphanSince: protocol.OrphanClock{}}
}

// nudge asks for an early claim round.
func (c *coordinator) nudge() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// coordinate lists shards, claims leases and balances them until the subscription stops
// reading, then waits for every shard's life to end.
func (c *coordinator) coordinate(ctx context.Context) {
	defer c.lives.Wait()
	s := c.s
	// The change row (changes.go) is read often enough that a released lease is taken within a
	// second; the whole table is read when it moved.
	c.claimEvery = protocol.ClaimTick(s.cfg.shardSyncInterval, s.cfg.leaseTTL)
	syncT := time.NewTicker(s.cfg.shardSyncInterval)
	claimT := time.NewTicker(c.claimEvery)
	balanceT := time.NewTicker(s.cfg.balanceInterval)
	defer syncT.Stop()
	defer claimT.Stop()
	defer balanceT.Stop()
	// reapT fires when a silent peer's row becomes due to be taken over between two claim
	// ticks (reap.go, nextReap).
	reapT := time.NewTimer(time.Hour)
	defer reapT.Stop()
	s.changed(ctx) // joined: peers count this subscriber at their next tick
	c.syncShards(ctx)
	c.watch.saw(c.claim(ctx, false))
	for {
		if d, ok := c.nextReap(time.Now()); ok {
			reapT.Reset(d)
		} else {
			reapT.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-reapT.C:
			if c.watch.stale(ctx, c) {
				c.watch.saw(c.claim(ctx, false))
			}
		case <-syncT.C:
			if c.syncShards(ctx) {
				c.cleanup(ctx, c.watch.saw(c.claim(ctx, false)))
			}
		case <-claimT.C:
			if c.watch.stale(ctx, c) {
				c.watch.saw(c.claim(ctx, false))
			}
		case <-c.wake:
			c.watch.saw(c.claim(ctx, false))
		case <-balanceT.C:
			c.cleanup(ctx, c.watch.saw(c.claim(ctx, true)))
			c.balanced.Add(1)
		}
	}
}

// syncShards refreshes the shard list, and reports whether it changed: a shard appeared,
// closed or went.
func (c *coordinator) syncShards(ctx context.Context) bool {
	s := c.s
	shards, err := s.listShards(ctx)
	if err != nil {
		var nf *types.ResourceNotFoundException
		if errors.As(err, &nf) {
			s.fail(fmt.Errorf("%w: %s: %w", ErrStreamNotFound, s.stream, err))
			return false
		}
		if ctx.Err() == nil {
			s.report(&ShardError{Stream: s.stream, Op: OpListShards, Err: err})
		}
		return false
	}
	return s.table.setListing(shards, time.Now())
}

func (s *Subscriber) listShards(ctx context.Context) (map[string]shardInfo, error) {
	shards := make(map[string]shardInfo)
	var token *string
	for {
		in := &kinesis.ListShardsInput{StreamName: s.ref.streamName(), StreamARN: s.ref.streamARN()}
		if token != nil {
			// The token names the stream: the API refuses it beside StreamName, and kinesistest
			// beside StreamARN too; the Java KCL sends it alone as well.
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
			if r, ok := kpl.ParseKeyRange(sh.HashKeyRange); ok {
				info.keys = &r
			}
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
	now      time.Time               // when the listing was sent (this host's wall clock)
	recv     time.Time               // when it arrived
	rows     []lease.Lease           // every row of the stream, as listed
	leases   map[string]lease.Lease  // shard leases by shard id
	shards   map[string]protocol.Row // the same, as the protocol core's rows
	beats    map[string]lease.Lease  // this protocol's heartbeat rows by owner
	readable shardIDs                // shards that may be read now: not finished, parents done
	change   int64                   // the change row's counter, read before the rest; -1: no change row
	// dead are the owners whose heartbeat row is gone, released or taken over: they stopped
	// reading, and the leases bound to them are taken at once (claim.go).
	dead   map[string]bool
	unsure bool // an owner's heartbeat row could not be read: the round's picture is partial
	// waitTTL is the longest lease TTL of the fleet as the round saw it: a pending take's wait
	// counts in it (protocol.TakeHow.WaitTTL).
	waitTTL time.Duration
	hungry  bool // the round left this subscriber below its share, or wanting free leases
}

// look reads the stream's rows of the lease table and works out which shards can be read. It
// reads the change row first, on its own (a listing reads its rows in no set order), so that a
// steal announced after that read moves the counter the tenure keeper then confirms against
// (tenure.go); sent is when that read, or the listing without a change row, was sent.
func (c *coordinator) look(ctx context.Context) (v *view, sent time.Time, err error) {
	s := c.s
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	defer cancel()
	sent = time.Now()
	l, err := s.cfg.store.Read(cctx, s.changes.key)
	if err != nil {
		return nil, sent, err
	}
	change := l.Counter
	s.changes.pending.changeRead(sent, time.Now(), change)
	listed := time.Now()
	all, err := s.cfg.store.ListPrefix(cctx, s.stream+"/")
	if err != nil {
		return nil, sent, err
	}
	v = &view{now: listed, recv: time.Now(), change: change, leases: make(map[string]lease.Lease), beats: make(map[string]lease.Lease)}
	prefix := s.stream + "/"
	for _, l := range all {
		id, ok := strings.CutPrefix(l.Key, prefix)
		if !ok {
			continue
		}
		v.rows = append(v.rows, l)
		if owner, ok := ownerOf(id); ok {
			v.beats[owner] = l
			continue
		}
		if lease.KindOf(l.Key) != lease.KindShard {
			continue // the change row, the protocol's mark, another protocol's rows
		}
		v.leases[id] = l
	}
	v.shards = rowsOf(v.leases)
	s.changes.pending.listed(v.leases, v.now, v.recv)
	s.table.sawLeases(v)
	return v, sent, nil
}

// sawLeases records the leases of round v, and works out which shards v may read: not
// finished, and every parent done.
func (t *shardTable) sawLeases(v *view) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.leases, t.leasesAt = v.leases, v.now
	ids := make([]string, 0, len(t.listing))
	for id := range t.listing {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if v.leases[id].Checkpoint.Sequence == lease.ShardEnd {
			t.finished[id] = true
			delete(t.waiting, id)
			continue
		}
		if p := protocol.BlockingParent(t.listing[id].parents, t.inListing, v.shards); p != "" {
			t.waiting[id] = p
			continue
		}
		delete(t.waiting, id)
		v.readable = append(v.readable, id)
	}
}

// inListing reports whether the last listing shows shard id. Called with the table's lock held.
func (t *shardTable) inListing(id string) bool {
	_, ok := t.listing[id]
	return ok
}

// start registers the shard of lease l, just taken, and starts its life, reporting whether it
// did. A pending lease's reader waits stealWait first and then binds the lease (shard.go), so
// that the previous owner has stopped reading, even one whose renewals fail or hang, and the two
// never read the shard at once.
func (c *coordinator) start(id string, l lease.Lease, how takeHow) bool {
	s := c.s
	pending := how.Pending
	w := newWorker(s.env, id, l, pending, how.After, how.WaitTTL)
	if ok, stale := s.table.register(w, l.Checkpoint, s.initial()); !ok {
		w.cancelRead()
		if stale { // left as it is: a later round takes it up with a write of its own
			w.log.Info("lease taken under an earlier holding or owner name of this subscriber's: not read under it", "counter", l.Counter, "owner", l.Owner)
			return false
		}
		s.dropTaken(id, l.Tenure(), pending)
		return false
	}
	if l.Checkpoint.Sequence == "" {
		pos := w.start
		w.markAt = &pos // the reader records where it opened (see reader.mark)
	}
	w.log.Info("lease taken", "checkpoint", l.Checkpoint.Sequence, "start", w.start.String(), "pending", pending)
	s.metrics.leaseTaken(id, pending)
	c.lives.Add(1)
	go func() { // owned by the coordinator, which waits for it (lives)
		defer c.lives.Done()
		w.life()
	}()
	return true
}

// initial is where a shard without checkpoint opens: WithInitialPosition, by default the tip
// as of Subscribe.
func (s *Subscriber) initial() Position {
	if s.cfg.initialPos != nil {
		return pinTip(*s.cfg.initialPos, s.subscribedAt)
	}
	return pinTip(Latest(), s.subscribedAt)
}

// forget is called by a shard whose life here is over (finished, lost, given up).
func (c *coordinator) forget(w *worker) {
	c.s.table.forget(w)
	c.nudge()
}

// sourceFor returns the source a new reader of shard w reads from.
func (s *Subscriber) sourceFor(w *worker) shardSource {
	id := w.id
	if s.cfg.source != nil {
		return s.cfg.source(id)
	}
	if s.cfg.fanOut != nil {
		return s.newFanOut(id, w.seekNote)
	}
	return newPoller(s.client, s.direct, s.ref, id, s.cfg.requestTimeout, s.cfg.pollInterval, s.cfg.idlePollInterval)
}
