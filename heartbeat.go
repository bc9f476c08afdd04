package kinesub

import (
	"context"
	"fmt"
	"strings"
)

// Every subscriber keeps a heartbeat row in the lease table, "<stream>/~owner/<owner>": a lease
// it takes at start, renews every TTL/3 from its coordinator and deletes at Close. Peers count
// an owner live while its row is unexpired, so an owner that holds no shard yet counts toward
// the fair share at once: the others hand shards back to it rather than leaving it to steal
// them one by one. Shard ids never contain '/', so no heartbeat key can be a shard's.
const ownerRowPrefix = "~owner/"

// staleOwnerTTLs is how many lease TTLs a heartbeat row must have been expired before
// cleanup deletes it: its owner crashed or was cut off long ago.
const staleOwnerTTLs = 10

func (s *Subscriber) ownerKey() string { return s.leaseKey(ownerRowPrefix + s.cfg.owner) }

// ownerOf returns the owner whose heartbeat row has key id (the lease key without
// "<stream>/"), and whether id is a heartbeat row at all.
func ownerOf(id string) (string, bool) { return strings.CutPrefix(id, ownerRowPrefix) }

// beat takes or extends this subscriber's heartbeat row for one lease TTL, and reports whether
// it holds the row. It acquires rather than renews, so a row that lapsed (a coordinator
// stalled past the TTL) or was deleted as stale is taken back.
func (s *Subscriber) beat(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, min(s.cfg.requestTimeout, s.cfg.leaseTTL/3))
	ok, err := s.cfg.store.Acquire(cctx, s.ownerKey(), s.cfg.owner, s.cfg.leaseTTL)
	cancel()
	switch {
	case err != nil:
		if ctx.Err() == nil {
			s.report(&ShardError{Stream: s.stream, Op: OpHeartbeat, Err: err})
		}
	case !ok:
		// Only a Steal or another process with the same owner name could hold it.
		s.log.Warn("heartbeat row held by another process", "key", s.ownerKey())
	}
	return err == nil && ok
}

// dropHeartbeat releases the heartbeat row, so that peers stop counting this owner at once,
// then deletes it.
func (s *Subscriber) dropHeartbeat(ctx context.Context) error {
	key := s.ownerKey()
	l, err := s.cfg.store.Read(ctx, key)
	if err != nil {
		return &ShardError{Stream: s.stream, Op: OpDeleteHeartbeat, Err: fmt.Errorf("read: %w", err)}
	}
	if l.Owner != s.cfg.owner {
		return nil // gone, or taken by another process under the same owner name
	}
	ok, err := s.cfg.store.Release(ctx, key, l.Tenure())
	if err != nil {
		return &ShardError{Stream: s.stream, Op: OpDeleteHeartbeat, Err: fmt.Errorf("release: %w", err)}
	}
	if !ok {
		return nil
	}
	s.changed(ctx)
	if _, err := s.cfg.store.Delete(ctx, key, l.Counter+1); err != nil { // the counter the release left
		// Released, the row no longer counts; a peer's cleanup deletes it.
		return &ShardError{Stream: s.stream, Op: OpDeleteHeartbeat, Err: err}
	}
	return nil
}
