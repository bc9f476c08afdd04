package lease

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Memory is a Store held in this process's memory, for a single process: subscribers in other
// processes cannot see it, so each would read every shard. Nothing survives a restart. It is
// safe for concurrent use.
type Memory struct {
	mu     sync.Mutex
	leases map[string]*Lease
	now    func() time.Time
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{leases: make(map[string]*Lease), now: time.Now}
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
func checkCheckpoint(key, sequence string, subSequence int64) error {
	switch {
	case sequence == "":
		return fmt.Errorf("%w: lease %q: empty checkpoint", ErrInvalidArgument, key)
	case subSequence < 0:
		return fmt.Errorf("%w: lease %q: sub-sequence %d is negative", ErrInvalidArgument, key, subSequence)
	}
	return nil
}

func checkArgs(key, owner string, ttl time.Duration, needOwner, needTTL bool) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty lease key", ErrInvalidArgument)
	case needOwner && owner == "":
		return fmt.Errorf("%w: empty owner for lease %q", ErrInvalidArgument, key)
	case needTTL && ttl <= 0:
		return fmt.Errorf("%w: lease %q: ttl %v must be positive", ErrInvalidArgument, key, ttl)
	}
	return nil
}

func (m *Memory) get(key string) *Lease {
	l, ok := m.leases[key]
	if !ok {
		l = &Lease{Key: key}
		m.leases[key] = l
	}
	return l
}

// Acquire implements Store.
func (m *Memory) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := checkContext(ctx, "Memory.Acquire"); err != nil {
		return false, err
	}
	if err := ready(ctx, checkArgs(key, owner, ttl, true, true)); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	l := m.get(key)
	if l.Owner != owner && l.Held(now) {
		return false, nil
	}
	l.Owner, l.Expiry = owner, now.Add(ttl)
	l.Counter++
	return true, nil
}

// Steal implements Store.
func (m *Memory) Steal(ctx context.Context, key, owner string, counter int64, ttl time.Duration) (bool, error) {
	if err := checkContext(ctx, "Memory.Steal"); err != nil {
		return false, err
	}
	if err := ready(ctx, checkArgs(key, owner, ttl, true, true)); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.leases[key]
	if !ok || l.Counter != counter {
		return false, nil
	}
	l.Owner, l.Expiry = owner, m.now().Add(ttl)
	l.Counter++
	return true, nil
}

// Renew implements Store.
func (m *Memory) Renew(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := checkContext(ctx, "Memory.Renew"); err != nil {
		return false, err
	}
	if err := ready(ctx, checkArgs(key, owner, ttl, true, true)); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.leases[key]
	if !ok || l.Owner != owner {
		return false, nil
	}
	l.Expiry = m.now().Add(ttl)
	l.Counter++
	return true, nil
}

// Checkpoint implements Store.
func (m *Memory) Checkpoint(ctx context.Context, key, owner, sequence string, subSequence int64) (bool, error) {
	if err := checkContext(ctx, "Memory.Checkpoint"); err != nil {
		return false, err
	}
	if err := checkArgs(key, owner, 0, true, false); err != nil {
		return false, err
	}
	if err := checkCheckpoint(key, sequence, subSequence); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.leases[key]
	if !ok || l.Owner != owner {
		return false, nil
	}
	l.Checkpoint, l.SubSequence = sequence, subSequence
	l.Counter++
	return true, nil
}

// Read implements Store.
func (m *Memory) Read(ctx context.Context, key string) (Lease, error) {
	if err := checkContext(ctx, "Memory.Read"); err != nil {
		return Lease{}, err
	}
	if err := ready(ctx, checkArgs(key, "", 0, false, false)); err != nil {
		return Lease{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := m.leases[key]; ok {
		return *l, nil
	}
	return Lease{Key: key}, nil
}

// Release implements Store.
func (m *Memory) Release(ctx context.Context, key, owner string) error {
	if err := checkContext(ctx, "Memory.Release"); err != nil {
		return err
	}
	if err := ready(ctx, checkArgs(key, owner, 0, true, false)); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.leases[key]
	if !ok || l.Owner != owner {
		return nil
	}
	l.Owner, l.Expiry = "", time.Time{}
	l.Counter++
	return nil
}

// Delete implements Store.
func (m *Memory) Delete(ctx context.Context, key string, counter int64) (bool, error) {
	if err := checkContext(ctx, "Memory.Delete"); err != nil {
		return false, err
	}
	if err := ready(ctx, checkArgs(key, "", 0, false, false)); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.leases[key]
	if !ok || l.Counter != counter {
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
		out = append(out, *l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// ListPrefix implements PrefixLister. Leases come sorted by key.
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
			out = append(out, *l)
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
