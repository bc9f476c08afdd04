package conformance

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gostream/kinesub/internal/testenv"
)

func testCreateDescribe(t *testing.T, c *kinesis.Client) {
	name := newStream(t, c, 3)
	sum, err := c.DescribeStreamSummary(ctx(t), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
	if err != nil {
		t.Fatalf("DescribeStreamSummary: %v", err)
	}
	d := sum.StreamDescriptionSummary
	if aws.ToString(d.StreamName) != name || d.StreamStatus != types.StreamStatusActive || aws.ToInt32(d.OpenShardCount) != 3 || aws.ToString(d.StreamARN) == "" {
		t.Fatalf("summary = %s %s open %d arn %q, want %s ACTIVE open 3 with an ARN", aws.ToString(d.StreamName), d.StreamStatus, aws.ToInt32(d.OpenShardCount), aws.ToString(d.StreamARN), name)
	}
	shards := listShards(t, c, name)
	if len(shards) != 3 {
		t.Fatalf("ListShards: %d shards, want 3", len(shards))
	}
	// The hash ranges cover the key space without gaps, in shard order.
	next := big.NewInt(0)
	for i, sh := range shards {
		if want := fmt.Sprintf("shardId-%012d", i); aws.ToString(sh.ShardId) != want {
			t.Errorf("shard %d id %s, want %s", i, aws.ToString(sh.ShardId), want)
		}
		if bigInt(t, sh.HashKeyRange.StartingHashKey).Cmp(next) != 0 {
			t.Fatalf("shard %d starts at %s, want %s", i, aws.ToString(sh.HashKeyRange.StartingHashKey), next)
		}
		next = new(big.Int).Add(bigInt(t, sh.HashKeyRange.EndingHashKey), big.NewInt(1))
		if sh.SequenceNumberRange.StartingSequenceNumber == nil || sh.SequenceNumberRange.EndingSequenceNumber != nil {
			t.Errorf("shard %d sequence range %+v, want a start and no end", i, *sh.SequenceNumberRange)
		}
	}
	if want := new(big.Int).Lsh(big.NewInt(1), 128); next.Cmp(want) != 0 {
		t.Fatalf("the last shard ends at %s, want 2^128-1", new(big.Int).Sub(next, big.NewInt(1)))
	}
	desc, err := c.DescribeStream(ctx(t), &kinesis.DescribeStreamInput{StreamName: aws.String(name)})
	if err != nil {
		t.Fatalf("DescribeStream: %v", err)
	}
	if n := len(desc.StreamDescription.Shards); n != 3 || aws.ToBool(desc.StreamDescription.HasMoreShards) {
		t.Fatalf("DescribeStream: %d shards, more %v; want 3, false", n, aws.ToBool(desc.StreamDescription.HasMoreShards))
	}
}

func testCreateExisting(t *testing.T, c *kinesis.Client) {
	name := newStream(t, c, 1)
	_, err := c.CreateStream(ctx(t), &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(1)})
	var inUse *types.ResourceInUseException
	if !errors.As(err, &inUse) {
		t.Fatalf("CreateStream of an existing stream: %v, want ResourceInUseException", err)
	}
}

func testMissingStream(t *testing.T, c *kinesis.Client) {
	var nf *types.ResourceNotFoundException
	_, err := c.DescribeStreamSummary(ctx(t), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("missing-" + testenv.Name(t))})
	if !errors.As(err, &nf) {
		t.Fatalf("DescribeStreamSummary: %v, want ResourceNotFoundException", err)
	}
	_, err = c.PutRecord(ctx(t), &kinesis.PutRecordInput{StreamName: aws.String("missing-" + testenv.Name(t)), Data: []byte("x"), PartitionKey: aws.String("k")})
	if !errors.As(err, &nf) {
		t.Fatalf("PutRecord: %v, want ResourceNotFoundException", err)
	}
	name := newStream(t, c, 1)
	_, err = c.GetShardIterator(ctx(t), &kinesis.GetShardIteratorInput{StreamName: aws.String(name), ShardId: aws.String("shardId-000000000009"), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
	if !errors.As(err, &nf) {
		t.Fatalf("GetShardIterator of a missing shard: %v, want ResourceNotFoundException", err)
	}
}

func testPutGetOrder(t *testing.T, c *kinesis.Client) {
	name := newStream(t, c, 1)
	var keys []string
	for i := range 20 {
		keys = append(keys, fmt.Sprint(i))
	}
	res := putRecords(t, c, name, keys[:10]...)
	res = append(res, putRecords(t, c, name, keys[10:]...)...)
	for i := 1; i < len(res); i++ {
		if bigInt(t, res[i].SequenceNumber).Cmp(bigInt(t, res[i-1].SequenceNumber)) <= 0 {
			t.Fatalf("sequence numbers not increasing: %s then %s", aws.ToString(res[i-1].SequenceNumber), aws.ToString(res[i].SequenceNumber))
		}
		if aws.ToString(res[i].ShardId) != "shardId-000000000000" {
			t.Fatalf("record %d went to %s", i, aws.ToString(res[i].ShardId))
		}
	}
	recs, last := readAll(t, c, iter(t, c, name, "shardId-000000000000", types.ShardIteratorTypeTrimHorizon, nil, nil))
	var want []string
	for _, k := range keys {
		want = append(want, "data-"+k)
	}
	if got := datas(recs); !slices.Equal(got, want) {
		t.Fatalf("read %v, want %v", got, want)
	}
	for i, r := range recs {
		if aws.ToString(r.SequenceNumber) != aws.ToString(res[i].SequenceNumber) || aws.ToString(r.PartitionKey) != keys[i] || r.ApproximateArrivalTimestamp == nil {
			t.Fatalf("record %d: seq %s key %s, want %s %s with an arrival time", i, aws.ToString(r.SequenceNumber), aws.ToString(r.PartitionKey), aws.ToString(res[i].SequenceNumber), keys[i])
		}
	}
	if last.NextShardIterator == nil {
		t.Fatal("an open shard's GetRecords returned no NextShardIterator")
	}
}

// testSequencePerShard: sequence numbers are numbered per shard. Records put to two shards in
// turn get numbers that grow within each shard and do not interleave: a shard's numbers say
// nothing of when records arrived in another. A split's children number above every number
// of their parent's, its EndingSequenceNumber included.
func testSequencePerShard(t *testing.T, c *kinesis.Client) {
	name := newStream(t, c, 2)
	shards := listShards(t, c, name)
	put := func(sh types.Shard, data string) *big.Int {
		t.Helper()
		out, err := c.PutRecord(ctx(t), &kinesis.PutRecordInput{StreamName: aws.String(name), Data: []byte(data),
			PartitionKey: aws.String("k"), ExplicitHashKey: sh.HashKeyRange.StartingHashKey})
		if err != nil {
			t.Fatalf("PutRecord: %v", err)
		}
		if aws.ToString(out.ShardId) != aws.ToString(sh.ShardId) {
			t.Fatalf("a record for %s went to %s", aws.ToString(sh.ShardId), aws.ToString(out.ShardId))
		}
		return bigInt(t, out.SequenceNumber)
	}
	var nums [2][]*big.Int
	for i, to := range []int{0, 0, 1, 1, 0, 1, 0} {
		nums[to] = append(nums[to], put(shards[to], fmt.Sprint(i)))
	}
	for i, ns := range nums {
		for j := 1; j < len(ns); j++ {
			if ns[j].Cmp(ns[j-1]) <= 0 {
				t.Fatalf("shard %d: sequence numbers not increasing: %s then %s", i, ns[j-1], ns[j])
			}
		}
	}
	lo, hi := nums[0], nums[1]
	if lo[0].Cmp(hi[0]) > 0 {
		lo, hi = hi, lo
	}
	if lo[len(lo)-1].Cmp(hi[0]) >= 0 {
		t.Fatalf("the shards' numbers interleave by arrival: %v and %v", nums[0], nums[1])
	}

	mid := new(big.Int).Rsh(bigInt(t, shards[0].HashKeyRange.EndingHashKey), 1)
	if _, err := c.SplitShard(ctx(t), &kinesis.SplitShardInput{StreamName: aws.String(name), ShardToSplit: shards[0].ShardId,
		NewStartingHashKey: aws.String(mid.String())}); err != nil {
		t.Fatalf("SplitShard: %v", err)
	}
	testenv.WaitActive(t, c, name)
	after := listShards(t, c, name)
	if len(after) != 4 {
		t.Fatalf("after a split: %d shards, want 4", len(after))
	}
	parentEnd := bigInt(t, after[0].SequenceNumberRange.EndingSequenceNumber)
	if parentEnd.Cmp(nums[0][len(nums[0])-1]) < 0 {
		t.Fatalf("the parent's EndingSequenceNumber %s is below its last record's %s", parentEnd, nums[0][len(nums[0])-1])
	}
	for _, child := range after[2:] {
		start := bigInt(t, child.SequenceNumberRange.StartingSequenceNumber)
		first := put(child, "child")
		if start.Cmp(parentEnd) <= 0 || first.Cmp(parentEnd) <= 0 {
			t.Fatalf("child %s starts at %s, its first record %s: want both above the parent's end %s",
				aws.ToString(child.ShardId), start, first, parentEnd)
		}
	}
}

func testPutRecordRouting(t *testing.T, c *kinesis.Client) {
	name := newStream(t, c, 2)
	shards := listShards(t, c, name)
	// An explicit hash key picks the shard whose range holds it.
	for _, sh := range shards {
		out, err := c.PutRecord(ctx(t), &kinesis.PutRecordInput{StreamName: aws.String(name), Data: []byte("x"),
			PartitionKey: aws.String("k"), ExplicitHashKey: sh.HashKeyRange.EndingHashKey})
		if err != nil {
			t.Fatalf("PutRecord: %v", err)
		}
		if aws.ToString(out.ShardId) != aws.ToString(sh.ShardId) {
			t.Fatalf("hash key %s went to %s, want %s", aws.ToString(sh.HashKeyRange.EndingHashKey), aws.ToString(out.ShardId), aws.ToString(sh.ShardId))
		}
	}
	// A partition key's MD5 picks the shard: "a" hashes to 0x0cc175b9..., in the first half.
	out, err := c.PutRecord(ctx(t), &kinesis.PutRecordInput{StreamName: aws.String(name), Data: []byte("x"), PartitionKey: aws.String("a")})
	if err != nil {
		t.Fatalf("PutRecord: %v", err)
	}
	if aws.ToString(out.ShardId) != "shardId-000000000000" {
		t.Fatalf("key a went to %s, want shardId-000000000000", aws.ToString(out.ShardId))
	}
}

func testIteratorTypes(t *testing.T, c *kinesis.Client) {
	name := newStream(t, c, 1)
	const sh = "shardId-000000000000"
	res := putRecords(t, c, name, "a", "b", "c")
	first, _ := readAll(t, c, iter(t, c, name, sh, types.ShardIteratorTypeTrimHorizon, nil, nil))
	if len(first) != 3 {
		t.Fatalf("TRIM_HORIZON read %d records, want 3", len(first))
	}
	for _, tc := range []struct {
		typ  types.ShardIteratorType
		seq  *string
		ts   *time.Time
		want []string
	}{
		{types.ShardIteratorTypeTrimHorizon, nil, nil, []string{"data-a", "data-b", "data-c"}},
		{types.ShardIteratorTypeAtSequenceNumber, res[1].SequenceNumber, nil, []string{"data-b", "data-c"}},
		{types.ShardIteratorTypeAfterSequenceNumber, res[1].SequenceNumber, nil, []string{"data-c"}},
		{types.ShardIteratorTypeAtTimestamp, nil, first[0].ApproximateArrivalTimestamp, []string{"data-a", "data-b", "data-c"}},
		{types.ShardIteratorTypeLatest, nil, nil, nil},
	} {
		recs, _ := readAll(t, c, iter(t, c, name, sh, tc.typ, tc.seq, tc.ts))
		if got := datas(recs); !slices.Equal(got, tc.want) && len(got)+len(tc.want) > 0 {
			t.Errorf("%s read %v, want %v", tc.typ, got, tc.want)
		}
	}
	// LATEST reads what arrives after the iterator was handed out.
	it := iter(t, c, name, sh, types.ShardIteratorTypeLatest, nil, nil)
	putRecords(t, c, name, "d")
	recs, _ := readAll(t, c, it)
	if got := datas(recs); !slices.Equal(got, []string{"data-d"}) {
		t.Fatalf("LATEST then a put read %v, want [data-d]", got)
	}
}

func testGetRecordsLimit(t *testing.T, c *kinesis.Client) {
	name := newStream(t, c, 1)
	putRecords(t, c, name, "a", "b", "c")
	it := iter(t, c, name, "shardId-000000000000", types.ShardIteratorTypeTrimHorizon, nil, nil)
	var got []string
	for range 2 {
		out, err := c.GetRecords(ctx(t), &kinesis.GetRecordsInput{ShardIterator: it, Limit: aws.Int32(2)})
		if err != nil {
			t.Fatalf("GetRecords: %v", err)
		}
		if len(out.Records) > 2 {
			t.Fatalf("Limit 2 returned %d records", len(out.Records))
		}
		got = append(got, datas(out.Records)...)
		it = out.NextShardIterator
	}
	if !slices.Equal(got, []string{"data-a", "data-b", "data-c"}) {
		t.Fatalf("read %v in pages of 2, want [data-a data-b data-c]", got)
	}
}

func testInvalidIterator(t *testing.T, c *kinesis.Client) {
	name := newStream(t, c, 1)
	_, err := c.GetShardIterator(ctx(t), &kinesis.GetShardIteratorInput{StreamName: aws.String(name), ShardId: aws.String("shardId-000000000000"),
		ShardIteratorType: types.ShardIteratorTypeAtSequenceNumber})
	var inv *types.InvalidArgumentException
	if !errors.As(err, &inv) {
		t.Fatalf("AT_SEQUENCE_NUMBER without a number: %v, want InvalidArgumentException", err)
	}
}

// A sequence number is refused by another shard, and by a new stream of the same name.
func testForeignSequenceNumber(t *testing.T, c *kinesis.Client) {
	name := newStream(t, c, 2)
	shards := listShards(t, c, name)
	out, err := c.PutRecord(ctx(t), &kinesis.PutRecordInput{StreamName: aws.String(name), Data: []byte("x"), PartitionKey: aws.String("k"),
		ExplicitHashKey: shards[1].HashKeyRange.StartingHashKey})
	if err != nil {
		t.Fatalf("PutRecord: %v", err)
	}
	var inv *types.InvalidArgumentException
	_, err = c.GetShardIterator(ctx(t), &kinesis.GetShardIteratorInput{StreamName: aws.String(name), ShardId: shards[0].ShardId,
		ShardIteratorType: types.ShardIteratorTypeAfterSequenceNumber, StartingSequenceNumber: out.SequenceNumber})
	if !errors.As(err, &inv) {
		t.Fatalf("a sequence number of shard 1 on shard 0: %v, want InvalidArgumentException", err)
	}
	sum, err := c.DescribeStreamSummary(ctx(t), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
	if err != nil {
		t.Fatalf("DescribeStreamSummary: %v", err)
	}
	created := aws.ToTime(sum.StreamDescriptionSummary.StreamCreationTimestamp)
	if _, err := c.DeleteStream(ctx(t), &kinesis.DeleteStreamInput{StreamName: aws.String(name)}); err != nil {
		t.Fatalf("DeleteStream: %v", err)
	}
	// kinesalite tells streams apart by their shards' creation time to the second, dated 2 s
	// back: only a stream created in a later second is a different stream to it.
	for time.Now().Unix() <= created.Unix()+3 {
		time.Sleep(50 * time.Millisecond)
	}
	w := kinesis.NewStreamNotExistsWaiter(c, func(o *kinesis.StreamNotExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 20*time.Millisecond, 200*time.Millisecond
	})
	if err := w.Wait(ctx(t), &kinesis.DescribeStreamInput{StreamName: aws.String(name)}, 30*time.Second); err != nil {
		t.Fatalf("stream still exists after DeleteStream: %v", err)
	}
	testenv.CreateStream(t, c, name, 2)
	_, err = c.GetShardIterator(ctx(t), &kinesis.GetShardIteratorInput{StreamName: aws.String(name), ShardId: shards[1].ShardId,
		ShardIteratorType: types.ShardIteratorTypeAfterSequenceNumber, StartingSequenceNumber: out.SequenceNumber})
	if !errors.As(err, &inv) {
		t.Fatalf("a deleted stream's sequence number on its successor: %v, want InvalidArgumentException", err)
	}
}

func testPutRecordsTooMany(t *testing.T, c *kinesis.Client) {
	name := newStream(t, c, 1)
	entries := make([]types.PutRecordsRequestEntry, 501)
	for i := range entries {
		entries[i] = types.PutRecordsRequestEntry{Data: []byte("x"), PartitionKey: aws.String("k")}
	}
	_, err := c.PutRecords(ctx(t), &kinesis.PutRecordsInput{StreamName: aws.String(name), Records: entries})
	wantCode(t, err, "ValidationException")
}

// testPartitionKeyLength: a partition key is 1 to 256 UTF-16 code units, as the service and
// the Java KPL count them: 256 two-byte characters and 128 emoji (two units each, four bytes)
// are taken, 129 emoji and 257 characters are refused.
func testPartitionKeyLength(t *testing.T, c *kinesis.Client) {
	name := newStream(t, c, 1)
	for _, k := range []string{strings.Repeat("é", 256), strings.Repeat("😀", 128), strings.Repeat("k", 254) + "😀"} {
		if _, err := c.PutRecord(ctx(t), &kinesis.PutRecordInput{StreamName: aws.String(name), Data: []byte("x"), PartitionKey: aws.String(k)}); err != nil {
			t.Errorf("PutRecord with a key of %d bytes: %v", len(k), err)
		}
		putRecords(t, c, name, k)
	}
	for _, k := range []string{strings.Repeat("😀", 129), strings.Repeat("k", 257), strings.Repeat("k", 255) + "😀"} {
		_, err := c.PutRecord(ctx(t), &kinesis.PutRecordInput{StreamName: aws.String(name), Data: []byte("x"), PartitionKey: aws.String(k)})
		wantCode(t, err, "ValidationException")
		_, err = c.PutRecords(ctx(t), &kinesis.PutRecordsInput{StreamName: aws.String(name), Records: []types.PutRecordsRequestEntry{{Data: []byte("x"), PartitionKey: aws.String(k)}}})
		wantCode(t, err, "ValidationException")
	}
}

// testExplicitHashKeyRange: an explicit hash key from 0 to 2^128-1 is taken, one above is
// InvalidArgumentException.
func testExplicitHashKeyRange(t *testing.T, c *kinesis.Client) {
	name := newStream(t, c, 1)
	for _, ehk := range []string{"0", "340282366920938463463374607431768211455"} {
		if _, err := c.PutRecord(ctx(t), &kinesis.PutRecordInput{StreamName: aws.String(name), Data: []byte("x"), PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(ehk)}); err != nil {
			t.Errorf("explicit hash key %s: %v", ehk, err)
		}
	}
	_, err := c.PutRecord(ctx(t), &kinesis.PutRecordInput{StreamName: aws.String(name), Data: []byte("x"), PartitionKey: aws.String("k"), ExplicitHashKey: aws.String("340282366920938463463374607431768211456")})
	wantCode(t, err, "InvalidArgumentException")
}

func testSplitShard(t *testing.T, c *kinesis.Client) {
	name := newStream(t, c, 1)
	putRecords(t, c, name, "before")
	mid := new(big.Int).Lsh(big.NewInt(1), 127)
	if _, err := c.SplitShard(ctx(t), &kinesis.SplitShardInput{StreamName: aws.String(name), ShardToSplit: aws.String("shardId-000000000000"),
		NewStartingHashKey: aws.String(mid.String())}); err != nil {
		t.Fatalf("SplitShard: %v", err)
	}
	testenv.WaitActive(t, c, name)
	shards := listShards(t, c, name)
	if len(shards) != 3 {
		t.Fatalf("after a split: %d shards, want 3", len(shards))
	}
	if shards[0].SequenceNumberRange.EndingSequenceNumber == nil {
		t.Fatal("the split shard has no EndingSequenceNumber")
	}
	for i, sh := range shards[1:] {
		if aws.ToString(sh.ParentShardId) != "shardId-000000000000" || sh.AdjacentParentShardId != nil {
			t.Fatalf("child %d parents %s %s, want shardId-000000000000 alone", i, aws.ToString(sh.ParentShardId), aws.ToString(sh.AdjacentParentShardId))
		}
	}
	if got, want := aws.ToString(shards[2].HashKeyRange.StartingHashKey), mid.String(); got != want {
		t.Fatalf("upper child starts at %s, want %s", got, want)
	}
	if got, want := aws.ToString(shards[1].HashKeyRange.EndingHashKey), new(big.Int).Sub(mid, big.NewInt(1)).String(); got != want {
		t.Fatalf("lower child ends at %s, want %s", got, want)
	}
	_, err := c.SplitShard(ctx(t), &kinesis.SplitShardInput{StreamName: aws.String(name), ShardToSplit: aws.String("shardId-000000000001"),
		NewStartingHashKey: aws.String("0")})
	var inv *types.InvalidArgumentException
	if !errors.As(err, &inv) {
		t.Fatalf("SplitShard at the shard's own start: %v, want InvalidArgumentException", err)
	}
}

func testMergeShards(t *testing.T, c *kinesis.Client) {
	name := newStream(t, c, 2)
	if _, err := c.MergeShards(ctx(t), &kinesis.MergeShardsInput{StreamName: aws.String(name),
		ShardToMerge: aws.String("shardId-000000000000"), AdjacentShardToMerge: aws.String("shardId-000000000001")}); err != nil {
		t.Fatalf("MergeShards: %v", err)
	}
	testenv.WaitActive(t, c, name)
	shards := listShards(t, c, name)
	if len(shards) != 3 {
		t.Fatalf("after a merge: %d shards, want 3", len(shards))
	}
	child := shards[2]
	if aws.ToString(child.ParentShardId) != "shardId-000000000000" || aws.ToString(child.AdjacentParentShardId) != "shardId-000000000001" {
		t.Fatalf("merged child parents %s %s, want shardId-000000000000 shardId-000000000001", aws.ToString(child.ParentShardId), aws.ToString(child.AdjacentParentShardId))
	}
	if aws.ToString(child.HashKeyRange.StartingHashKey) != "0" || aws.ToString(child.HashKeyRange.EndingHashKey) != aws.ToString(shards[1].HashKeyRange.EndingHashKey) {
		t.Fatalf("merged child range %v, want the union of its parents'", *child.HashKeyRange)
	}
}

func testClosedShardEnds(t *testing.T, c *kinesis.Client) {
	name := newStream(t, c, 1)
	putRecords(t, c, name, "a", "b")
	if _, err := c.SplitShard(ctx(t), &kinesis.SplitShardInput{StreamName: aws.String(name), ShardToSplit: aws.String("shardId-000000000000"),
		NewStartingHashKey: aws.String(new(big.Int).Lsh(big.NewInt(1), 127).String())}); err != nil {
		t.Fatalf("SplitShard: %v", err)
	}
	testenv.WaitActive(t, c, name)
	it := iter(t, c, name, "shardId-000000000000", types.ShardIteratorTypeTrimHorizon, nil, nil)
	var got []string
	for i := 0; it != nil; i++ {
		if i == 100 {
			t.Fatal("a closed shard never returned a nil NextShardIterator")
		}
		out, err := c.GetRecords(ctx(t), &kinesis.GetRecordsInput{ShardIterator: it})
		if err != nil {
			t.Fatalf("GetRecords: %v", err)
		}
		got = append(got, datas(out.Records)...)
		it = out.NextShardIterator
	}
	if !slices.Equal(got, []string{"data-a", "data-b"}) {
		t.Fatalf("closed shard read %v, want [data-a data-b]", got)
	}
}

func testDeleteStream(t *testing.T, c *kinesis.Client) {
	name := newStream(t, c, 1)
	if _, err := c.DeleteStream(ctx(t), &kinesis.DeleteStreamInput{StreamName: aws.String(name)}); err != nil {
		t.Fatalf("DeleteStream: %v", err)
	}
	w := kinesis.NewStreamNotExistsWaiter(c, func(o *kinesis.StreamNotExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 20*time.Millisecond, 200*time.Millisecond
	})
	if err := w.Wait(ctx(t), &kinesis.DescribeStreamInput{StreamName: aws.String(name)}, 30*time.Second); err != nil {
		t.Fatalf("stream still exists after DeleteStream: %v", err)
	}
	_, err := c.DeleteStream(ctx(t), &kinesis.DeleteStreamInput{StreamName: aws.String(name)})
	var nf *types.ResourceNotFoundException
	if !errors.As(err, &nf) {
		t.Fatalf("DeleteStream of a deleted stream: %v, want ResourceNotFoundException", err)
	}
}
