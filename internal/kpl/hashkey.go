package kpl

import (
	"cmp"
	"crypto/md5"
	"encoding/binary"
	"math/big"
	"math/bits"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// HashKey is a point of the stream's 128-bit hash-key space. The service puts a record in the
// open shard whose range holds its explicit hash key, or else the MD5 digest of its partition
// key read as a big-endian number.
type HashKey struct{ hi, lo uint64 }

func (a HashKey) Cmp(b HashKey) int {
	if c := cmp.Compare(a.hi, b.hi); c != 0 {
		return c
	}
	return cmp.Compare(a.lo, b.lo)
}

// PartitionHash is the hash key the service derives from a partition key.
func PartitionHash(key string) HashKey {
	sum := md5.Sum([]byte(key))
	return HashKey{binary.BigEndian.Uint64(sum[:8]), binary.BigEndian.Uint64(sum[8:])}
}

// ParseHashKey reads an explicit hash key as the service takes it: the pattern
// 0|([1-9]\d{0,38}), at most 2^128-1.
func ParseHashKey(s string) (HashKey, bool) {
	if s == "" || len(s) > 39 || len(s) > 1 && s[0] == '0' {
		return HashKey{}, false
	}
	var h HashKey
	for i := 0; i < len(s); i++ {
		d := s[i] - '0'
		if d > 9 {
			return HashKey{}, false
		}
		// h = h*10 + d, refusing what overflows 128 bits.
		over, hi := bits.Mul64(h.hi, 10)
		carryHi, lo := bits.Mul64(h.lo, 10)
		hi, c1 := bits.Add64(hi, carryHi, 0)
		lo, c2 := bits.Add64(lo, uint64(d), 0)
		hi, c3 := bits.Add64(hi, 0, c2)
		if over != 0 || c1 != 0 || c3 != 0 {
			return HashKey{}, false
		}
		h = HashKey{hi, lo}
	}
	return h, true
}

// String formats h in decimal, as the service writes hash keys.
func (h HashKey) String() string {
	v := new(big.Int).SetUint64(h.hi)
	v.Lsh(v, 64)
	return v.Or(v, new(big.Int).SetUint64(h.lo)).String()
}

// KeyRange is a shard's hash-key range as ListShards gives it, both ends included.
type KeyRange struct{ Start, End HashKey }

// ParseKeyRange reads a shard's HashKeyRange; false when it is missing or not in the service's
// form.
func ParseKeyRange(r *types.HashKeyRange) (KeyRange, bool) {
	if r == nil {
		return KeyRange{}, false
	}
	start, ok1 := ParseHashKey(aws.ToString(r.StartingHashKey))
	end, ok2 := ParseHashKey(aws.ToString(r.EndingHashKey))
	if !ok1 || !ok2 || start.Cmp(end) > 0 {
		return KeyRange{}, false
	}
	return KeyRange{start, end}, true
}

func (r KeyRange) Holds(h HashKey) bool { return r.Start.Cmp(h) <= 0 && h.Cmp(r.End) <= 0 }

// whole reports whether r is the whole hash-key space, which holds every key.
func (r KeyRange) Whole() bool {
	return r.Start == HashKey{} && r.End == HashKey{^uint64(0), ^uint64(0)}
}
