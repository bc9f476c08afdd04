package kpl

import (
	"crypto/md5"
	"math/big"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"
)

// TestSubRecordInRange: a user record's hash key is its explicit hash key, or else the MD5
// digest of its partition key read as a 128-bit big-endian number; a shard's range holds both
// its ends.
func TestSubRecordInRange(t *testing.T) {
	md5Of := func(k string) *big.Int {
		sum := md5.Sum([]byte(k))
		return new(big.Int).SetBytes(sum[:])
	}
	rangeOf := func(start, end *big.Int) KeyRange {
		r, ok := ParseKeyRange(&types.HashKeyRange{StartingHashKey: aws.String(start.String()), EndingHashKey: aws.String(end.String())})
		require.True(t, ok)
		return r
	}
	one := big.NewInt(1)
	max := new(big.Int).Sub(new(big.Int).Lsh(one, 128), one)
	mid := new(big.Int).Lsh(one, 127)
	kA := md5Of("a") // 0x0cc175b9…: the lower half
	for _, tc := range []struct {
		name       string
		rec        Record
		start, end *big.Int
		want       bool
	}{
		{"partition key inside", Record{PartitionKey: "a"}, big.NewInt(0), new(big.Int).Sub(mid, one), true},
		{"partition key outside", Record{PartitionKey: "a"}, mid, max, false},
		{"partition key at the start", Record{PartitionKey: "a"}, kA, max, true},
		{"partition key at the end", Record{PartitionKey: "a"}, big.NewInt(0), kA, true},
		{"partition key just past the end", Record{PartitionKey: "a"}, big.NewInt(0), new(big.Int).Sub(kA, one), false},
		{"partition key just before the start", Record{PartitionKey: "a"}, new(big.Int).Add(kA, one), max, false},
		{"explicit hash key over the partition key", Record{PartitionKey: "a", ExplicitHashKey: mid.String()}, mid, max, true},
		{"explicit hash key outside", Record{PartitionKey: "a", ExplicitHashKey: new(big.Int).Sub(mid, one).String()}, mid, max, false},
		{"explicit hash key at the end", Record{PartitionKey: "z", ExplicitHashKey: max.String()}, mid, max, true},
		{"explicit hash key 0 at the start", Record{PartitionKey: "z", ExplicitHashKey: "0"}, big.NewInt(0), one, true},
		{"explicit hash key past a one-key range", Record{PartitionKey: "z", ExplicitHashKey: "6"}, big.NewInt(5), big.NewInt(5), false},
	} {
		r := rangeOf(tc.start, tc.end)
		require.Equal(t, tc.want, r.Holds(tc.rec.HashKey()), tc.name)
	}
	require.True(t, rangeOf(big.NewInt(0), max).Whole())
	require.False(t, rangeOf(big.NewInt(0), new(big.Int).Sub(max, one)).Whole())
	require.False(t, rangeOf(one, max).Whole())
	for _, bad := range []*types.HashKeyRange{
		nil,
		{StartingHashKey: aws.String("0")},
		{StartingHashKey: aws.String("5"), EndingHashKey: aws.String("4")},
		{StartingHashKey: aws.String("0"), EndingHashKey: aws.String(new(big.Int).Lsh(one, 128).String())},
	} {
		_, ok := ParseKeyRange(bad)
		require.False(t, ok, "%+v", bad)
	}
}
