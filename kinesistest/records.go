package kinesistest

import (
	"crypto/md5"
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"time"
	"unicode/utf16"
)

const (
	maxRecordSize     = 1 << 20  // data plus partition key
	maxPutRecordsSize = 5 << 20  // a PutRecords call's data plus keys
	maxPutRecords     = 500      // entries of a PutRecords call
	maxGetRecords     = 10000    // records of a GetRecords answer
	maxGetRecordsSize = 10 << 20 // bytes of a GetRecords answer
)

// record is one stored record, encoded once as it arrives: GetRecords and subscriptions copy
// the encoding into their answers.
type record struct {
	counter uint64 // the shard's count of records up to this one: its first is 1
	arrival time.Time
	size    int
	json    []byte
}

// A sequence number is numbered per shard, as the service numbers them: 56 decimal digits,
//
//	49 · generation (10) · spread (10) · counter (20) · shard index (6) · stream id (8)
//
// The shard's counter counts its own records only, so a shard's numbers grow with its
// arrivals and say nothing of other shards' traffic. The generation is one more than the
// highest of the shard's parents' (0 for a stream's first shards), so a child's numbers sort
// above every number of its parents, as the service's do. The spread is a hash of the stream
// and the shard's index: shards of one generation take blocks of numbers in an order that
// varies from stream to stream, neither by arrival nor by index, so numbers of different
// shards compare in no way a test could rely on (the service promises no order between
// shards either). The shard's index and the stream's id tell which shard of which stream a
// number belongs to, so that one from a deleted stream is refused by a new stream of the same
// name, as the service refuses it.
func seqString(counter uint64, sh *shard) string {
	return fmt.Sprintf("49%010d%010d%020d%06d%08d", sh.gen, sh.spread, counter, sh.index, sh.streamID%1e8)
}

// seqParts is what a sequence number says.
type seqParts struct {
	gen, spread, counter uint64
	shardIndex           int
	streamID             uint64
}

func parseSeq(s string) (seqParts, bool) {
	if len(s) != 56 || s[:2] != "49" {
		return seqParts{}, false
	}
	var p seqParts
	var errs [5]error
	p.gen, errs[0] = strconv.ParseUint(s[2:12], 10, 64)
	p.spread, errs[1] = strconv.ParseUint(s[12:22], 10, 64)
	p.counter, errs[2] = strconv.ParseUint(s[22:42], 10, 64)
	p.shardIndex, errs[3] = strconv.Atoi(s[42:48])
	p.streamID, errs[4] = strconv.ParseUint(s[48:], 10, 64)
	for _, err := range errs {
		if err != nil {
			return seqParts{}, false
		}
	}
	return p, true
}

// spread places a shard's block of numbers among its generation's: splitmix64 of the stream's
// id and the shard's index, below 10^10.
func spread(streamID uint64, index int) uint64 {
	z := (streamID<<32 ^ uint64(index)) + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return (z ^ z>>31) % 1e10
}

type recordJSON struct {
	SequenceNumber              string
	ApproximateArrivalTimestamp epochSeconds
	Data                        []byte
	PartitionKey                string
}

type putEntry struct {
	Data            []byte
	PartitionKey    string
	ExplicitHashKey string
}

// explicitHashKeyPattern is the service's pattern for an explicit hash key.
var explicitHashKeyPattern = regexp.MustCompile(`^(0|[1-9]\d{0,38})$`)

// keyLength is the length of a partition key as the service measures it, in UTF-16 code units
// (as Java's String.length, the Java KPL and kinesalite count): a character outside the Basic
// Multilingual Plane, such as an emoji, counts twice.
func keyLength(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// check validates an entry as the service does and returns its hash key.
func (e *putEntry) check(field string) (*big.Int, *apiError) {
	if n := keyLength(e.PartitionKey); n < 1 || n > 256 {
		return nil, errValidation("1 validation error detected: Value at '%spartitionKey' failed to satisfy constraint: Member must have length between 1 and 256", field)
	}
	if len(e.Data)+len(e.PartitionKey) > maxRecordSize {
		return nil, errValidation("1 validation error detected: Value at '%sdata' failed to satisfy constraint: Member must have length less than or equal to %d", field, maxRecordSize)
	}
	if e.ExplicitHashKey != "" {
		if !explicitHashKeyPattern.MatchString(e.ExplicitHashKey) {
			return nil, errValidation("1 validation error detected: Value '%s' at '%sexplicitHashKey' failed to satisfy constraint: Member must satisfy regular expression pattern: 0|([1-9]\\d{0,38})", e.ExplicitHashKey, field)
		}
		k, ok := new(big.Int).SetString(e.ExplicitHashKey, 10)
		if !ok || k.Cmp(maxHashKey) > 0 {
			return nil, errInvalid("Invalid ExplicitHashKey. ExplicitHashKey must be in the range: [0, 2^128-1]. Specified value was %s", e.ExplicitHashKey)
		}
		return k, nil
	}
	sum := md5.Sum([]byte(e.PartitionKey))
	return new(big.Int).SetBytes(sum[:]), nil
}

// writable finds the stream for a put; the caller holds s.mu.
func (s *Server) writable(ref streamRef) (*stream, *apiError) {
	st, err := s.lookup(ref.StreamName, ref.StreamARN)
	if err != nil {
		return nil, err
	}
	if st.status == statusCreating || st.status == statusDeleting {
		return nil, errNotFound("Stream %s under account %s not found.", st.name, account)
	}
	return st, nil
}

// put appends one record to the open shard whose range holds key; the caller holds s.mu.
func (s *Server) put(st *stream, e *putEntry, key *big.Int, now time.Time) (*shard, string, *apiError) {
	var sh *shard
	for _, c := range st.shards {
		if !c.closed && c.hash.contains(key) {
			sh = c
			break
		}
	}
	if sh == nil {
		return nil, "", errInternal("no open shard holds hash key %s", key)
	}
	size := len(e.Data) + len(e.PartitionKey)
	if s.cfg.limits && !sh.limits.write(size, now) {
		return nil, "", errThroughput("Rate exceeded for shard %s in stream %s under account %s.", sh.id, st.name, account)
	}
	counter := uint64(len(sh.records)) + 1
	seq := seqString(counter, sh)
	buf, err := json.Marshal(recordJSON{SequenceNumber: seq, ApproximateArrivalTimestamp: epochSeconds(now), Data: e.Data, PartitionKey: e.PartitionKey})
	if err != nil {
		return nil, "", errInternal("encode record: %v", err)
	}
	sh.records = append(sh.records, record{counter: counter, arrival: now, size: size, json: buf})
	sh.wake()
	return sh, seq, nil
}

func (s *Server) putRecord(body []byte) (any, *apiError) {
	var in struct {
		streamRef
		putEntry
		SequenceNumberForOrdering string
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	key, err := in.check("")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.writable(in.streamRef)
	if err != nil {
		return nil, err
	}
	sh, seq, err := s.put(st, &in.putEntry, key, s.now())
	if err != nil {
		return nil, err
	}
	return struct{ ShardId, SequenceNumber, EncryptionType string }{sh.id, seq, "NONE"}, nil
}

type putResult struct {
	SequenceNumber string `json:",omitempty"`
	ShardId        string `json:",omitempty"`
	ErrorCode      string `json:",omitempty"`
	ErrorMessage   string `json:",omitempty"`
}

func (s *Server) putRecords(body []byte) (any, *apiError) {
	var in struct {
		streamRef
		Records []putEntry
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	if n := len(in.Records); n < 1 || n > maxPutRecords {
		return nil, errValidation("1 validation error detected: Value '%d' at 'records' failed to satisfy constraint: Member must have length less than or equal to %d and greater than or equal to 1", n, maxPutRecords)
	}
	keys := make([]*big.Int, len(in.Records))
	total := 0
	for i := range in.Records {
		k, err := in.Records[i].check(fmt.Sprintf("records.%d.member.", i+1))
		if err != nil {
			return nil, err
		}
		keys[i] = k
		total += len(in.Records[i].Data) + len(in.Records[i].PartitionKey)
	}
	if total > maxPutRecordsSize {
		return nil, errInvalid("Records size exceeds %d bytes limit", maxPutRecordsSize)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.writable(in.streamRef)
	if err != nil {
		return nil, err
	}
	now := s.now()
	out := struct {
		FailedRecordCount int
		Records           []putResult
		EncryptionType    string
	}{Records: make([]putResult, len(in.Records)), EncryptionType: "NONE"}
	for i := range in.Records {
		sh, seq, err := s.put(st, &in.Records[i], keys[i], now)
		if err != nil {
			out.FailedRecordCount++
			out.Records[i] = putResult{ErrorCode: err.typ, ErrorMessage: err.message}
			continue
		}
		out.Records[i] = putResult{SequenceNumber: seq, ShardId: sh.id}
	}
	return out, nil
}
