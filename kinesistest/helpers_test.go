package kinesistest_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gostream/kinesub/kinesistest"
)

// TestCreateStreamAndPut: the helpers create a stream that clients see ACTIVE with its shards,
// and put records that GetRecords reads back in order, with the sequence numbers Put returned.
func TestCreateStreamAndPut(t *testing.T) {
	srv := kinesistest.NewServer(kinesistest.WithStatusDelay(50 * time.Millisecond))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.CreateStream(ctx, "orders", 3); err != nil {
		t.Fatal(err)
	}
	c := srv.Client()
	sum, err := c.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("orders")})
	if err != nil {
		t.Fatal(err)
	}
	if d := sum.StreamDescriptionSummary; d.StreamStatus != types.StreamStatusActive || aws.ToInt32(d.OpenShardCount) != 3 {
		t.Fatalf("stream %s with %d shards, want ACTIVE with 3", d.StreamStatus, aws.ToInt32(d.OpenShardCount))
	}

	seqs, err := srv.Put(ctx, "orders", "shop-1", []byte("apples"), []byte("pears"), []byte("plums"))
	if err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 3 || seqs[0] >= seqs[1] || seqs[1] >= seqs[2] {
		t.Fatalf("sequence numbers %v, want three, growing", seqs)
	}
	// The key's shard holds them, in order.
	put, err := c.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"), PartitionKey: aws.String("shop-1"), Data: []byte("figs")})
	if err != nil {
		t.Fatal(err)
	}
	it, err := c.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String("orders"), ShardId: put.ShardId,
		ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
	if err != nil {
		t.Fatal(err)
	}
	var data, gotSeqs []string
	for _, r := range got.Records {
		data = append(data, string(r.Data))
		gotSeqs = append(gotSeqs, aws.ToString(r.SequenceNumber))
	}
	if strings.Join(data, " ") != "apples pears plums figs" || strings.Join(gotSeqs[:3], " ") != strings.Join(seqs, " ") {
		t.Fatalf("read %v %v, want apples pears plums figs with %v first", data, gotSeqs, seqs)
	}
}

// TestHelpersFailAsTheCallsWould: the helpers' errors are the SDK's typed errors of the calls
// they stand for, or ctx's.
func TestHelpersFailAsTheCallsWould(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	srv := kinesistest.NewServer(kinesistest.WithStatusDelay(time.Second), kinesistest.WithClock(func() time.Time { return time.Unix(0, now.Load()) }))
	t.Cleanup(srv.Close)
	ctx := context.Background()

	// The server's clock stands still: the stream stays CREATING until ctx ends.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := srv.CreateStream(short, "slow", 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("CreateStream on a stopped clock: %v, want the deadline", err)
	}
	now.Add(int64(time.Second))
	var inUse *types.ResourceInUseException
	if err := srv.CreateStream(ctx, "slow", 1); !errors.As(err, &inUse) {
		t.Errorf("CreateStream of an existing stream: %v, want ResourceInUseException", err)
	}
	var invalid *types.ValidationException
	if err := srv.CreateStream(ctx, "none", 0); !errors.As(err, &invalid) {
		t.Errorf("CreateStream of 0 shards: %v, want ValidationException", err)
	}
	if err := srv.CreateStream(ctx, "bad name", 1); !errors.As(err, &invalid) {
		t.Errorf("CreateStream of a bad name: %v, want ValidationException", err)
	}
	var nf *types.ResourceNotFoundException
	if _, err := srv.Put(ctx, "missing", "k", []byte("x")); !errors.As(err, &nf) {
		t.Errorf("Put to a missing stream: %v, want ResourceNotFoundException", err)
	}
	if _, err := srv.Put(ctx, "slow", "", []byte("x")); !errors.As(err, &invalid) {
		t.Errorf("Put with an empty key: %v, want ValidationException", err)
	}

	var nilCtx context.Context
	for method, err := range map[string]error{
		"CreateStream": srv.CreateStream(nilCtx, "other", 1),
		"Put":          func() error { _, err := srv.Put(nilCtx, "slow", "k", []byte("x")); return err }(),
	} {
		if !errors.Is(err, kinesistest.ErrInvalidArgument) || !strings.Contains(err.Error(), method+": nil context: pass context.Background()") {
			t.Errorf("%s(nil, …): %v, want ErrInvalidArgument naming it", method, err)
		}
	}
}
