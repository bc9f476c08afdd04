package kinesistest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gostream/kinesub/kinesistest"
)

// TestJavaScriptClient has a client no one here wrote drive the server: the AWS SDK for
// JavaScript v3 (pinned in testenv/, installed by scripts/emulators.sh) puts records, registers
// a consumer and reads the records back over SubscribeToShard, so HTTP/2 and the event-stream
// framing are checked by an independent implementation.
func TestJavaScriptClient(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "testenv"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if _, serr := os.Stat(filepath.Join(dir, "node_modules", "@aws-sdk", "client-kinesis")); err != nil || serr != nil {
		if os.Getenv("CI") != "" || os.Getenv("KINESUB_INTEGRATION") == "required" {
			t.Fatalf("node or testenv/node_modules/@aws-sdk/client-kinesis missing (node: %v, module: %v): run `make test`", err, serr)
		}
		t.Skip("needs node and the JavaScript SDK that scripts/emulators.sh installs (run `make test`)")
	}
	srv := kinesistest.NewServer()
	defer srv.Close()
	client := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const stream, n = "js", 25
	if _, err := client.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	cert := filepath.Join(t.TempDir(), "kinesistest.pem")
	if err := os.WriteFile(cert, srv.CertificatePEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, node, "kinesis-client.js", srv.URL, stream, fmt.Sprint(n))
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") && !strings.HasPrefix(kv, "NODE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "NODE_EXTRA_CA_CERTS="+cert)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node kinesis-client.js: %v\n%s", err, stderr.String())
	}
	var got struct {
		Read         []string
		Continuation string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client printed %q: %v", out, err)
	}
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("js-%d", i))
	}
	if !slices.Equal(got.Read, want) {
		t.Fatalf("the JavaScript client read %v over SubscribeToShard, want %v", got.Read, want)
	}
	// What it put and its continuation agree with what the Go client reads.
	it, err := client.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(stream), ShardId: aws.String("shardId-000000000000"), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := client.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs.Records) != n || string(recs.Records[0].Data) != "js-0" || aws.ToString(recs.Records[n-1].SequenceNumber) != got.Continuation {
		t.Fatalf("Go read %d records, last %s; want %d, the last one the JavaScript client's continuation %s", len(recs.Records), aws.ToString(recs.Records[len(recs.Records)-1].SequenceNumber), n, got.Continuation)
	}
}
