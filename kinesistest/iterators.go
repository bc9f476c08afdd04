package kinesistest

import (
	"encoding/base64"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// iterator is what a shard iterator carries: the stream (and which stream of that name), the
// shard, the index of the next record to read and when the iterator was handed out.
type iterator struct {
	stream string
	id     uint64
	shard  int
	pos    int
	issued time.Time
}

func (it iterator) String() string {
	raw := fmt.Sprintf("%s|%d|%d|%d|%d", it.stream, it.id, it.shard, it.pos, it.issued.UnixNano())
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

func parseIterator(s string) (iterator, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return iterator{}, false
	}
	f := strings.Split(string(raw), "|")
	if len(f) != 5 {
		return iterator{}, false
	}
	id, err1 := strconv.ParseUint(f[1], 10, 64)
	sh, err2 := strconv.Atoi(f[2])
	pos, err3 := strconv.Atoi(f[3])
	ns, err4 := strconv.ParseInt(f[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || sh < 0 || pos < 0 {
		return iterator{}, false
	}
	return iterator{stream: f[0], id: id, shard: sh, pos: pos, issued: time.Unix(0, ns)}, true
}

// startingPosition is where a reader starts in a shard: GetShardIterator's type and its
// argument, also SubscribeToShard's StartingPosition.
type startingPosition struct {
	Type           string
	SequenceNumber string        `json:",omitempty"`
	Timestamp      *epochSeconds `json:",omitempty"`
}

// position resolves a starting position to an index into sh.records; the caller holds s.mu.
func (sh *shard) position(p startingPosition) (int, *apiError) {
	switch p.Type {
	case "TRIM_HORIZON":
		return 0, nil
	case "LATEST":
		return len(sh.records), nil
	case "AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER":
		if p.SequenceNumber == "" {
			return 0, errInvalid("A StartingSequenceNumber or AtSequenceNumber must be provided for %s.", p.Type)
		}
		q, ok := parseSeq(p.SequenceNumber)
		if !ok || q.streamID != sh.streamID%1e8 {
			return 0, errInvalid("StartingSequenceNumber %s used in GetShardIterator on shard %s is invalid because it did not come from this stream.", p.SequenceNumber, sh.id)
		}
		if q.shardIndex != sh.index || q.gen != sh.gen || q.spread != sh.spread {
			return 0, errInvalid("Invalid StartingSequenceNumber. It encodes %s, while it was used in a call to a shard with %s", fmt.Sprintf("shardId-%012d", q.shardIndex), sh.id)
		}
		c := q.counter
		if p.Type == "AFTER_SEQUENCE_NUMBER" {
			c++
		}
		return sort.Search(len(sh.records), func(i int) bool { return sh.records[i].counter >= c }), nil
	case "AT_TIMESTAMP":
		if p.Timestamp == nil {
			return 0, errInvalid("Must specify timestampInMillis parameter for iterator of type AT_TIMESTAMP.")
		}
		t := time.Time(*p.Timestamp)
		return sort.Search(len(sh.records), func(i int) bool { return !sh.records[i].arrival.Before(t) }), nil
	}
	return 0, errValidation("1 validation error detected: Value '%s' at 'shardIteratorType' failed to satisfy constraint: Member must satisfy enum value set: [AFTER_SEQUENCE_NUMBER, AT_SEQUENCE_NUMBER, AT_TIMESTAMP, TRIM_HORIZON, LATEST]", p.Type)
}

func (s *Server) getShardIterator(body []byte) (any, *apiError) {
	var in struct {
		streamRef
		ShardId                string
		ShardIteratorType      string
		StartingSequenceNumber string
		Timestamp              *epochSeconds
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
	sh := st.shard(in.ShardId)
	if sh == nil {
		return nil, errNotFound("Shard %s in stream %s under account %s does not exist", in.ShardId, st.name, account)
	}
	pos, err := sh.position(startingPosition{Type: in.ShardIteratorType, SequenceNumber: in.StartingSequenceNumber, Timestamp: in.Timestamp})
	if err != nil {
		return nil, err
	}
	it := iterator{stream: st.name, id: st.id, shard: sh.index, pos: pos, issued: s.now()}
	return struct{ ShardIterator string }{it.String()}, nil
}

// rawJSON is an answer already encoded.
type rawJSON []byte

func (s *Server) getRecords(body []byte) (any, *apiError) {
	var in struct {
		ShardIterator string
		Limit         *int
		StreamARN     string
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	limit, verr := pageSize(in.Limit, "limit", maxGetRecords, maxGetRecords)
	if verr != nil {
		return nil, verr
	}
	it, ok := parseIterator(in.ShardIterator)
	if !ok {
		return nil, errInvalid("Invalid ShardIterator.")
	}
	s.mu.Lock()
	now := s.now()
	if age := now.Sub(it.issued); age > s.cfg.iteratorLifetime {
		s.mu.Unlock()
		return nil, errExpired("Iterator expired. The iterator was created at time %s while right now it is %s which is further in the future than the tolerated delay of %d milliseconds.",
			it.issued.UTC().Format(time.RFC1123), now.UTC().Format(time.RFC1123), s.cfg.iteratorLifetime.Milliseconds())
	}
	st, err := s.lookup(it.stream, in.StreamARN)
	if err == nil && st.id != it.id {
		err = errNotFound("Stream %s under account %s was deleted after the iterator was handed out.", it.stream, account)
	}
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if it.shard >= len(st.shards) {
		s.mu.Unlock()
		return nil, errInvalid("Invalid ShardIterator.")
	}
	sh := st.shards[it.shard]
	if s.cfg.limits && !sh.limits.readCall(now) {
		s.mu.Unlock()
		return nil, errThroughput("Rate exceeded for shard %s in stream %s under account %s.", sh.id, st.name, account)
	}
	records := sh.records[:len(sh.records):len(sh.records)]
	pos := min(it.pos, len(records))
	end, size := pos, 0
	for end < len(records) && end-pos < limit && size+records[end].size <= maxGetRecordsSize {
		size += records[end].size
		end++
	}
	if s.cfg.limits {
		sh.limits.read(size, now)
	}
	atEnd := sh.closed && end == len(records)
	var children []childShardJSON
	if atEnd {
		children = st.childShards(sh)
	}
	s.mu.Unlock()

	return rawJSON(appendGetRecords(records[pos:end], it, end, atEnd, children, millisBehind(records, end, now), now)), nil
}

// millisBehind is how far a reader that next reads records[next] is behind the newest record.
func millisBehind(records []record, next int, now time.Time) int64 {
	if next >= len(records) {
		return 0
	}
	return max(0, now.Sub(records[next].arrival).Milliseconds())
}

func appendGetRecords(recs []record, it iterator, end int, atEnd bool, children []childShardJSON, behind int64, now time.Time) []byte {
	return appendPage(recs, atEnd, children, behind, func(buf []byte) []byte {
		next := iterator{stream: it.stream, id: it.id, shard: it.shard, pos: end, issued: now}
		buf = append(buf, `,"NextShardIterator":"`...)
		buf = append(buf, next.String()...)
		return append(buf, '"')
	})
}

// appendPage renders a page of records as GetRecords and SubscribeToShard events share it:
// the records, MillisBehindLatest, and ChildShards at a closed shard's end or, before it, what
// more tells the client where to go on from.
func appendPage(recs []record, atEnd bool, children []childShardJSON, behind int64, more func([]byte) []byte) []byte {
	n := 384
	for _, r := range recs {
		n += len(r.json) + 1
	}
	buf := make([]byte, 0, n)
	buf = append(buf, `{"Records":[`...)
	for i, r := range recs {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, r.json...)
	}
	buf = append(buf, `],"MillisBehindLatest":`...)
	buf = strconv.AppendInt(buf, behind, 10)
	if atEnd {
		buf = append(buf, `,"ChildShards":`...)
		buf = appendJSON(buf, children)
	} else {
		buf = more(buf)
	}
	return append(buf, '}')
}
