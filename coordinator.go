package kinesub

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/gostream/kinesub/lease"
)

const (
	leasePoll = time.Second     // the longest wait before a released lease is noticed
	tipSkew   = 5 * time.Second // how far back a tip's position marker reaches, for clock skew
)

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

// coordinate lists shards, claims leases and balances them until the subscription stops.
func (s *Subscriber) coordinate() {
	defer s.readers.Done()
	// The change row (changes.go) is read often enough that a released lease is taken within a
	// second; the whole table is read when it moved.
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
	var w watch
	beat := func() {
		if at := time.Now(); s.beat(ctx) && w.joined(at, s.cfg.leaseTTL) {
			s.changed(ctx)
		}
	}
	beat()
	s.syncShards(ctx)
	w.saw(s, s.claim(ctx, false))
	for {
		select {
		case <-ctx.Done():
			return
		case <-beatT.C:
			beat()
		case <-syncT.C:
			if s.syncShards(ctx) || s.changes == nil {
				s.cleanup(ctx, w.saw(s, s.claim(ctx, false)))
			}
		case <-claimT.C:
			if w.stale(ctx, s) {
				w.saw(s, s.claim(ctx, false))
			}
		case <-s.wake:
			w.saw(s, s.claim(ctx, false))
		case <-balanceT.C:
			v := w.saw(s, s.claim(ctx, true))
			if s.changes != nil {
				s.cleanup(ctx, v)
			}
		}
	}
}

// syncShards refreshes the shard list, and reports whether it changed: a shard appeared,
// closed or went.
func (s *Subscriber) syncShards(ctx context.Context) bool {
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
	s.mu.Lock()
	changed := !s.listed || len(shards) != len(s.shards)
	for id, info := range shards {
		if old, ok := s.shards[id]; !ok || old.closed != info.closed {
			changed = true
		}
	}
	s.shards = shards
	s.listed = true
	s.listedAt = time.Now()
	if s.installed != nil && s.installed.epoch == 1 && len(s.installed.known) == 0 && s.cfg.startAt != nil {
		for id := range shards {
			s.installed.known[id] = true
		}
	}
	s.mu.Unlock()
	return changed
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
	change   int64                  // the change row's counter
	hungry   bool                   // the round left this subscriber below its share, or wanting free leases
}

// look reads the stream's rows of the lease table and works out which shards can be read.
func (s *Subscriber) look(ctx context.Context) (*view, error) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	var all []lease.Lease
	var err error
	if s.changes != nil {
		all, err = s.changes.lister.ListPrefix(cctx, s.stream+"/")
	} else {
		all, err = s.cfg.store.List(cctx)
	}
	cancel()
	if err != nil {
		return nil, err
	}
	v := &view{now: time.Now(), leases: make(map[string]lease.Lease), beats: make(map[string]lease.Lease)}
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
		if id == changesRow {
			v.change = l.Counter
			continue
		}
		v.leases[id] = l
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leases, s.leasesAt = v.leases, v.now
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

// startWorker registers the shard's worker and starts its reader and lease keeper. The start
// position is chosen under the same lock that a stream-wide Seek installs under, so a reader
// either opens at a new installed position or is moved by the seek.
//
// A stolen shard's reader waits stealWait first, so that the previous owner has stopped
// reading, even one whose renewals fail or hang, and the two never read the shard at once.
func (s *Subscriber) startWorker(id string, l lease.Lease, acquired time.Time, stolen bool) bool {
	s.mu.Lock()
	if s.closed || s.workers[id] != nil {
		s.mu.Unlock()
		s.dropTaken(id, stolen)
		return false
	}
	w := newWorker(s, id, acquired)
	w.setWritten(l.Checkpoint, int(l.SubSequence))
	if stolen {
		w.startDelay = stealWait(s.cfg.leaseTTL)
		w.starting.Store(true)
	}
	pos := s.startInput(id, l.Checkpoint, l.SubSequence)
	w.start, w.startCkpt = pos, pos.kind == posAfter
	w.readCtx, w.cancelRead = context.WithCancel(s.runCtx)
	s.workers[id] = w
	delete(s.waiting, id)
	s.mu.Unlock()
	if l.Checkpoint == "" {
		w.markAt = &pos // the reader records where it opened (see reader.mark)
	}
	w.log.Info("lease taken", "checkpoint", l.Checkpoint, "start", w.start.String())
	s.metrics.leaseTaken(id, stolen)
	// Both are owned by the subscriber: Close waits for the reader (readers) before it retires
	// the shard, and for the keeper (keepers) before it closes Errors.
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
func (s *Subscriber) startInput(id, checkpoint string, sub int64) Position {
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
		return Position{kind: posAfter, sequence: checkpoint, sub: int(max(sub, 0))}
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

// sourceFor returns the source a new reader of shard w reads from.
func (s *Subscriber) sourceFor(w *worker) shardSource {
	id := w.id
	if s.cfg.source != nil {
		return s.cfg.source(id)
	}
	if s.cfg.fanOut != nil {
		return s.newFanOut(id, w.seekNote)
	}
	return newPoller(s.client, s.ref, id, s.cfg.requestTimeout, s.cfg.pollInterval)
}
