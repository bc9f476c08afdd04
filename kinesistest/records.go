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
	counter uint64
	arrival time.Time
	size    int
	json    []byte
}

// seqString formats a sequence number as the service does: 56 decimal digits. The stream's
// counter comes first, so numbers grow with arrival across the stream; the shard's index and
// the stream's id follow, so a number tells which shard of which stream it belongs to, and one
// from a deleted stream is refused by a new stream of the same name, as the service refuses it.
func seqString(counter uint64, sh *shard) string {
	return fmt.Sprintf("49%040d%06d%08d", counter, sh.index, sh.streamID%1e8)
}

func parseSeq(s string) (counter uint64, shardIndex int, streamID uint64, ok bool) {
	if len(s) != 56 || s[:2] != "49" {
		return 0, 0, 0, false
	}
	c, err1 := strconv.ParseUint(s[2:42], 10, 64)
	i, err2 := strconv.Atoi(s[42:48])
	id, err3 := strconv.ParseUint(s[48:], 10, 64)
	return c, i, id, err1 == nil && err2 == nil && err3 == nil
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
	st.seq++
	seq := seqString(st.seq, sh)
	buf, err := json.Marshal(recordJSON{SequenceNumber: seq, ApproximateArrivalTimestamp: epochSeconds(now), Data: e.Data, PartitionKey: e.PartitionKey})
	if err != nil {
		return nil, "", errInternal("encode record: %v", err)
	}
	sh.records = append(sh.records, record{counter: st.seq, arrival: now, size: size, json: buf})
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
