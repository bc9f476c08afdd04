package kinesistest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"time"
)

const maxShards = 10000

// maxHashKey is 2^128 - 1, the top of the hash-key space.
var maxHashKey = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1))

type hashRange struct{ start, end *big.Int }

func (r hashRange) contains(k *big.Int) bool { return r.start.Cmp(k) <= 0 && k.Cmp(r.end) <= 0 }

// uniformRanges splits the hash-key space into n ranges as the service does: each
// floor(2^128/n) keys wide, the last one taking the rest.
func uniformRanges(n int) []hashRange {
	width := new(big.Int).Div(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(int64(n)))
	out := make([]hashRange, n)
	for i := range n {
		start := new(big.Int).Mul(width, big.NewInt(int64(i)))
		end := new(big.Int).Sub(new(big.Int).Add(start, width), big.NewInt(1))
		if i == n-1 {
			end = new(big.Int).Set(maxHashKey)
		}
		out[i] = hashRange{start, end}
	}
	return out
}

// shard is one shard's state. The Server's mutex guards it; a record once appended never
// changes, so a reader may use a copied slice header of records outside the lock.
type shard struct {
	id       string
	index    int
	streamID uint64
	parent   string
	adjacent string
	hash     hashRange
	gen      uint64 // with spread, where the shard's sequence numbers lie (seqString)
	spread   uint64
	closed   bool
	opened   time.Time
	closedAt time.Time
	children []string
	records  []record
	changed  chan struct{} // closed and replaced when records arrive or the shard closes
	limits   shardLimits
}

func (st *stream) addShard(r hashRange, now time.Time, parent, adjacent string) *shard {
	sh := &shard{
		id:       fmt.Sprintf("shardId-%012d", len(st.shards)),
		index:    len(st.shards),
		streamID: st.id,
		parent:   parent,
		adjacent: adjacent,
		hash:     r,
		spread:   spread(st.id, len(st.shards)),
		opened:   now,
		changed:  make(chan struct{}),
	}
	for _, p := range []string{parent, adjacent} {
		if ps := st.shard(p); ps != nil {
			sh.gen = max(sh.gen, ps.gen+1)
		}
	}
	st.shards = append(st.shards, sh)
	return sh
}

func (st *stream) shard(id string) *shard {
	for _, sh := range st.shards {
		if sh.id == id {
			return sh
		}
	}
	return nil
}

func (sh *shard) isClosed() bool { return sh.closed }

// wake tells waiting subscriptions that the shard changed.
func (sh *shard) wake() {
	close(sh.changed)
	sh.changed = make(chan struct{})
}

func (st *stream) closeShard(sh *shard, now time.Time) {
	sh.closed, sh.closedAt = true, now
	sh.wake()
}

type shardJSON struct {
	ShardId               string
	ParentShardId         string `json:",omitempty"`
	AdjacentParentShardId string `json:",omitempty"`
	HashKeyRange          hashRangeJSON
	SequenceNumberRange   struct {
		StartingSequenceNumber string
		EndingSequenceNumber   string `json:",omitempty"`
	}
}

type hashRangeJSON struct{ StartingHashKey, EndingHashKey string }

func (sh *shard) json() shardJSON {
	j := shardJSON{ShardId: sh.id, ParentShardId: sh.parent, AdjacentParentShardId: sh.adjacent,
		HashKeyRange: hashRangeJSON{sh.hash.start.String(), sh.hash.end.String()}}
	// The shard's counter starts at 0, its first record is 1; no record arrives after the
	// shard closes, so it ends at its last record (at its start when it has none).
	j.SequenceNumberRange.StartingSequenceNumber = seqString(0, sh)
	if sh.closed {
		j.SequenceNumberRange.EndingSequenceNumber = seqString(uint64(len(sh.records)), sh)
	}
	return j
}

type childShardJSON struct {
	ShardId      string
	ParentShards []string
	HashKeyRange hashRangeJSON
}

func (st *stream) childShards(sh *shard) []childShardJSON {
	out := []childShardJSON{}
	for _, id := range sh.children {
		c := st.shard(id)
		parents := []string{c.parent}
		if c.adjacent != "" {
			parents = append(parents, c.adjacent)
		}
		out = append(out, childShardJSON{ShardId: c.id, ParentShards: parents,
			HashKeyRange: hashRangeJSON{c.hash.start.String(), c.hash.end.String()}})
	}
	return out
}

type shardFilter struct {
	Type      string
	ShardId   string        `json:",omitempty"`
	Timestamp *epochSeconds `json:",omitempty"`
}

// listToken is what a ListShards NextToken carries.
type listToken struct {
	Stream string
	ID     uint64
	After  string
	Max    int
	Filter *shardFilter `json:",omitempty"`
}

func (s *Server) listShards(body []byte) (any, *apiError) {
	var in struct {
		streamRef
		NextToken             string
		ExclusiveStartShardId string
		MaxResults            *int
		ShardFilter           *shardFilter
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	max, verr := pageSize(in.MaxResults, "maxResults", 1000, 10000)
	if verr != nil {
		return nil, verr
	}
	after, filter := in.ExclusiveStartShardId, in.ShardFilter
	var tok listToken
	if in.NextToken != "" {
		if in.StreamName != "" || in.StreamARN != "" || in.ExclusiveStartShardId != "" || in.ShardFilter != nil {
			return nil, errInvalid("NextToken and StreamName, StreamARN, ExclusiveStartShardId or ShardFilter cannot be provided together.")
		}
		raw, err := base64.RawURLEncoding.DecodeString(in.NextToken)
		if err != nil || json.Unmarshal(raw, &tok) != nil {
			return nil, errInvalid("Invalid NextToken.")
		}
		in.StreamName, after, filter = tok.Stream, tok.After, tok.Filter
		if in.MaxResults == nil {
			max = tok.Max
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.lookup(in.StreamName, in.StreamARN)
	if err != nil {
		if in.NextToken != "" {
			return nil, errExpired("NextToken has expired: its stream was deleted.")
		}
		return nil, err
	}
	if in.NextToken != "" && tok.ID != st.id {
		return nil, errExpired("NextToken has expired: its stream was deleted.")
	}
	keep, ferr := st.filter(filter)
	if ferr != nil {
		return nil, ferr
	}
	out := struct {
		Shards    []shardJSON
		NextToken string `json:",omitempty"`
	}{Shards: []shardJSON{}}
	for _, sh := range st.shards {
		if after != "" && sh.id <= after || !keep(sh) {
			continue
		}
		if len(out.Shards) == max {
			raw, _ := json.Marshal(listToken{Stream: st.name, ID: st.id, After: out.Shards[max-1].ShardId, Max: max, Filter: filter})
			out.NextToken = base64.RawURLEncoding.EncodeToString(raw)
			break
		}
		out.Shards = append(out.Shards, sh.json())
	}
	return out, nil
}

// filter returns which shards a ListShards ShardFilter keeps. With no retention trimming, the
// trim horizon is the stream's creation.
func (st *stream) filter(f *shardFilter) (func(*shard) bool, *apiError) {
	if f == nil {
		return func(*shard) bool { return true }, nil
	}
	openAt := func(sh *shard, t time.Time) bool {
		return !sh.opened.After(t) && (!sh.closed || sh.closedAt.After(t))
	}
	switch f.Type {
	case "AFTER_SHARD_ID":
		if f.ShardId == "" {
			return nil, errInvalid("ShardFilter AFTER_SHARD_ID needs a ShardId.")
		}
		return func(sh *shard) bool { return sh.id > f.ShardId }, nil
	case "AT_TRIM_HORIZON":
		return func(sh *shard) bool { return openAt(sh, st.created) }, nil
	case "FROM_TRIM_HORIZON":
		return func(*shard) bool { return true }, nil
	case "AT_LATEST":
		return func(sh *shard) bool { return !sh.closed }, nil
	case "AT_TIMESTAMP", "FROM_TIMESTAMP":
		if f.Timestamp == nil {
			return nil, errInvalid("ShardFilter %s needs a Timestamp.", f.Type)
		}
		t := time.Time(*f.Timestamp)
		if f.Type == "AT_TIMESTAMP" {
			return func(sh *shard) bool { return openAt(sh, t) }, nil
		}
		return func(sh *shard) bool { return !sh.closed || sh.closedAt.After(t) }, nil
	}
	return nil, errValidation("ShardFilter Type %q is not one of AFTER_SHARD_ID, AT_TRIM_HORIZON, FROM_TRIM_HORIZON, AT_LATEST, AT_TIMESTAMP, FROM_TIMESTAMP", f.Type)
}
