// Package testenv connects integration tests to the local Kinesis (kinesalite) and DynamoDB
// (dynalite) servers that scripts/emulators.sh starts, and refuses any endpoint that is not on
// loopback, so a test can never reach real AWS.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// Variables naming the endpoints, as the AWS SDK reads them.
const (
	KinesisEndpointVar  = "AWS_ENDPOINT_URL_KINESIS"
	DynamoDBEndpointVar = "AWS_ENDPOINT_URL_DYNAMODB"
)

// CheckLoopback returns an error unless raw is an http(s) URL whose host is a loopback address.
func CheckLoopback(raw string) error {
	if raw == "" {
		return fmt.Errorf("endpoint is empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("endpoint %q: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("endpoint %q: scheme must be http or https", raw)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("endpoint %q is not on loopback: integration tests only run against local emulators", raw)
	}
	return nil
}

func endpoint(t testing.TB, name string) {
	t.Helper()
	raw := os.Getenv(name)
	if raw == "" {
		// make test sets the variables; a bare "go test" without emulators skips, unless the
		// run demands the emulators (CI, make test), where a missing endpoint is a failure.
		if os.Getenv("CI") != "" || os.Getenv("KINESUB_INTEGRATION") == "required" {
			t.Fatalf("%s is not set: run the tests with `make test`, which starts the emulators", name)
		}
		t.Skipf("%s is not set: integration test needs the emulators (run `make test`)", name)
	}
	if err := CheckLoopback(raw); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func loadConfig(t testing.TB) aws.Config {
	t.Helper()
	cfg, err := config.LoadDefaultConfig(context.Background(),
		config.WithRegion(envOr("AWS_REGION", "us-east-1")))
	if err != nil {
		t.Fatalf("load AWS config: %v", err)
	}
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
		cfg.Credentials = aws.AnonymousCredentials{}
	}
	return cfg
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// Kinesis returns a client for the local Kinesis server: kinesalite, or under
// KINESUB_KINESIS_BACKEND=kinesistest the test binary's in-process kinesistest server.
func Kinesis(t testing.TB) *kinesis.Client {
	t.Helper()
	if c, ok, err := inProcessKinesis(); err != nil {
		t.Fatalf("%s: %v", KinesisBackendVar, err)
	} else if ok {
		return c
	}
	endpoint(t, KinesisEndpointVar)
	return kinesis.NewFromConfig(loadConfig(t))
}

// DynamoDB returns a client for the local DynamoDB server.
func DynamoDB(t testing.TB) *dynamodb.Client {
	t.Helper()
	endpoint(t, DynamoDBEndpointVar)
	return dynamodb.NewFromConfig(loadConfig(t))
}

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// Name returns a resource name unique to this test run: the test's name plus a random suffix,
// within Kinesis's and DynamoDB's 128- and 255-character limits.
func Name(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	n := unsafeChars.ReplaceAllString(t.Name(), "-")
	if len(n) > 100 {
		n = n[len(n)-100:]
	}
	return strings.Trim(n, "-.") + "-" + hex.EncodeToString(b[:])
}

// CreateStream creates a provisioned stream with the given number of shards, waits until it is
// active, and deletes it when the test ends.
func CreateStream(t testing.TB, client *kinesis.Client, name string, shards int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.CreateStream(ctx, &kinesis.CreateStreamInput{
		StreamName: aws.String(name), ShardCount: aws.Int32(shards),
		StreamModeDetails: &types.StreamModeDetails{StreamMode: types.StreamModeProvisioned},
	}); err != nil {
		t.Fatalf("create stream %s: %v", name, err)
	}
	WaitActive(t, client, name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = client.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String(name), EnforceConsumerDeletion: aws.Bool(true)})
	})
}

// WaitActive waits until the stream is ACTIVE (after creation or a reshard).
func WaitActive(t testing.TB, client *kinesis.Client, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := kinesis.NewStreamExistsWaiter(client, func(o *kinesis.StreamExistsWaiterOptions) {
		o.MinDelay = 20 * time.Millisecond
		o.MaxDelay = 200 * time.Millisecond
	})
	for {
		if err := w.Wait(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String(name)}, 30*time.Second); err != nil {
			t.Fatalf("wait for stream %s: %v", name, err)
		}
		out, err := client.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
		if err != nil {
			t.Fatalf("describe stream %s: %v", name, err)
		}
		if out.StreamDescriptionSummary.StreamStatus == types.StreamStatusActive {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stream %s not active: %v", name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// CreateTable creates an on-demand DynamoDB table with a string hash key (and a string range
// key when rangeKey is not empty), as other consumers key their checkpoint tables, waits until
// it is active, and deletes it when the test ends.
func CreateTable(t testing.TB, client *dynamodb.Client, name, hash, rangeKey string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in := &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          ddbtypes.BillingModePayPerRequest,
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String(hash), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String(hash), KeyType: ddbtypes.KeyTypeHash}},
	}
	if rangeKey != "" {
		in.AttributeDefinitions = append(in.AttributeDefinitions, ddbtypes.AttributeDefinition{AttributeName: aws.String(rangeKey), AttributeType: ddbtypes.ScalarAttributeTypeS})
		in.KeySchema = append(in.KeySchema, ddbtypes.KeySchemaElement{AttributeName: aws.String(rangeKey), KeyType: ddbtypes.KeyTypeRange})
	}
	if _, err := client.CreateTable(ctx, in); err != nil {
		t.Fatalf("create table %s: %v", name, err)
	}
	t.Cleanup(func() {
		_, _ = client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	// dynalite creates a table over a moment: writes before it is active are refused.
	if err := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50*time.Millisecond, time.Second
	}).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, 30*time.Second); err != nil {
		t.Fatalf("wait for table %s: %v", name, err)
	}
}
