package kinesub

import (
	"context"
	"time"

	"github.com/gostream/kinesub/lease"
)

// cleanupGrace is how many shard-sync intervals a finished shard must have been missing from
// the listing before its lease is deleted. A peer may still list the shard for up to one of
// its own intervals, and a peer that lists a shard without a lease reads it again.
const cleanupGrace = 3

// cleanup deletes the lease rows of this stream that nobody needs any more: those of shards
// read to their end (SHARD_END), held by nobody, and gone from the listing for cleanupGrace
// shard-sync intervals. The service lists a closed shard until it is trimmed, after the
// retention period; once it is unlisted, its children no longer wait for it (see
// blockingParent), so its checkpoint gates nothing. A listed shard's lease is never deleted.
//
// Every subscriber of the stream runs this after each shard-sync round, on the leases its
// claim just read (v). Deletes are conditional on the counter seen there, so of several
// subscribers one succeeds, and a lease that changed meanwhile is left.
func (s *Subscriber) cleanup(ctx context.Context, v *view) {
	if v == nil {
		return
	}
	type doomed struct {
		id      string
		counter int64
	}
	var del []doomed
	s.mu.Lock()
	if s.gone == nil {
		s.gone = make(map[string]time.Time)
	}
	for id := range s.gone {
		if _, ok := v.leases[id]; !ok {
			delete(s.gone, id)
		}
	}
	for id, l := range v.leases {
		if _, listed := s.shards[id]; listed || l.Checkpoint != lease.ShardEnd || l.Held(v.now) {
			delete(s.gone, id)
			continue
		}
		since, ok := s.gone[id]
		if !ok {
			s.gone[id] = s.listedAt
			continue
		}
		if s.listedAt.Sub(since) >= cleanupGrace*s.cfg.shardSyncInterval {
			del = append(del, doomed{id, l.Counter})
		}
	}
	s.mu.Unlock()

	for _, d := range del {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
		ok, err := s.cfg.store.Delete(cctx, s.leaseKey(d.id), d.counter)
		cancel()
		switch {
		case err != nil:
			if ctx.Err() == nil {
				s.report(&ShardError{Stream: s.stream, Shard: d.id, Op: "DeleteLease", Err: err})
			}
			continue
		case ok:
			s.log.Info("lease deleted: shard finished and gone from the stream", logShard, d.id)
		}
		s.mu.Lock()
		delete(s.gone, d.id)
		s.mu.Unlock()
	}
}
