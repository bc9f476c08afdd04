package conformance

import (
	"errors"
	"math/big"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/kinesistest"
)

func testChildShards(t *testing.T, b Backend) {
	c := b.Server(t).Client()
	name := newStream(t, c, 1)
	putRecords(t, c, name, "a", "b")
	mid := new(big.Int).Lsh(big.NewInt(1), 127).String()
	if _, err := c.SplitShard(ctx(t), &kinesis.SplitShardInput{StreamName: aws.String(name), ShardToSplit: aws.String("shardId-000000000000"), NewStartingHashKey: aws.String(mid)}); err != nil {
		t.Fatalf("SplitShard: %v", err)
	}
	// Before the end: records, a next iterator and no children.
	out, err := c.GetRecords(ctx(t), &kinesis.GetRecordsInput{ShardIterator: iter(t, c, name, "shardId-000000000000", types.ShardIteratorTypeTrimHorizon, nil, nil), Limit: aws.Int32(1)})
	if err != nil {
		t.Fatalf("GetRecords: %v", err)
	}
	if len(out.Records) != 1 || out.NextShardIterator == nil || len(out.ChildShards) != 0 {
		t.Fatalf("first page: %d records, next %v, %d children; want 1, an iterator, none", len(out.Records), out.NextShardIterator != nil, len(out.ChildShards))
	}
	out, err = c.GetRecords(ctx(t), &kinesis.GetRecordsInput{ShardIterator: out.NextShardIterator})
	if err != nil {
		t.Fatalf("GetRecords: %v", err)
	}
	if len(out.Records) != 1 || out.NextShardIterator != nil || len(out.ChildShards) != 2 {
		t.Fatalf("at the end: %d records, next %v, %d children; want 1, nil and 2", len(out.Records), out.NextShardIterator != nil, len(out.ChildShards))
	}
	for i, ch := range out.ChildShards {
		if want := []string{"shardId-000000000000"}; !slices.Equal(ch.ParentShards, want) {
			t.Fatalf("child %d parents %v, want %v", i, ch.ParentShards, want)
		}
	}
	if aws.ToString(out.ChildShards[0].ShardId) != "shardId-000000000001" || aws.ToString(out.ChildShards[1].HashKeyRange.StartingHashKey) != mid {
		t.Fatalf("children %s and one starting at %s, want shardId-000000000001 and %s", aws.ToString(out.ChildShards[0].ShardId), aws.ToString(out.ChildShards[1].HashKeyRange.StartingHashKey), mid)
	}
}

func testUpdateShardCount(t *testing.T, b Backend) {
	c := b.Server(t).Client()
	name := newStream(t, c, 2)
	up, err := c.UpdateShardCount(ctx(t), &kinesis.UpdateShardCountInput{StreamName: aws.String(name), TargetShardCount: aws.Int32(4), ScalingType: types.ScalingTypeUniformScaling})
	if err != nil {
		t.Fatalf("UpdateShardCount 2 to 4: %v", err)
	}
	if aws.ToInt32(up.CurrentShardCount) != 2 || aws.ToInt32(up.TargetShardCount) != 4 {
		t.Fatalf("UpdateShardCount answered %d to %d, want 2 to 4", aws.ToInt32(up.CurrentShardCount), aws.ToInt32(up.TargetShardCount))
	}
	shards := listShards(t, c, name)
	wantParents := []string{"shardId-000000000000", "shardId-000000000000", "shardId-000000000001", "shardId-000000000001"}
	if len(shards) != 6 {
		t.Fatalf("after 2 to 4: %d shards, want 6", len(shards))
	}
	for i, sh := range shards[2:] {
		if aws.ToString(sh.ParentShardId) != wantParents[i] || sh.AdjacentParentShardId != nil {
			t.Fatalf("new shard %d parents %s %s, want %s alone", i, aws.ToString(sh.ParentShardId), aws.ToString(sh.AdjacentParentShardId), wantParents[i])
		}
	}
	if _, err := c.UpdateShardCount(ctx(t), &kinesis.UpdateShardCountInput{StreamName: aws.String(name), TargetShardCount: aws.Int32(2), ScalingType: types.ScalingTypeUniformScaling}); err != nil {
		t.Fatalf("UpdateShardCount 4 to 2: %v", err)
	}
	shards = listShards(t, c, name)
	if len(shards) != 8 || aws.ToString(shards[6].ParentShardId) != "shardId-000000000002" || aws.ToString(shards[6].AdjacentParentShardId) != "shardId-000000000003" {
		t.Fatalf("after 4 to 2: %d shards, first new one's parents %s %s; want 8 and shards 2 and 3", len(shards), aws.ToString(shards[6].ParentShardId), aws.ToString(shards[6].AdjacentParentShardId))
	}
	_, err = c.UpdateShardCount(ctx(t), &kinesis.UpdateShardCountInput{StreamName: aws.String(name), TargetShardCount: aws.Int32(5), ScalingType: types.ScalingTypeUniformScaling})
	var le *types.LimitExceededException
	if !errors.As(err, &le) {
		t.Fatalf("UpdateShardCount to more than double: %v, want LimitExceededException", err)
	}
}

func testMillisBehindLatest(t *testing.T, b Backend) {
	clk := newClock()
	c := b.Server(t, kinesistest.WithClock(clk.Now)).Client()
	name := newStream(t, c, 1)
	putRecords(t, c, name, "a")
	clk.Advance(10 * time.Second)
	putRecords(t, c, name, "b")
	clk.Advance(5 * time.Second)
	out, err := c.GetRecords(ctx(t), &kinesis.GetRecordsInput{ShardIterator: iter(t, c, name, "shardId-000000000000", types.ShardIteratorTypeTrimHorizon, nil, nil), Limit: aws.Int32(1)})
	if err != nil {
		t.Fatalf("GetRecords: %v", err)
	}
	// The next unread record arrived 5 s ago.
	if got := aws.ToInt64(out.MillisBehindLatest); got != 5000 {
		t.Fatalf("MillisBehindLatest after the first record = %d, want 5000", got)
	}
	out, err = c.GetRecords(ctx(t), &kinesis.GetRecordsInput{ShardIterator: out.NextShardIterator})
	if err != nil {
		t.Fatalf("GetRecords: %v", err)
	}
	if got := aws.ToInt64(out.MillisBehindLatest); got != 0 || len(out.Records) != 1 {
		t.Fatalf("caught up: MillisBehindLatest %d with %d records, want 0 with 1", got, len(out.Records))
	}
	if !out.Records[0].ApproximateArrivalTimestamp.Equal(clk.Now().Add(-5 * time.Second)) {
		t.Fatalf("arrival %v, want the test clock's %v", out.Records[0].ApproximateArrivalTimestamp, clk.Now().Add(-5*time.Second))
	}
}

func testExpiredIterator(t *testing.T, b Backend) {
	clk := newClock()
	c := b.Server(t, kinesistest.WithClock(clk.Now), kinesistest.WithIteratorLifetime(time.Minute)).Client()
	name := newStream(t, c, 1)
	it := iter(t, c, name, "shardId-000000000000", types.ShardIteratorTypeTrimHorizon, nil, nil)
	clk.Advance(time.Minute)
	out, err := c.GetRecords(ctx(t), &kinesis.GetRecordsInput{ShardIterator: it})
	if err != nil {
		t.Fatalf("GetRecords at the lifetime's end: %v", err)
	}
	clk.Advance(time.Minute + time.Millisecond)
	_, err = c.GetRecords(ctx(t), &kinesis.GetRecordsInput{ShardIterator: out.NextShardIterator})
	var exp *types.ExpiredIteratorException
	if !errors.As(err, &exp) {
		t.Fatalf("GetRecords after the lifetime: %v, want ExpiredIteratorException", err)
	}
}

func testListShardsPages(t *testing.T, b Backend) {
	c := b.Server(t).Client()
	name := newStream(t, c, 5)
	var ids []string
	out, err := c.ListShards(ctx(t), &kinesis.ListShardsInput{StreamName: aws.String(name), MaxResults: aws.Int32(2)})
	for {
		if err != nil {
			t.Fatalf("ListShards: %v", err)
		}
		if len(out.Shards) > 2 {
			t.Fatalf("MaxResults 2 gave %d shards", len(out.Shards))
		}
		for _, sh := range out.Shards {
			ids = append(ids, aws.ToString(sh.ShardId))
		}
		if out.NextToken == nil {
			break
		}
		out, err = c.ListShards(ctx(t), &kinesis.ListShardsInput{NextToken: out.NextToken})
	}
	if len(ids) != 5 || ids[4] != "shardId-000000000004" {
		t.Fatalf("pages gave %v, want the 5 shards", ids)
	}
	out, err = c.ListShards(ctx(t), &kinesis.ListShardsInput{StreamName: aws.String(name), ExclusiveStartShardId: aws.String("shardId-000000000002")})
	if err != nil || len(out.Shards) != 2 || aws.ToString(out.Shards[0].ShardId) != "shardId-000000000003" {
		t.Fatalf("ExclusiveStartShardId 2: %v, %d shards; want 3 and 4", err, len(out.Shards))
	}
	_, err = c.ListShards(ctx(t), &kinesis.ListShardsInput{StreamName: aws.String(name), NextToken: aws.String("x")})
	var inv *types.InvalidArgumentException
	if !errors.As(err, &inv) {
		t.Fatalf("ListShards with a StreamName and a NextToken: %v, want InvalidArgumentException", err)
	}
}

func testListShardsFilter(t *testing.T, b Backend) {
	clk := newClock()
	c := b.Server(t, kinesistest.WithClock(clk.Now)).Client()
	name := newStream(t, c, 2)
	created := clk.Now()
	clk.Advance(time.Minute)
	if _, err := c.SplitShard(ctx(t), &kinesis.SplitShardInput{StreamName: aws.String(name), ShardToSplit: aws.String("shardId-000000000000"),
		NewStartingHashKey: aws.String("1000")}); err != nil {
		t.Fatalf("SplitShard: %v", err)
	}
	for _, tc := range []struct {
		filter types.ShardFilter
		want   []string
	}{
		{types.ShardFilter{Type: types.ShardFilterTypeAtLatest}, []string{"shardId-000000000001", "shardId-000000000002", "shardId-000000000003"}},
		{types.ShardFilter{Type: types.ShardFilterTypeAtTrimHorizon}, []string{"shardId-000000000000", "shardId-000000000001"}},
		{types.ShardFilter{Type: types.ShardFilterTypeFromTrimHorizon}, []string{"shardId-000000000000", "shardId-000000000001", "shardId-000000000002", "shardId-000000000003"}},
		{types.ShardFilter{Type: types.ShardFilterTypeAfterShardId, ShardId: aws.String("shardId-000000000001")}, []string{"shardId-000000000002", "shardId-000000000003"}},
		{types.ShardFilter{Type: types.ShardFilterTypeAtTimestamp, Timestamp: aws.Time(created.Add(time.Second))}, []string{"shardId-000000000000", "shardId-000000000001"}},
		{types.ShardFilter{Type: types.ShardFilterTypeFromTimestamp, Timestamp: aws.Time(clk.Now().Add(time.Second))}, []string{"shardId-000000000001", "shardId-000000000002", "shardId-000000000003"}},
	} {
		out, err := c.ListShards(ctx(t), &kinesis.ListShardsInput{StreamName: aws.String(name), ShardFilter: &tc.filter})
		if err != nil {
			t.Fatalf("ListShards %s: %v", tc.filter.Type, err)
		}
		var got []string
		for _, sh := range out.Shards {
			got = append(got, aws.ToString(sh.ShardId))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("ShardFilter %s: %v, want %v", tc.filter.Type, got, tc.want)
		}
	}
}

func testListStreamsPages(t *testing.T, b Backend) {
	c := b.Server(t).Client()
	for _, n := range []string{"a", "b", "c"} {
		if _, err := c.CreateStream(ctx(t), &kinesis.CreateStreamInput{StreamName: aws.String(n), ShardCount: aws.Int32(1)}); err != nil {
			t.Fatalf("CreateStream: %v", err)
		}
	}
	var names []string
	p := kinesis.NewListStreamsPaginator(c, &kinesis.ListStreamsInput{Limit: aws.Int32(2)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx(t))
		if err != nil {
			t.Fatalf("ListStreams: %v", err)
		}
		if len(page.StreamNames) > 2 || len(page.StreamSummaries) != len(page.StreamNames) {
			t.Fatalf("a page of %d names and %d summaries, want at most 2 of each", len(page.StreamNames), len(page.StreamSummaries))
		}
		names = append(names, page.StreamNames...)
	}
	if !slices.Equal(names, []string{"a", "b", "c"}) {
		t.Fatalf("listed %v, want [a b c]", names)
	}
}

func testThrottleReads(t *testing.T, b Backend) {
	clk := newClock()
	c := b.Server(t, kinesistest.WithClock(clk.Now), kinesistest.WithLimits(true)).Client()
	name := newStream(t, c, 1)
	it := iter(t, c, name, "shardId-000000000000", types.ShardIteratorTypeTrimHorizon, nil, nil)
	for i := range 5 {
		if _, err := c.GetRecords(ctx(t), &kinesis.GetRecordsInput{ShardIterator: it}, noRetry); err != nil {
			t.Fatalf("GetRecords %d of 5 in a second: %v", i+1, err)
		}
	}
	_, err := c.GetRecords(ctx(t), &kinesis.GetRecordsInput{ShardIterator: it}, noRetry)
	var pte *types.ProvisionedThroughputExceededException
	if !errors.As(err, &pte) {
		t.Fatalf("the sixth GetRecords in a second: %v, want ProvisionedThroughputExceededException", err)
	}
	clk.Advance(time.Second)
	if _, err := c.GetRecords(ctx(t), &kinesis.GetRecordsInput{ShardIterator: it}, noRetry); err != nil {
		t.Fatalf("GetRecords a second later: %v", err)
	}
}

func testThrottleWrites(t *testing.T, b Backend) {
	clk := newClock()
	c := b.Server(t, kinesistest.WithClock(clk.Now), kinesistest.WithLimits(true)).Client()
	name := newStream(t, c, 1)
	keys := make([]string, 500)
	for i := range keys {
		keys[i] = "k"
	}
	putRecords(t, c, name, keys...)
	putRecords(t, c, name, keys...)
	entries := []types.PutRecordsRequestEntry{{Data: []byte("x"), PartitionKey: aws.String("k")}}
	out, err := c.PutRecords(ctx(t), &kinesis.PutRecordsInput{StreamName: aws.String(name), Records: entries}, noRetry)
	if err != nil {
		t.Fatalf("PutRecords: %v", err)
	}
	if aws.ToInt32(out.FailedRecordCount) != 1 || aws.ToString(out.Records[0].ErrorCode) != "ProvisionedThroughputExceededException" {
		t.Fatalf("record 1,001 in a second: failed %d, code %q; want 1 ProvisionedThroughputExceededException", aws.ToInt32(out.FailedRecordCount), aws.ToString(out.Records[0].ErrorCode))
	}
	_, err = c.PutRecord(ctx(t), &kinesis.PutRecordInput{StreamName: aws.String(name), Data: []byte("x"), PartitionKey: aws.String("k")}, noRetry)
	var pte *types.ProvisionedThroughputExceededException
	if !errors.As(err, &pte) {
		t.Fatalf("PutRecord over the limit: %v, want ProvisionedThroughputExceededException", err)
	}
	clk.Advance(time.Second)
	putRecords(t, c, name, "k")
}

func testFaults(t *testing.T, b Backend) {
	plan := &kinesistest.FaultPlan{Seed: 1, Faults: []kinesistest.Fault{
		{Op: "GetShardIterator", Kind: kinesistest.Throttle, Probability: 1},
		{Op: "PutRecord", Kind: kinesistest.InternalFailure, Probability: 1},
		{Op: "DescribeStream", Kind: kinesistest.DropConnection, Probability: 1},
	}}
	c := b.Server(t, kinesistest.WithFaults(plan)).Client()
	name := testenv.Name(t)
	if _, err := c.CreateStream(ctx(t), &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(1)}); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	_, err := c.GetShardIterator(ctx(t), &kinesis.GetShardIteratorInput{StreamName: aws.String(name), ShardId: aws.String("shardId-000000000000"), ShardIteratorType: types.ShardIteratorTypeLatest}, noRetry)
	var pte *types.ProvisionedThroughputExceededException
	if !errors.As(err, &pte) {
		t.Fatalf("GetShardIterator with a throttle fault: %v, want ProvisionedThroughputExceededException", err)
	}
	_, err = c.PutRecord(ctx(t), &kinesis.PutRecordInput{StreamName: aws.String(name), Data: []byte("x"), PartitionKey: aws.String("k")}, noRetry)
	wantCode(t, err, "InternalFailureException")
	_, err = c.DescribeStream(ctx(t), &kinesis.DescribeStreamInput{StreamName: aws.String(name)}, noRetry)
	if err == nil {
		t.Fatal("DescribeStream with a dropped connection succeeded")
	}
	if _, err := kinesistest.Start(kinesistest.WithFaults(&kinesistest.FaultPlan{Faults: []kinesistest.Fault{{Kind: kinesistest.Throttle, Probability: 2}}})); err == nil {
		t.Fatal("Start accepted a fault probability of 2")
	}
}

func testStreamARNRequests(t *testing.T, b Backend) {
	c := b.Server(t).Client()
	name := newStream(t, c, 1)
	sum, err := c.DescribeStreamSummary(ctx(t), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
	if err != nil {
		t.Fatalf("DescribeStreamSummary: %v", err)
	}
	arn := sum.StreamDescriptionSummary.StreamARN
	if _, err := c.PutRecord(ctx(t), &kinesis.PutRecordInput{StreamARN: arn, Data: []byte("x"), PartitionKey: aws.String("k")}); err != nil {
		t.Fatalf("PutRecord by ARN: %v", err)
	}
	out, err := c.ListShards(ctx(t), &kinesis.ListShardsInput{StreamARN: arn})
	if err != nil || len(out.Shards) != 1 {
		t.Fatalf("ListShards by ARN: %v, %d shards", err, len(out.Shards))
	}
}

// testExplicitHashKeyPattern: an explicit hash key must match the service's pattern,
// 0|([1-9]\d{0,38}): no sign, no leading zeros, digits only.
func testExplicitHashKeyPattern(t *testing.T, b Backend) {
	c := b.Client(t)
	name := newStream(t, c, 1)
	for _, ehk := range []string{"-1", "+1", "01", "x1", "1 "} {
		_, err := c.PutRecord(ctx(t), &kinesis.PutRecordInput{StreamName: aws.String(name), Data: []byte("x"), PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(ehk)})
		wantCode(t, err, "ValidationException")
	}
}
