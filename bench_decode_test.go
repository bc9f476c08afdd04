package kinesub

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"github.com/gostream/kinesub/internal/recordsjson"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"golang.org/x/time/rate"

	"github.com/gostream/kinesub/internal/kinesisiface"
	"github.com/gostream/kinesub/lease"
)

// decodingKinesis is a pageKinesis whose GetRecords answers are decoded from JSON bodies by
// kinesub's own decoder (internal/recordsjson), as the Kinesis client's answers are: what a page
// costs to decode, and every record's allocations, are in the measurement, as end to end.
// Records are of benchRecordSize bytes under 1,000 partition keys, each record's JSON the same
// length, so that a body of any count is a prefix of one rendered body.
type decodingKinesis struct {
	*pageKinesis
	records []byte // the rendered records, recordJSON bytes each, a comma after each
	bodies  sync.Pool
}

const recordJSON = 300

func newDecodingKinesis() *decodingKinesis {
	f := &decodingKinesis{pageKinesis: newPageKinesis(1<<62, false)}
	data := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{'a'}, benchRecordSize))
	var b strings.Builder
	for i := range benchPage {
		rec := fmt.Sprintf(`{"SequenceNumber":"%s","ApproximateArrivalTimestamp":1.764760000123E9,"Data":"%s","PartitionKey":"key-%04d"}`,
			benchSequence(i), data, i%1000)
		rec += strings.Repeat(" ", recordJSON-1-len(rec)) + ","
		b.WriteString(rec)
	}
	f.records = []byte(b.String())
	f.bodies.New = func() any { return new([]byte) }
	return f
}

func (f *decodingKinesis) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	select {
	case <-f.started:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	f.calls.Add(1)
	shard, offset, ok := strings.Cut(aws.ToString(in.ShardIterator), ":")
	sh, err1 := strconv.Atoi(shard)
	off, err2 := strconv.Atoi(offset)
	if !ok || err1 != nil || err2 != nil {
		return nil, &types.InvalidArgumentException{Message: aws.String("bad iterator")}
	}
	n := min(int(aws.ToInt32(in.Limit)), benchPage)
	buf := f.bodies.Get().(*[]byte)
	defer f.bodies.Put(buf)
	body := append((*buf)[:0], `{"Records":[`...)
	body = append(body, f.records[:n*recordJSON-1]...) // without the last comma
	body = append(body, fmt.Sprintf(`],"NextShardIterator":"%d:%d","MillisBehindLatest":0}`, sh, off+n)...)
	*buf = body
	// As recordsProtocol decodes the answer to a call for in.Limit records.
	out := new(kinesis.GetRecordsOutput)
	if err := recordsjson.DecodeHint(body, out, min(n, len(body)/recordsjson.MinRecordJSON+1)); err != nil {
		return nil, err
	}
	return out, nil
}

// BenchmarkPullDecoded is BenchmarkPull with pages decoded from JSON as the Kinesis client's
// are (decodingKinesis), and BenchmarkDeliverAck/coalesced's Messages loop beside: the
// library's CPU per record end to end, without HTTP or a server. The figures include the
// decoding (about 600 ns a record), the same in every version.
func BenchmarkPullDecoded(b *testing.B) {
	for _, style := range []string{"messages", "all", "batches"} {
		b.Run(style, func(b *testing.B) {
			f := newDecodingKinesis()
			store := &countingStore{Store: lease.NewMemory()}
			sub := benchSubscribeTo(b, f, WithLeaseStore(store))
			ctx := context.Background()
			runtime.GC()
			m0, cpu0 := mallocs(), cpuTime()
			b.ResetTimer()
			f.start()
			n := 0
			if style == "messages" {
				for ; n < b.N; n++ {
					if err := (<-sub.Messages()).Ack(ctx); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				n = pullBench(b, ctx, sub, style)
			}
			b.StopTimer()
			allocs, cpu := mallocs()-m0, cpuTime()-cpu0
			closeBench(b, sub, 10*time.Second)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/record")
			b.ReportMetric(float64(allocs)/float64(b.N), "allocs/record")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/record")
		})
	}
}

// benchSubscribeTo subscribes to client, a stream of benchShards shards, as benchSubscribe does.
func benchSubscribeTo(b testing.TB, client kinesisiface.Kinesis, opts ...Option) *Subscriber {
	b.Helper()
	opts = append([]Option{
		WithLeaseStore(lease.NewMemory()),
		WithStartAt(Horizon()),
		WithBatchSize(benchPage),
		WithPollInterval(time.Millisecond),
		func(c *config) {
			c.source = func(id string) shardSource {
				p := newPoller(client, nil, streamRef{name: "bench"}, id, c.requestTimeout, c.pollInterval, c.pollInterval)
				p.calls.SetLimit(rate.Inf)
				p.bytes.SetLimit(rate.Inf)
				return p
			}
		},
	}, opts...)
	sub, err := subscribe(context.Background(), client, "bench", opts...)
	if err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(heldShards(sub)) < benchShards {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d shards leased after 10s", len(heldShards(sub)), benchShards)
		}
		time.Sleep(time.Millisecond)
	}
	return sub
}
