package direct

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub/internal/recordsjson"
)

// BenchmarkEmptyGetRecords: one GetRecords call that reads an empty page (an idle shard's
// poll), through the SDK as the poller calls it and through the direct path, against a local
// server that answers at once. CPU per call includes the server's share, the same for both.
func BenchmarkEmptyGetRecords(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_, _ = w.Write([]byte(`{"Records":[],"NextShardIterator":"next","MillisBehindLatest":0}`))
	}))
	b.Cleanup(srv.Close)
	c := kinesis.NewFromConfig(aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "secret", "token")})
	d, err := New(c, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	in := func() *kinesis.GetRecordsInput {
		return &kinesis.GetRecordsInput{ShardIterator: aws.String("it"), Limit: aws.Int32(1000)}
	}
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.GetRecords(ctx, in(), noRetry, recordsjson.UpTo(1000), CachedEndpoints); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, fb, err := d.GetRecords(ctx, in(), 1000); err != nil || fb.Reason != "" {
				b.Fatal(err, fb)
			}
		}
	})
}
