package dynamosink

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/gostream/kinesub/lease"
)

// Mark is where a record stands in its key's order within its shard: the mark of a key in a
// shard is the last record of the key applied from that shard. Apply writes a record's mark
// with its effects; ApplyMark takes one built by the caller (MarkOf builds it from a Message).
type Mark struct {
	// Key is the order key (without the sink's WithKeyPrefix). It may be empty: a WithOrderKey
	// returning "" orders all the records of a shard.
	Key string
	// Stream identifies the stream the record was read from (WithStream); may be empty. Marks of
	// different streams are kept apart.
	Stream string
	// Shard is the shard the record was read from. Not empty: letters, digits, '_', '.', '-',
	// at most 128 characters, as Kinesis names shards.
	Shard string
	// Sequence is the record's sequence number: decimal digits, no leading zero, at most
	// 128 of them, as Kinesis gives them.
	Sequence string
	// SubSequence is the record's position in its KPL aggregate (0 when not aggregated).
	SubSequence int
	// Tenure is the shard holding the record was read under (kinesub.Message.Tenure). Not
	// empty.
	Tenure lease.Tenure
	// Leases identifies the lease table Tenure is a holding of (WithLeaseTable). Tenures are
	// compared only between marks of the same non-empty Leases.
	Leases string
	// Epoch is the replay epoch the record is applied in (WithEpoch): a record of a higher
	// epoch than its key's mark is applied even if its position is not above the mark's.
	// 0 to MaxEpoch.
	Epoch int64
}

// Attribute names of a mark item.
const (
	attrKey     = "key"     // S, the table's partition key: prefix, stream, shard and order key
	attrPos     = "pos"     // S, the epoch and position of the last record applied, comparable as a string
	attrShard   = "shard"   // S
	attrSeq     = "seq"     // S
	attrSub     = "sub"     // N
	attrOwner   = "owner"   // S
	attrCounter = "counter" // N
	attrLeases  = "leases"  // S, absent when empty
	attrEpoch   = "epoch"   // N
	attrWrites  = "writes"  // S, what the last record applied wrote (fingerprint)
	attrSkipped = "skipped" // SS, positions of records recorded as not applied (Skip)

	// TTLAttribute is the attribute a mark item's expiry is written in with WithMarkTTL
	// (a number: seconds since the Unix epoch), for DynamoDB's time to live.
	TTLAttribute = "expires"
)

// Limits of a Mark's fields.
const (
	maxSequence = 128 // the longest sequence number Kinesis gives
	// MaxEpoch is the highest replay epoch.
	MaxEpoch = 1<<62 - 1
	// maxTableKey is DynamoDB's limit on a partition key, in bytes.
	maxTableKey = 2048
)

var shardID = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,128}$`)

// check returns why m cannot be written, or nil.
func (m Mark) check() error {
	switch {
	case !shardID.MatchString(m.Shard):
		return fmt.Errorf("%w: shard id %q: want 1 to 128 of a-z, A-Z, 0-9, '_', '.', '-'", ErrInvalidRecord, m.Shard)
	case strings.Contains(m.Stream, "|"):
		return fmt.Errorf("%w: stream %q: must not contain '|'", ErrInvalidRecord, m.Stream)
	case m.SubSequence < 0 || m.SubSequence > 1<<31-1:
		return fmt.Errorf("%w: sub-sequence %d out of range 0 to %d", ErrInvalidRecord, m.SubSequence, 1<<31-1)
	case m.Epoch < 0 || m.Epoch > MaxEpoch:
		return fmt.Errorf("%w: epoch %d out of range 0 to %d", ErrInvalidRecord, m.Epoch, int64(MaxEpoch))
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

// tableKey is the mark table's key of m's mark under prefix: the marks of a key are kept per
// stream and shard, because sequence numbers order the records of one shard only. Neither the
// stream nor the shard contains '|', so the key names one (stream, shard, key) only.
func (m Mark) tableKey(prefix string) (string, error) {
	k := prefix + m.Stream + "|" + m.Shard + "|" + m.Key
	if len(k) > maxTableKey {
		return "", fmt.Errorf("%w: mark key of %d bytes (prefix, stream, shard and order key): DynamoDB takes at most %d",
			ErrInvalidRecord, len(k), maxTableKey)
	}
	return k, nil
}

// pos is m's place in its key's order, comparable as a string as DynamoDB compares them: by
// epoch, then by sequence number as a number (its length first, then its digits), then by
// sub-sequence.
func (m Mark) pos() string {
	return fmt.Sprintf("%019d|%03d%s.%010d", m.Epoch, len(m.Sequence), m.Sequence, m.SubSequence)
}

// stored is a mark item as read back.
type stored struct {
	Mark
	applied bool            // a record was applied under the key (pos is set)
	pos     string          // the applied record's pos
	writes  string          // what it wrote (fingerprint)
	skipped map[string]bool // positions recorded as not applied
}

// storedOf reads a mark item; ok is false when it is not one.
func storedOf(key string, it map[string]types.AttributeValue) (st stored, ok bool) {
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
	st.Key = key
	st.skipped = map[string]bool{}
	if ss, present := it[attrSkipped]; present {
		set, isSet := ss.(*types.AttributeValueMemberSS)
		if !isSet {
			return stored{}, false
		}
		for _, p := range set.Value {
			st.skipped[p] = true
		}
	}
	if _, present := it[attrPos]; !present {
		return st, true // only records recorded as not applied
	}
	var ok1, ok2, ok3, ok4, ok5, ok6, ok7 bool
	st.pos, ok1 = str(attrPos)
	st.Shard, ok2 = str(attrShard)
	st.Sequence, ok3 = str(attrSeq)
	sub, ok4 := num(attrSub)
	st.SubSequence = int(sub)
	st.Tenure.Owner, ok5 = str(attrOwner)
	st.Tenure.Counter, ok6 = num(attrCounter)
	st.Epoch, ok7 = num(attrEpoch)
	st.Leases, _ = str(attrLeases)
	st.writes, _ = str(attrWrites)
	st.applied = true
	return st, ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7
}

// fingerprint names what items write: each one's kind, table and, but for a Put (whose key
// attributes the table's schema names), key. Two Applies of one record with items that write
// other items give other fingerprints; a replay gives the same one when the record's items
// name the same tables and keys.
func fingerprint(items []types.TransactWriteItem) string {
	parts := make([]string, 0, len(items))
	for _, it := range items {
		switch {
		case it.Put != nil:
			parts = append(parts, "put "+aws.ToString(it.Put.TableName))
		case it.Update != nil:
			parts = append(parts, "update "+aws.ToString(it.Update.TableName)+" "+keyText(it.Update.Key))
		case it.Delete != nil:
			parts = append(parts, "delete "+aws.ToString(it.Delete.TableName)+" "+keyText(it.Delete.Key))
		case it.ConditionCheck != nil:
			parts = append(parts, "check "+aws.ToString(it.ConditionCheck.TableName)+" "+keyText(it.ConditionCheck.Key))
		default:
			parts = append(parts, "none")
		}
	}
	slices.Sort(parts)
	h := sha256.Sum256([]byte(strings.Join(parts, "\n")))
	return hex.EncodeToString(h[:12])
}

// keyText writes a key's attributes (strings, numbers and binaries) in one order.
func keyText(key map[string]types.AttributeValue) string {
	names := make([]string, 0, len(key))
	for n := range key {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		b.WriteString(strconv.Quote(n))
		switch v := key[n].(type) {
		case *types.AttributeValueMemberS:
			b.WriteString("S" + strconv.Quote(v.Value))
		case *types.AttributeValueMemberN:
			b.WriteString("N" + v.Value)
		case *types.AttributeValueMemberB:
			b.WriteString("B" + base64.StdEncoding.EncodeToString(v.Value))
		default:
			fmt.Fprintf(&b, "%T", v)
		}
	}
	return b.String()
}
