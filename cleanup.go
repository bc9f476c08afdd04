package kinesub

import (
	"context"
	"fmt"
	"strings"

	"github.com/gostream/kinesub/lease"
)

// staleOwnerTTLs is how many lease TTLs a heartbeat row of kinesub 0.1 must have been expired
// before cleanup deletes it: its owner crashed or was cut off long ago.
const staleOwnerTTLs = 10

// cleanupGrace is how many shard-sync intervals a finished shard must have been missing from
// the listing before its lease is deleted. A peer may still list the shard for up to one of
// its own intervals, and a peer that lists a shard without a lease reads it again.
const cleanupGrace = 3

// cleanup deletes the lease rows of this stream that nobody needs any more:
//
//   - those of shards read to their end (SHARD_END), held by nobody, and gone from the listing
//     for cleanupGrace shard-sync intervals. The service lists a closed shard until it is
//     trimmed, after the retention period; once it is unlisted, its children no longer wait
//     for it (see blockingParent), so its checkpoint gates nothing. A listed shard's lease is
//     never deleted.
//   - the heartbeat rows of other owners that were released (an owner that closed and could not
//     delete its row) or that this subscriber took over (reap.go) and could not delete then;
//     and those of kinesub 0.1 expired for staleOwnerTTLs lease TTLs.
//
// Every subscriber of the stream runs this after each shard-sync round, on the leases its
// claim just read (v). Deletes are conditional on the counter seen there, so of several
// subscribers one succeeds, and a row that changed meanwhile is left.
func (c *coordinator) cleanup(ctx context.Context, v *view) {
	if v == nil {
		return
	}
	s := c.s
	type doomed struct {
		shard, owner string // one of them: a shard's lease or an owner's heartbeat
		key          string // the heartbeat row's
		counter      int64
	}
	var del []doomed
	listing, listedAt := s.table.lastListing()
	for id := range c.gone {
		if _, ok := v.leases[id]; !ok {
			delete(c.gone, id)
		}
	}
	for id, l := range v.leases {
		if _, listed := listing[id]; listed || l.Checkpoint.Sequence != lease.ShardEnd || l.Held(v.now) {
			delete(c.gone, id)
			continue
		}
		since, ok := c.gone[id]
		if !ok {
			c.gone[id] = listedAt
			continue
		}
		if listedAt.Sub(since) >= cleanupGrace*s.cfg.shardSyncInterval {
			del = append(del, doomed{shard: id, counter: l.Counter})
		}
	}
	me := s.tenure.owner()
	for owner, l := range v.beats {
		switch {
		case owner == me:
		case l.Owner == "":
			del = append(del, doomed{owner: owner, key: l.Key, counter: l.Counter})
		case l.Owner == me: // taken over here; the release after it did not land
			cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
			if ok, err := s.cfg.store.Release(cctx, l.Key, l.Tenure()); err == nil && ok {
				del = append(del, doomed{owner: owner, key: l.Key, counter: l.Counter + 1})
			}
			cancel()
		}
	}
	prefix := s.stream + "/" + v1OwnerPrefix
	for _, l := range v.rows {
		if owner, ok := strings.CutPrefix(l.Key, prefix); ok && !l.Held(v.now) && v.now.Sub(l.Expiry) >= staleOwnerTTLs*s.cfg.leaseTTL {
			del = append(del, doomed{owner: owner, key: l.Key, counter: l.Counter})
		}
	}

	for _, d := range del {
		key := d.key
		if d.shard != "" {
			key = s.leaseKey(d.shard)
		}
		cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
		ok, err := s.cfg.store.Delete(cctx, key, d.counter)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			continue
		case err != nil && d.shard != "":
			s.report(&ShardError{Stream: s.stream, Shard: d.shard, Op: OpDeleteLease, Err: err})
			continue
		case err != nil:
			s.report(&ShardError{Stream: s.stream, Op: OpDeleteHeartbeat, Err: fmt.Errorf("heartbeat of %s: %w", d.owner, err)})
			continue
		case ok && d.shard != "":
			s.log.Info("lease deleted: shard finished and gone from the stream", logShard, d.shard)
		case ok:
			s.log.Info("heartbeat of a departed owner deleted", "owner", d.owner)
		}
		delete(c.gone, d.shard)
	}
}
