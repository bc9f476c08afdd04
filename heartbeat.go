package kinesub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/gostream/kinesub/lease"
)

// Every subscriber keeps a heartbeat row in the lease table, "<stream>/~v2/owner/<owner>": a
// lease it takes when it joins, renews every TTL/3 by moving its counter (tenure.go) and deletes
// at Close. Its shard leases are bound to it (tenure.go). Peers count an owner live while its
// row is its own, so an owner that holds no shard yet counts toward the fair share at once: the
// others hand shards back to it rather than leaving it to steal them one by one. A peer that
// has seen the row's counter stand still for longer than its owner may read without renewing
// it takes the row over (reap.go), which frees the shards bound to it. Shard ids never contain
// '/', so no heartbeat key can be a shard's.
const ownerRowPrefix = "~v2/owner/"

// Rows of other lease protocols, which subscribers of this one refuse to share a stream with
// (guard):
//
//   - v1OwnerPrefix: the heartbeat rows of kinesub 0.1, renewed without moving their counter and
//     taken as lapsed by comparing expiries across hosts' clocks.
//   - otherOwnerRow: the heartbeat rows of later protocols ("~v3/owner/…").
//   - protocolRow: the row that marks the stream's lease protocol. Subscribers of this protocol
//     hold it, with an expiry far off, under a name of the protocol's; 0.1 refuses a stream one
//     of whose shard-like rows is held with an expiry, so it refuses to start beside them.
//     Later protocols hold a row of their own ("kinesub-lease-protocol-3"…).
//
// lease.KindOf tells these rows from shard leases, for this package and for any tool that lists
// the table; TestLeaseKindsOfRows holds the keys written here to it.
const (
	v1OwnerPrefix = "~owner/"
	protocolRow   = "kinesub-lease-protocol-2"
	protocolOwner = "kinesub lease protocol 2"
	protocolTTL   = 100 * 365 * 24 * time.Hour
)

var otherOwnerRow = regexp.MustCompile(`^~v[0-9]+/owner/`)

func (s *Subscriber) ownerKeyOf(owner string) string { return s.leaseKey(ownerRowPrefix + owner) }

// ownerOf returns the owner whose heartbeat row has key id (the lease key without
// "<stream>/"), and whether id is a heartbeat row at all.
func ownerOf(id string) (string, bool) { return strings.CutPrefix(id, ownerRowPrefix) }

// dropHeartbeat releases the heartbeat row, so that peers stop counting this owner at once,
// then deletes it.
func (s *Subscriber) dropHeartbeat(ctx context.Context) error {
	name, key := s.tenure.self()
	l, err := s.cfg.store.Read(ctx, key)
	if err != nil {
		return &ShardError{Stream: s.stream, Op: OpDeleteHeartbeat, Err: fmt.Errorf("read: %w", err)}
	}
	if l.Owner != name {
		return nil // taken over by a peer (this subscriber was taken for dead) or gone
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

// incarnation returns a random name for this process's holding, appended to the owner name: 64
// bits, 16 hex digits, so that processes started with one WithOwner name do not draw the same
// (a join that finds its row made already draws again: tenure.go).
func incarnation() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// checkPeers marks the stream's rows as this protocol's, then refuses a lease table where
// subscribers of another lease protocol read the stream (guard). The mark comes first: a
// subscriber of kinesub 0.1 that starts from then on refuses to run beside this one.
func (s *Subscriber) checkPeers(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
	defer cancel()
	if _, err := s.cfg.store.Acquire(cctx, s.leaseKey(protocolRow), protocolOwner, protocolTTL); err != nil {
		return fmt.Errorf("kinesub: lease store: %w", err)
	}
	rows, err := s.cfg.store.ListPrefix(cctx, s.stream+"/")
	if err != nil {
		return fmt.Errorf("kinesub: lease store: %w", err)
	}
	return s.guard(rows, time.Now())
}

// guard reports, wrapping ErrIncompatibleLeaseTable, a row of rows (the stream's, read at now)
// that shows a live subscriber of another lease protocol: a heartbeat row of kinesub 0.1 or of
// a later protocol, another protocol's mark, or a shard lease held with an expiry of its own
// (as before 0.1). Such subscribers take this protocol's leases for abandoned, and this one
// theirs, so the two never share a stream: Subscribe refuses to start beside them, and a
// running subscriber that finds one stops (the claim rounds check every listing).
func (s *Subscriber) guard(rows []lease.Lease, now time.Time) error {
	prefix := s.stream + "/"
	for _, l := range rows {
		id, ok := strings.CutPrefix(l.Key, prefix)
		if !ok || l.Owner == "" {
			continue
		}
		var what string
		switch {
		case lease.KindOf(l.Key) == lease.KindHeartbeatV1 && l.Held(now):
			what = fmt.Sprintf("subscriber %q of kinesub 0.1 (heartbeat row %s)", l.Owner, id)
		case otherOwnerRow.MatchString(id) && !strings.HasPrefix(id, ownerRowPrefix):
			what = fmt.Sprintf("subscriber %q of another lease protocol (heartbeat row %s)", l.Owner, id)
		case lease.KindOf(l.Key) == lease.KindProtocolMark && id != protocolRow && l.Held(now):
			what = fmt.Sprintf("another lease protocol (%s)", id)
		case lease.KindOf(l.Key) == lease.KindShard && !pendingAt(l, now) && !l.Expiry.IsZero() && l.Held(now):
			what = fmt.Sprintf("subscriber %q of a kinesub before 0.1, renewing shard %s's lease on its own", l.Owner, id)
		default:
			continue
		}
		return fmt.Errorf("%w: %s reads stream %s; stop every instance of the other version before starting this one, or give this one a new lease table (docs/leases.md, \"Upgrading\")",
			ErrIncompatibleLeaseTable, what, s.stream)
	}
	return nil
}
