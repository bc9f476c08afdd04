package kinesub

import (
	"bytes"
	"encoding/json"
	"github.com/gostream/kinesub/internal/envelope"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/kpl"
	"github.com/gostream/kinesub/internal/publish"
	"github.com/gostream/kinesub/kinesistest"
)

// Tests of the Publisher's flow control on kinesistest enforcing the service's write limits,
// inside synctest bubbles: the client calls the server's handler directly, with no network, so
// the server's limits count on the bubble's clock, which moves only when every goroutine of the
// test waits. Pacing is then exact, and a burst that takes seconds at the stream's pace takes
// milliseconds to test, on a loaded machine as on an idle one.

// handlerTransport serves HTTP requests with a handler in the calling goroutine, counting the
// records PutRecords answers refused.
type handlerTransport struct {
	h       http.Handler
	refused atomic.Int64
}

func (h *handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	h.h.ServeHTTP(rec, r)
	if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".PutRecords") {
		var out struct{ FailedRecordCount int64 }
		_ = json.Unmarshal(rec.Body.Bytes(), &out)
		h.refused.Add(out.FailedRecordCount)
	}
	return rec.Result(), nil
}

// inMemory returns a client of srv that goes through tr.
func inMemory(tr *handlerTransport) *kinesis.Client {
	return kinesis.NewFromConfig(aws.Config{
		Region: "us-east-1", BaseEndpoint: aws.String("http://kinesistest.invalid"),
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "secret", ""),
		HTTPClient:  &http.Client{Transport: tr},
	})
}

// limitedServer starts a kinesistest server enforcing the service's limits, outside any bubble
// (its listeners are goroutines the bubble must not wait for).
func limitedServer(t *testing.T) *kinesistest.Server {
	srv := kinesistest.NewServer(kinesistest.WithLimits(true))
	t.Cleanup(srv.Close)
	return srv
}

// limitedStream creates a stream of shards on srv, inside the test's bubble, and returns a
// transport counting what the server refuses, a client through it and a Publisher of the stream.
func limitedStream(t *testing.T, srv *kinesistest.Server, name string, shards int32, opts ...PublisherOption) (*handlerTransport, *kinesis.Client, *Publisher) {
	t.Helper()
	tr := &handlerTransport{h: srv}
	c := inMemory(tr)
	createStream(t, c, name, shards)
	p, err := NewPublisher(c, name, opts...)
	require.NoError(t, err)
	return tr, c, p
}

func createStream(t *testing.T, c *kinesis.Client, name string, shards int32) {
	t.Helper()
	_, err := c.CreateStream(t.Context(), &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(shards)})
	require.NoError(t, err)
}

// storedRecords reads every record of every shard of stream, ordered by sequence number: the
// order they were stored in, across shards (kinesistest numbers records across the stream).
func storedRecords(t *testing.T, c *kinesis.Client, stream string) []types.Record {
	t.Helper()
	ctx := t.Context()
	shards, err := c.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	require.NoError(t, err)
	var all []types.Record
	for _, s := range shards.Shards {
		it, err := c.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(stream), ShardId: s.ShardId, ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
		require.NoError(t, err)
		for iter := it.ShardIterator; iter != nil; {
			out, err := c.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter})
			require.NoError(t, err)
			all = append(all, out.Records...)
			if len(out.Records) == 0 {
				break
			}
			iter = out.NextShardIterator
		}
	}
	slices.SortFunc(all, func(a, b types.Record) int { return strings.Compare(*a.SequenceNumber, *b.SequenceNumber) })
	return all
}

// byKey groups stored payloads by partition key, in the order stored.
func byKey(recs []types.Record) map[string][]string {
	out := map[string][]string{}
	for _, r := range recs {
		_, p := envelope.Decode(r.Data)
		k := aws.ToString(r.PartitionKey)
		out[k] = append(out[k], string(bytes.TrimRight(p, "\x00")))
	}
	return out
}

// padded returns keyedRecords(n, keys) with payloads padded to 100 bytes.
func padded(n, keys int) []Record {
	recs := keyedRecords(n, keys)
	for i := range recs {
		recs[i].Data = append(recs[i].Data, make([]byte, 100-len(recs[i].Data))...)
	}
	return recs
}

// TestPublishBatchBurstAtTheStreamsPace: four concurrent PublishBatch calls of 2,000 records each
// on a stream of two shards, which takes 2,000 records a second (a second's worth at once):
// every record is written once, each key's records in order, in about 3 seconds, and the
// service refuses none: the publisher sent each shard no more than its limits allow.
func TestPublishBatchBurstAtTheStreamsPace(t *testing.T) {
	srv := limitedServer(t)
	synctest.Test(t, func(t *testing.T) {
		tr, c, p := limitedStream(t, srv, "burst", 2)
		const calls, per, keys = 4, 2000, 50
		all := padded(calls*per, calls*keys)
		start := time.Now()
		var wg sync.WaitGroup
		for i := range calls {
			var mine []Record
			for j := i; j < len(all); j += calls {
				mine = append(mine, all[j]) // every fourth record: keys i, i+4, …
			}
			wg.Go(func() { require.NoError(t, p.PublishBatch(t.Context(), mine)) })
		}
		wg.Wait()
		elapsed := time.Since(start)
		require.Zero(t, tr.refused.Load(), "records refused by the service")
		// A second's worth a shard at once, less the head start a new pacer keeps in hand,
		// the rest at 2,000 a second.
		want := 3*time.Second + publish.PacerHeadStart
		require.GreaterOrEqual(t, elapsed, want)
		require.Less(t, elapsed, want+200*time.Millisecond)
		checkKeyOrder(t, byKey(storedRecords(t, c, "burst")), calls*per, calls*keys)
		require.Zero(t, p.shards.Mispredicted())
	})
}

// TestPublishBatchThroughReshard: the stream's one shard is split while a long PublishBatch
// runs; the publisher notices that records land on other shards than predicted, lists the
// shards again and paces each child as a shard of its own, so the rest goes twice as fast;
// every record is written once, and each key's records are stored in order across the parent
// and its children.
func TestPublishBatchThroughReshard(t *testing.T) {
	srv := limitedServer(t)
	synctest.Test(t, func(t *testing.T) {
		tr, c, p := limitedStream(t, srv, "reshard", 1, WithPublishBackoff(10*time.Millisecond, 100*time.Millisecond))
		const n, keys = 8000, 300
		var wg sync.WaitGroup
		wg.Go(func() {
			time.Sleep(2 * time.Second)
			_, err := c.SplitShard(t.Context(), &kinesis.SplitShardInput{StreamName: aws.String("reshard"),
				ShardToSplit: aws.String("shardId-000000000000"), NewStartingHashKey: aws.String("170141183460469231731687303715884105728")})
			require.NoError(t, err)
		})
		start := time.Now()
		require.NoError(t, p.PublishBatch(t.Context(), padded(n, keys)))
		elapsed := time.Since(start)
		wg.Wait()
		checkKeyOrder(t, byKey(storedRecords(t, c, "reshard")), n, keys)
		m, err := p.shards.Current(t.Context())
		require.NoError(t, err)
		require.Equal(t, 2, m.Len(), "the publisher's map holds the two children")
		// Records were mispredicted only until the shards were listed again, a second after
		// the first went astray at most.
		require.Positive(t, p.shards.Mispredicted())
		require.LessOrEqual(t, p.shards.Mispredicted(), int64(1000))
		// One shard would take 7 s (1,000 at once, then 1,000 a second). 3,000 are written
		// by the split; the children take the other 5,000 at 2,000 a second.
		t.Logf("written in %v, %d mispredicted, %d refused", elapsed, p.shards.Mispredicted(), tr.refused.Load())
		require.Less(t, elapsed, 5500*time.Millisecond, "the children were not paced as shards of their own")
	})
}

// TestPublishBatchAggregatedBurst: with aggregation, a shard's 1 MiB a second carries about
// ten times as many 100-byte records as its 1,000 records a second: 40,000 records on two
// shards are written in about two seconds, each key's records in order, none refused.
func TestPublishBatchAggregatedBurst(t *testing.T) {
	srv := limitedServer(t)
	synctest.Test(t, func(t *testing.T) {
		tr, c, p := limitedStream(t, srv, "agg", 2, WithPublishAggregation(true))
		const n, keys = 40000, 200
		start := time.Now()
		require.NoError(t, p.PublishBatch(t.Context(), padded(n, keys)))
		elapsed := time.Since(start)
		require.Zero(t, tr.refused.Load())
		// About 106 bytes each, 4.2 MB in all: 2 MiB at once, the rest at 2 MiB a second.
		require.Less(t, elapsed, 1500*time.Millisecond)
		stored := map[string][]string{}
		for _, r := range storedRecords(t, c, "agg") {
			require.LessOrEqual(t, len(r.Data)+len(aws.ToString(r.PartitionKey)), publish.MaxRecordBytes)
			subs, err := kpl.Deaggregate(r.Data)
			require.NoError(t, err)
			for _, s := range subs {
				stored[s.PartitionKey] = append(stored[s.PartitionKey], string(bytes.TrimRight(s.Data, "\x00")))
			}
		}
		checkKeyOrder(t, stored, n, keys)
	})
}

// TestPublishBatchNeverWritesTwiceWhenThrottled: other writers spend most of each shard's
// budget, so the service refuses much of what the publisher sends; every record is written
// exactly once all the same (only a lost answer could make a copy).
func TestPublishBatchNeverWritesTwiceWhenThrottled(t *testing.T) {
	srv := limitedServer(t)
	synctest.Test(t, func(t *testing.T) {
		tr, c, p := limitedStream(t, srv, "shared", 1, WithPublishBackoff(10*time.Millisecond, 200*time.Millisecond))
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { // another producer: 600 records a second of another key
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				var entries []types.PutRecordsRequestEntry
				for range 60 {
					entries = append(entries, types.PutRecordsRequestEntry{PartitionKey: aws.String("other"), Data: []byte("o")})
				}
				_, err := c.PutRecords(t.Context(), &kinesis.PutRecordsInput{StreamName: aws.String("shared"), Records: entries})
				require.NoError(t, err)
			}
		})
		const n, keys = 3000, 60
		err := p.PublishBatch(t.Context(), padded(n, keys))
		close(stop)
		wg.Wait()
		require.NoError(t, err)
		require.Positive(t, tr.refused.Load(), "the service refused nothing: the test proves nothing")
		stored := byKey(storedRecords(t, c, "shared"))
		delete(stored, "other")
		checkKeyOrder(t, stored, n, keys)
	})
}
