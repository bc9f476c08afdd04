package lease

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Memory is a Store held in this process's memory, for a single process and for tests:
// subscribers in other processes cannot see it, so each would read every shard. Nothing
// survives a restart. It is safe for concurrent use.
type Memory struct {
	mu     sync.Mutex
	leases map[string]*memLease
	now    func() time.Time
}

// memLease is a lease as Memory keeps it.
type memLease struct {
	Lease
	order int64 // the order of the last CheckpointOrdered write (checkpointOrder); 0: none
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{leases: make(map[string]*memLease), now: time.Now}
}

// ready returns the argument error, else ctx's error: what every call checks before it
// touches the store.
func ready(ctx context.Context, argErr error) error {
	if argErr != nil {
		return argErr
	}
	return ctx.Err()
}

// checkCheckpoint rejects an empty checkpoint and a negative sub-sequence.
func checkCheckpoint(key string, cp Checkpoint) error {
	switch {
	case cp.Sequence == "":
		return fmt.Errorf("%w: lease %q: empty checkpoint", ErrInvalidArgument, key)
	case cp.SubSequence < 0:
		return fmt.Errorf("%w: lease %q: sub-sequence %d is negative", ErrInvalidArgument, key, cp.SubSequence)
	}
	return nil
}

// ttlRule is what a call accepts as a TTL.
type ttlRule uint8

const (
	noTTL       ttlRule = iota // the call takes none
	ttlOrZero                  // positive, or zero for a lease that never lapses (Acquire, Steal)
	positiveTTL                // positive (Renew)
)

func checkArgs(key, owner string, ttl time.Duration, needOwner bool, rule ttlRule) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty lease key", ErrInvalidArgument)
	case needOwner && owner == "":
		return fmt.Errorf("%w: empty owner for lease %q", ErrInvalidArgument, key)
	case rule == ttlOrZero && ttl < 0:
		return fmt.Errorf("%w: lease %q: ttl %v must not be negative", ErrInvalidArgument, key, ttl)
	case rule == positiveTTL && ttl <= 0:
		return fmt.Errorf("%w: lease %q: ttl %v must be positive", ErrInvalidArgument, key, ttl)
	}
	return nil
}

// expiry is when a lease taken at now for ttl lapses: never (zero) for a zero ttl.
func expiry(now time.Time, ttl time.Duration) time.Time {
	if ttl == 0 {
		return time.Time{}
	}
	return now.Add(ttl)
}

func (m *Memory) get(key string) *memLease {
	l, ok := m.leases[key]
	if !ok {
		l = &memLease{Lease: Lease{Key: key}}
		m.leases[key] = l
	}
	return l
}

// holds reports whether t is the current holding of l.
func holds(l *memLease, t Tenure) bool { return l.Owner == t.Owner && l.Counter == t.Counter }

// Acquire implements Store.
func (m *Memory) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := checkContext(ctx, "Memory.Acquire"); err != nil {
		return false, err
	}
	if err := ready(ctx, checkArgs(key, owner, ttl, true, ttlOrZero)); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	l := m.get(key)
	if l.Owner != owner && l.Held(now) {
		return false, nil
	}
	l.Owner, l.Expiry = owner, expiry(now, ttl)
	l.Counter++
	return true, nil
}

// Steal implements Store.
func (m *Memory) Steal(ctx context.Context, key, owner string, counter int64, ttl time.Duration) (bool, error) {
	return m.steal(ctx, "Memory.Steal", key, owner, counter, ttl, nil)
}

// StealNote implements Store.
func (m *Memory) StealNote(ctx context.Context, key, owner string, counter int64, ttl time.Duration, note string) (bool, error) {
	return m.steal(ctx, "Memory.StealNote", key, owner, counter, ttl, &note)
}

func (m *Memory) steal(ctx context.Context, op, key, owner string, counter int64, ttl time.Duration, note *string) (bool, error) {
	if err := checkContext(ctx, op); err != nil {
		return false, err
	}
	if err := ready(ctx, errors.Join(checkArgs(key, owner, ttl, true, ttlOrZero), checkNote(key, note))); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.leases[key]
	if !ok || l.Counter != counter {
		return false, nil
	}
	l.Owner, l.Expiry = owner, expiry(m.now(), ttl)
	l.Counter++
	if note != nil {
		l.Note = *note
	}
	return true, nil
}

// checkNote rejects a note longer than MaxNote.
func checkNote(key string, note *string) error {
	if note != nil && len(*note) > MaxNote {
		return fmt.Errorf("%w: lease %q: note of %d bytes, more than %d", ErrInvalidArgument, key, len(*note), MaxNote)
	}
	return nil
}

// Renew implements Store.
func (m *Memory) Renew(ctx context.Context, key string, t Tenure, ttl time.Duration) (bool, error) {
	if err := checkContext(ctx, "Memory.Renew"); err != nil {
		return false, err
	}
	if err := ready(ctx, checkArgs(key, t.Owner, ttl, true, positiveTTL)); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.leases[key]
	if !ok || !holds(l, t) {
		return false, nil
	}
	if e := m.now().Add(ttl); l.Expiry.IsZero() || e.After(l.Expiry) {
		l.Expiry = e
	}
	return true, nil
}

// Checkpoint implements Store.
func (m *Memory) Checkpoint(ctx context.Context, key string, t Tenure, cp Checkpoint) (bool, error) {
	if err := checkContext(ctx, "Memory.Checkpoint"); err != nil {
		return false, err
	}
	if err := checkArgs(key, t.Owner, 0, true, noTTL); err != nil {
		return false, err
	}
	if err := checkCheckpoint(key, cp); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.leases[key]
	if !ok || !holds(l, t) {
		return false, nil
	}
	l.Checkpoint, l.order = cp, 0
	return true, nil
}

// CheckpointOrdered implements Store.
func (m *Memory) CheckpointOrdered(ctx context.Context, key string, t Tenure, cp Checkpoint, n int64) (bool, error) {
	if err := checkContext(ctx, "Memory.CheckpointOrdered"); err != nil {
		return false, err
	}
	if err := checkArgs(key, t.Owner, 0, true, noTTL); err != nil {
		return false, err
	}
	if err := checkOrdered(key, cp, n); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.leases[key]
	if !ok || !holds(l, t) {
		return false, nil
	}
	if o := checkpointOrder(t, n); o >= l.order {
		l.Checkpoint, l.order = cp, o
	}
	return true, nil
}

// checkOrdered rejects what CheckpointOrdered does not take.
func checkOrdered(key string, cp Checkpoint, n int64) error {
	if n < 1 || n > MaxCheckpointWrite {
		return fmt.Errorf("%w: lease %q: checkpoint write number %d is not between 1 and %d", ErrInvalidArgument, key, n, int64(MaxCheckpointWrite))
	}
	return checkCheckpoint(key, cp)
}

// checkpointOrder orders the checkpoint writes of a lease: by holding (counters only grow),
// then by write number within it.
func checkpointOrder(t Tenure, n int64) int64 { return t.Counter<<32 | n }

// Read implements Store.
func (m *Memory) Read(ctx context.Context, key string) (Lease, error) {
	if err := checkContext(ctx, "Memory.Read"); err != nil {
		return Lease{}, err
	}
	if err := ready(ctx, checkArgs(key, "", 0, false, noTTL)); err != nil {
		return Lease{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := m.leases[key]; ok {
		return l.Lease, nil
	}
	return Lease{Key: key}, nil
}

// Release implements Store.
func (m *Memory) Release(ctx context.Context, key string, t Tenure) (bool, error) {
	if err := checkContext(ctx, "Memory.Release"); err != nil {
		return false, err
	}
	if err := ready(ctx, checkArgs(key, t.Owner, 0, true, noTTL)); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.leases[key]
	if !ok || !holds(l, t) {
		return false, nil
	}
	l.Owner, l.Expiry = "", time.Time{}
	l.Counter++
	return true, nil
}

// Delete implements Store.
func (m *Memory) Delete(ctx context.Context, key string, counter int64) (bool, error) {
	if err := checkContext(ctx, "Memory.Delete"); err != nil {
		return false, err
	}
	if err := ready(ctx, checkArgs(key, "", 0, false, noTTL)); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.leases[key]
	if !ok || l.Counter != counter || l.Held(m.now()) {
		return false, nil
	}
	delete(m.leases, key)
	return true, nil
}

// List implements Store. Leases come sorted by key.
func (m *Memory) List(ctx context.Context) ([]Lease, error) {
	if err := checkContext(ctx, "Memory.List"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Lease, 0, len(m.leases))
	for _, l := range m.leases {
		out = append(out, l.Lease)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// ListPrefix implements Store. Leases come sorted by key.
func (m *Memory) ListPrefix(ctx context.Context, prefix string) ([]Lease, error) {
	if err := checkContext(ctx, "Memory.ListPrefix"); err != nil {
		return nil, err
	}
	if err := ready(ctx, checkPrefix(prefix)); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Lease
	for k, l := range m.leases {
		if strings.HasPrefix(k, prefix) {
			out = append(out, l.Lease)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func checkPrefix(prefix string) error {
	if prefix == "" {
		return fmt.Errorf("%w: empty lease key prefix", ErrInvalidArgument)
	}
	return nil
}
