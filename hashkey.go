package kinesub

import (
	"cmp"
	"crypto/md5"
	"encoding/binary"
	"math/big"
	"math/bits"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// hashKey is a point of the stream's 128-bit hash-key space. The service puts a record in the
// open shard whose range holds its explicit hash key, or else the MD5 digest of its partition
// key read as a big-endian number.
type hashKey struct{ hi, lo uint64 }

func (a hashKey) cmp(b hashKey) int {
	if c := cmp.Compare(a.hi, b.hi); c != 0 {
		return c
	}
	return cmp.Compare(a.lo, b.lo)
}

// partitionHash is the hash key the service derives from a partition key.
func partitionHash(key string) hashKey {
	sum := md5.Sum([]byte(key))
	return hashKey{binary.BigEndian.Uint64(sum[:8]), binary.BigEndian.Uint64(sum[8:])}
}

// parseHashKey reads an explicit hash key as the service takes it: the pattern
// 0|([1-9]\d{0,38}), at most 2^128-1.
func parseHashKey(s string) (hashKey, bool) {
	if s == "" || len(s) > 39 || len(s) > 1 && s[0] == '0' {
		return hashKey{}, false
	}
	var h hashKey
	for i := 0; i < len(s); i++ {
		d := s[i] - '0'
		if d > 9 {
			return hashKey{}, false
		}
		// h = h*10 + d, refusing what overflows 128 bits.
		over, hi := bits.Mul64(h.hi, 10)
		carryHi, lo := bits.Mul64(h.lo, 10)
		hi, c1 := bits.Add64(hi, carryHi, 0)
		lo, c2 := bits.Add64(lo, uint64(d), 0)
		hi, c3 := bits.Add64(hi, 0, c2)
		if over != 0 || c1 != 0 || c3 != 0 {
			return hashKey{}, false
		}
		h = hashKey{hi, lo}
	}
	return h, true
}

// String formats h in decimal, as the service writes hash keys.
func (h hashKey) String() string {
	v := new(big.Int).SetUint64(h.hi)
	v.Lsh(v, 64)
	return v.Or(v, new(big.Int).SetUint64(h.lo)).String()
}

// keyRange is a shard's hash-key range as ListShards gives it, both ends included.
type keyRange struct{ start, end hashKey }

// parseKeyRange reads a shard's HashKeyRange; false when it is missing or not in the service's
// form.
func parseKeyRange(r *types.HashKeyRange) (keyRange, bool) {
	if r == nil {
		return keyRange{}, false
	}
	start, ok1 := parseHashKey(aws.ToString(r.StartingHashKey))
	end, ok2 := parseHashKey(aws.ToString(r.EndingHashKey))
	if !ok1 || !ok2 || start.cmp(end) > 0 {
		return keyRange{}, false
	}
	return keyRange{start, end}, true
}

func (r keyRange) holds(h hashKey) bool { return r.start.cmp(h) <= 0 && h.cmp(r.end) <= 0 }

// whole reports whether r is the whole hash-key space, which holds every key.
func (r keyRange) whole() bool {
	return r.start == hashKey{} && r.end == hashKey{^uint64(0), ^uint64(0)}
}
