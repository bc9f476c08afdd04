package kinesistest

import (
	"math/big"
	"time"
)

// beginReshard checks that st may be resharded now and marks it UPDATING.
func (s *Server) beginReshard(st *stream, now time.Time) *apiError {
	if st.status != statusActive {
		return errInUse("Stream %s under account %s not ACTIVE, instead in state %s", st.name, account, st.status)
	}
	st.status, st.settleAt = statusUpdating, now.Add(s.cfg.statusDelay)
	return nil
}

func openShard(st *stream, id, field string) (*shard, *apiError) {
	sh := st.shard(id)
	if sh == nil {
		return nil, errNotFound("Could not find shard %s in stream %s under account %s.", id, st.name, account)
	}
	if sh.closed {
		return nil, errInvalid("%s %s in stream %s under account %s has already been merged or split, and thus is not eligible for merging or splitting.", field, id, st.name, account)
	}
	return sh, nil
}

func (s *Server) splitShard(body []byte) (any, *apiError) {
	var in struct {
		streamRef
		ShardToSplit       string
		NewStartingHashKey string
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	key, ok := new(big.Int).SetString(in.NewStartingHashKey, 10)
	if !ok {
		return nil, errValidation("NewStartingHashKey %q is not a decimal integer", in.NewStartingHashKey)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.lookup(in.StreamName, in.StreamARN)
	if err != nil {
		return nil, err
	}
	sh, err := openShard(st, in.ShardToSplit, "Shard")
	if err != nil {
		return nil, err
	}
	if key.Cmp(sh.hash.start) <= 0 || key.Cmp(sh.hash.end) > 0 {
		return nil, errInvalid("NewStartingHashKey %s used in SplitShard() on shard %s in stream %s under account %s is not both greater than one plus the shard's StartingHashKey %s and less than the shard's EndingHashKey %s.",
			key, sh.id, st.name, account, sh.hash.start, sh.hash.end)
	}
	now := s.now()
	if err := s.beginReshard(st, now); err != nil {
		return nil, err
	}
	st.closeShard(sh, now)
	lo := st.addShard(hashRange{sh.hash.start, new(big.Int).Sub(key, big.NewInt(1))}, now, sh.id, "")
	hi := st.addShard(hashRange{key, sh.hash.end}, now, sh.id, "")
	sh.children = []string{lo.id, hi.id}
	s.settle(st, now)
	return struct{}{}, nil
}

func (s *Server) mergeShards(body []byte) (any, *apiError) {
	var in struct {
		streamRef
		ShardToMerge         string
		AdjacentShardToMerge string
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.lookup(in.StreamName, in.StreamARN)
	if err != nil {
		return nil, err
	}
	a, err := openShard(st, in.ShardToMerge, "Shard")
	if err != nil {
		return nil, err
	}
	b, err := openShard(st, in.AdjacentShardToMerge, "Shard")
	if err != nil {
		return nil, err
	}
	lo, hi := a, b
	if hi.hash.start.Cmp(lo.hash.start) < 0 {
		lo, hi = hi, lo
	}
	if new(big.Int).Add(lo.hash.end, big.NewInt(1)).Cmp(hi.hash.start) != 0 {
		return nil, errInvalid("Shards %s and %s in stream %s under account %s are not an adjacent pair of shards eligible for merging", a.id, b.id, st.name, account)
	}
	now := s.now()
	if err := s.beginReshard(st, now); err != nil {
		return nil, err
	}
	st.closeShard(a, now)
	st.closeShard(b, now)
	c := st.addShard(hashRange{lo.hash.start, hi.hash.end}, now, a.id, b.id)
	a.children, b.children = []string{c.id}, []string{c.id}
	s.settle(st, now)
	return struct{}{}, nil
}

// updateShardCount scales uniformly in one step: every open shard closes and the target number
// of shards opens with uniform hash ranges, each child listing the closed shards its range
// overlaps as its parents. A child can list at most two parents (ParentShardId and
// AdjacentParentShardId), so a target that would give one child three is refused; the service
// reaches such targets through intermediate splits and merges instead.
func (s *Server) updateShardCount(body []byte) (any, *apiError) {
	var in struct {
		streamRef
		TargetShardCount int
		ScalingType      string
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	if in.ScalingType != "UNIFORM_SCALING" {
		return nil, errValidation("ScalingType %q must be UNIFORM_SCALING", in.ScalingType)
	}
	if in.TargetShardCount < 1 || in.TargetShardCount > maxShards {
		return nil, errValidation("TargetShardCount %d must be between 1 and %d", in.TargetShardCount, maxShards)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.lookup(in.StreamName, in.StreamARN)
	if err != nil {
		return nil, err
	}
	var open []*shard
	for _, sh := range st.shards {
		if !sh.closed {
			open = append(open, sh)
		}
	}
	n := len(open)
	if in.TargetShardCount > 2*n || 2*in.TargetShardCount < n {
		return nil, errLimit("UpdateShardCount to %d from %d open shards: the target must be between half and double the open shard count.", in.TargetShardCount, n)
	}
	if in.TargetShardCount == n {
		return nil, errInvalid("Stream %s under account %s already has %d open shards.", st.name, account, n)
	}
	ranges := uniformRanges(in.TargetShardCount)
	parents := make([][]*shard, len(ranges))
	for i, r := range ranges {
		for _, sh := range open {
			if sh.hash.start.Cmp(r.end) <= 0 && r.start.Cmp(sh.hash.end) <= 0 {
				parents[i] = append(parents[i], sh)
			}
		}
		if len(parents[i]) > 2 {
			return nil, errInvalid("kinesistest cannot scale stream %s to %d shards in one step: a new shard would have %d parents; scale through an intermediate count.", st.name, in.TargetShardCount, len(parents[i]))
		}
	}
	now := s.now()
	if err := s.beginReshard(st, now); err != nil {
		return nil, err
	}
	for _, sh := range open {
		st.closeShard(sh, now)
	}
	for i, r := range ranges {
		adjacent := ""
		if len(parents[i]) == 2 {
			adjacent = parents[i][1].id
		}
		c := st.addShard(r, now, parents[i][0].id, adjacent)
		for _, p := range parents[i] {
			p.children = append(p.children, c.id)
		}
	}
	s.settle(st, now)
	return struct {
		StreamName        string
		StreamARN         string
		CurrentShardCount int
		TargetShardCount  int
	}{st.name, st.arn, n, in.TargetShardCount}, nil
}
