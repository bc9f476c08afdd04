package kinesub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/gostream/kinesub/lease"
)

// Every subscriber keeps a heartbeat row in the lease table, "<stream>/~owner/<owner>": a lease
// it takes at start, renews every TTL/3 (tenure.go) and deletes at Close. Its shard leases are
// bound to it (tenure.go). Peers count an owner live while its row is unexpired, so an owner
// that holds no shard yet counts toward the fair share at once: the others hand shards back to
// it rather than leaving it to steal them one by one. Shard ids never contain '/', so no
// heartbeat key can be a shard's.
const ownerRowPrefix = "~owner/"

// staleOwnerTTLs is how many lease TTLs a heartbeat row must have been expired before
// cleanup deletes it: its owner crashed or was cut off long ago.
const staleOwnerTTLs = 10

func (s *Subscriber) ownerKey() string { return s.leaseKey(ownerRowPrefix + s.cfg.owner) }

// ownerOf returns the owner whose heartbeat row has key id (the lease key without
// "<stream>/"), and whether id is a heartbeat row at all.
func ownerOf(id string) (string, bool) { return strings.CutPrefix(id, ownerRowPrefix) }

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

// incarnation returns a random name for this process's holding: appended to the owner name.
func incarnation() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// checkPeers refuses a lease table where subscribers of an earlier kinesub hold shards of the
// stream: they renew every shard lease on its own, with an expiry, where these bind them to a
// heartbeat row; the two protocols cannot share a table (see docs/leases.md, "Upgrading").
func (s *Subscriber) checkPeers(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	defer cancel()
	prefix := s.stream + "/"
	var rows []lease.Lease
	var err error
	if pl, ok := s.cfg.store.(lease.PrefixLister); ok {
		rows, err = pl.ListPrefix(cctx, prefix)
	} else {
		rows, err = s.cfg.store.List(cctx)
	}
	if err != nil {
		return fmt.Errorf("kinesub: lease store: %w", err)
	}
	now := time.Now()
	for _, l := range rows {
		id, ok := strings.CutPrefix(l.Key, prefix)
		if !ok || strings.HasPrefix(id, "~") { // heartbeat and change rows have expiries in both
			continue
		}
		if l.Held(now) && !l.Expiry.IsZero() {
			return fmt.Errorf("%w: %q holds shard %s of stream %s with a lease it renews on its own; stop every instance of the earlier version before starting this one, or give this one a new lease table",
				ErrIncompatibleLeaseTable, l.Owner, id, s.stream)
		}
	}
	return nil
}
