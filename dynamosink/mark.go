package dynamosink

import (
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/gostream/kinesub/lease"
)

// Mark is a key's high-water mark: the last record applied under the key, and the shard
// holding that applied it. Apply writes a record's mark with its effects; ApplyMark takes one
// built by the caller.
type Mark struct {
	// Key is the order key (without the sink's WithKeyPrefix). Not empty.
	Key string
	// Shard is the shard the record was read from. Not empty.
	Shard string
	// Sequence is the record's sequence number: decimal digits, no leading zero, at most
	// 128 of them, as Kinesis gives them.
	Sequence string
	// SubSequence is the record's position in its KPL aggregate (0 when not aggregated).
	SubSequence int
	// Tenure is the shard holding the record was read under (kinesub.Message.Tenure): its
	// Counter orders the holdings of one shard.
	Tenure lease.Tenure
}

// Attribute names of a mark item.
const (
	attrKey     = "key"     // S, the table's partition key: prefix and order key
	attrPos     = "pos"     // S, the record's position, comparable as a string (position)
	attrShard   = "shard"   // S
	attrSeq     = "seq"     // S
	attrSub     = "sub"     // N
	attrOwner   = "owner"   // S
	attrCounter = "counter" // N
)

// maxSequence is the longest sequence number Kinesis gives.
const maxSequence = 128

// check returns why m cannot be written, or nil.
func (m Mark) check() error {
	switch {
	case m.Key == "":
		return fmt.Errorf("%w: empty order key", ErrInvalidRecord)
	case m.Shard == "":
		return fmt.Errorf("%w: empty shard id", ErrInvalidRecord)
	case m.SubSequence < 0 || m.SubSequence > 1<<31-1:
		return fmt.Errorf("%w: sub-sequence %d out of range 0 to %d", ErrInvalidRecord, m.SubSequence, 1<<31-1)
	case m.Tenure.Owner == "" || m.Tenure.Counter < 0:
		return fmt.Errorf("%w: no shard holding (owner %q, counter %d): a record read by a subscriber carries one",
			ErrInvalidRecord, m.Tenure.Owner, m.Tenure.Counter)
	}
	s := m.Sequence
	if s == "" || len(s) > maxSequence || (len(s) > 1 && s[0] == '0') {
		return fmt.Errorf("%w: sequence number %q: want 1 to %d decimal digits without a leading zero", ErrInvalidRecord, s, maxSequence)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return fmt.Errorf("%w: sequence number %q: want decimal digits", ErrInvalidRecord, s)
		}
	}
	return nil
}

// position encodes where a record stands so that DynamoDB's string comparison orders records
// as Kinesis does: by sequence number as a number (its length first, then its digits), then
// by sub-sequence. Sequence numbers are compared across shards too (a key moves to a child
// shard when its shard splits or merges): Kinesis numbers a child's records above its
// parents'.
func position(seq string, sub int) string {
	return fmt.Sprintf("%03d%s.%010d", len(seq), seq, sub)
}

// item returns m's mark item under the table key k.
func (m Mark) item(k string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		attrKey:     &types.AttributeValueMemberS{Value: k},
		attrPos:     &types.AttributeValueMemberS{Value: position(m.Sequence, m.SubSequence)},
		attrShard:   &types.AttributeValueMemberS{Value: m.Shard},
		attrSeq:     &types.AttributeValueMemberS{Value: m.Sequence},
		attrSub:     &types.AttributeValueMemberN{Value: strconv.Itoa(m.SubSequence)},
		attrOwner:   &types.AttributeValueMemberS{Value: m.Tenure.Owner},
		attrCounter: &types.AttributeValueMemberN{Value: strconv.FormatInt(m.Tenure.Counter, 10)},
	}
}

// markOf reads a mark item; ok is false when it is not one.
func markOf(key string, it map[string]types.AttributeValue) (m Mark, ok bool) {
	str := func(a string) (string, bool) {
		v, ok := it[a].(*types.AttributeValueMemberS)
		if !ok {
			return "", false
		}
		return v.Value, true
	}
	num := func(a string) (int64, bool) {
		v, ok := it[a].(*types.AttributeValueMemberN)
		if !ok {
			return 0, false
		}
		n, err := strconv.ParseInt(v.Value, 10, 64)
		return n, err == nil
	}
	m.Key = key
	var ok1, ok2, ok3, ok4, ok5 bool
	m.Shard, ok1 = str(attrShard)
	m.Sequence, ok2 = str(attrSeq)
	sub, ok3 := num(attrSub)
	m.SubSequence = int(sub)
	m.Tenure.Owner, ok4 = str(attrOwner)
	m.Tenure.Counter, ok5 = num(attrCounter)
	return m, ok1 && ok2 && ok3 && ok4 && ok5
}

// below reports whether mark a is below record b in its key's order.
func below(a, b Mark) bool {
	return position(a.Sequence, a.SubSequence) < position(b.Sequence, b.SubSequence)
}
