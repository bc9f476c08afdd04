package publish

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gostream/kinesub/internal/kinesisiface"
	"github.com/gostream/kinesub/internal/kpl"
)

// shardSpan is an open shard and its hash-key range.
type shardSpan struct {
	id         string
	start, end kpl.HashKey
}

// ShardMap is the stream's open shards as one listing showed them, sorted by range. It never
// changes once built.
type ShardMap struct{ spans []shardSpan }

// newShardMap builds the map of the open shards (those without an ending sequence number) of a
// listing. Ranges the listing writes in a form the service does not use are skipped: records
// of keys they hold go to no predicted shard.
func newShardMap(shards []types.Shard) *ShardMap {
	m := &ShardMap{}
	for _, s := range shards {
		if s.SequenceNumberRange != nil && s.SequenceNumberRange.EndingSequenceNumber != nil || s.HashKeyRange == nil {
			continue
		}
		start, ok1 := kpl.ParseHashKey(aws.ToString(s.HashKeyRange.StartingHashKey))
		end, ok2 := kpl.ParseHashKey(aws.ToString(s.HashKeyRange.EndingHashKey))
		if ok1 && ok2 {
			m.spans = append(m.spans, shardSpan{id: aws.ToString(s.ShardId), start: start, end: end})
		}
	}
	slices.SortFunc(m.spans, func(a, b shardSpan) int { return a.start.Cmp(b.start) })
	return m
}

// Len is the number of open shards in m.
func (m *ShardMap) Len() int { return len(m.spans) }

// Find returns the open shard whose range holds h, or "" when none does (a map listed in the
// middle of a reshard may have a gap).
func (m *ShardMap) Find(h kpl.HashKey) string {
	i, found := slices.BinarySearchFunc(m.spans, h, func(s shardSpan, h kpl.HashKey) int { return s.start.Cmp(h) })
	if !found {
		i-- // the last span starting below h
	}
	if i < 0 || m.spans[i].end.Cmp(h) < 0 {
		return ""
	}
	return m.spans[i].id
}

// How often a publisher lists the stream's shards at most: after a reshard (a record written
// to another shard than predicted) and, when listing failed, to try again.
const (
	shardRelistInterval = time.Second
	shardListRetry      = 30 * time.Second
)

// Tracker holds a publisher's view of the stream's shards and one pacer per shard. It is
// shared by every call of the publisher and safe for concurrent use.
type Tracker struct {
	client kinesisiface.Kinesis
	stream Stream

	mispredicted atomic.Int64 // records written to another shard than predicted (Mispredicted)

	mu       sync.Mutex
	m        *ShardMap // nil until a listing worked
	pacers   map[string]*shardPacer
	unknown  *shardPacer // records of no known shard: unpaced
	stale    bool        // a write showed the map out of date
	listedAt time.Time   // when the last listing started
	failed   bool        // the last listing failed
	listing  chan struct{}
}

func NewTracker(client kinesisiface.Kinesis, stream Stream) *Tracker {
	return &Tracker{client: client, stream: stream, pacers: map[string]*shardPacer{}, unknown: newUnlimitedPacer()}
}

// Current returns the map to route by, listing the shards first when none is known yet or the
// known one went stale (at most once a second; after a failed listing, every 30 seconds). A
// listing that fails leaves the previous map in use, or none: records then go unpaced. Only a
// missing stream is an error: ListShards' ResourceNotFoundException.
func (t *Tracker) Current(ctx context.Context) (*ShardMap, error) {
	for {
		t.mu.Lock()
		if t.listing != nil && t.m == nil {
			// The first listing is under way: wait for it rather than go unpaced. (While a
			// map is known, a relisting need not hold anyone up.)
			ch := t.listing
			t.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, nil // the caller sees ctx end itself
			}
		}
		due := t.m == nil || t.stale
		wait := shardRelistInterval
		if t.failed {
			wait = shardListRetry
		}
		if !due || t.listing != nil || time.Since(t.listedAt) < wait {
			m := t.m
			t.mu.Unlock()
			return m, nil
		}
		ch := make(chan struct{})
		t.listing, t.listedAt = ch, time.Now()
		t.mu.Unlock()
		shards, err := t.list(ctx)
		t.mu.Lock()
		t.listing = nil
		close(ch)
		switch {
		case err == nil:
			t.install(newShardMap(shards))
		case ctx.Err() != nil:
			t.listedAt = time.Time{} // the caller gave up, not the service: the next call lists
		default:
			t.failed = true
		}
		m := t.m
		t.mu.Unlock()
		if rnf := (*types.ResourceNotFoundException)(nil); errors.As(err, &rnf) {
			return m, err
		}
		return m, nil
	}
}

// install makes m the current map, with a pacer for each of its shards (kept for shards that
// stay open); the caller holds t.mu.
func (t *Tracker) install(m *ShardMap) {
	pacers := make(map[string]*shardPacer, len(m.spans))
	for _, s := range m.spans {
		if p := t.pacers[s.id]; p != nil {
			pacers[s.id] = p
		} else {
			pacers[s.id] = newShardPacer()
		}
	}
	t.m, t.pacers, t.stale, t.failed = m, pacers, false, false
}

func (t *Tracker) list(ctx context.Context) ([]types.Shard, error) {
	in := &kinesis.ListShardsInput{StreamName: t.stream.nameParam(), StreamARN: t.stream.arnParam()}
	var all []types.Shard
	for {
		out, err := t.client.ListShards(ctx, in)
		if err != nil {
			return nil, err
		}
		all = append(all, out.Shards...)
		if out.NextToken == nil {
			return all, nil
		}
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
}

// pacer returns the pacer of shard id, or the unpaced one for records of no known shard.
func (t *Tracker) pacer(id string) *shardPacer {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.pacers[id]; p != nil {
		return p
	}
	return t.unknown
}

// Wrote notes where the service wrote a record predicted for shard predicted: another shard
// means the map is out of date (the stream was resharded), and the next Current lists again.
func (t *Tracker) Wrote(predicted, actual string) {
	if predicted == actual || actual == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		return // no listing worked: nothing was predicted
	}
	t.mispredicted.Add(1)
	t.stale = true
}

// Charge counts a record that Publish sends at once in the pacing of its shard, and returns
// the shard predicted, or "" when the shards are not known.
func (t *Tracker) Charge(h kpl.HashKey, size int) string {
	t.mu.Lock()
	m := t.m
	t.mu.Unlock()
	if m == nil {
		return ""
	}
	id := m.Find(h)
	if id != "" {
		t.pacer(id).reserve(time.Now(), 1, size) // booked, not waited for
	}
	return id
}

// Mispredicted is how many records were written to another shard than predicted.
func (t *Tracker) Mispredicted() int64 { return t.mispredicted.Load() }
