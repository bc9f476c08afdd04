package kinesistest_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/smithy-go"

	"github.com/gostream/kinesub/kinesistest"
)

// TestOversizedBody: a request whose body is over the server's 16 MiB is answered with status
// 413 and an error naming the limit, over HTTP/2 through the SDK and over HTTP/1.1, never with
// a JSON error about the body cut short.
func TestOversizedBody(t *testing.T) {
	srv := kinesistest.NewServer(kinesistest.WithPlainHTTP())
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := srv.Client()
	if _, err := c.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("big"), ShardCount: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	// 13 MiB of data is over 17 MiB once base64-encoded in the JSON body.
	_, err := c.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("big"), PartitionKey: aws.String("k"),
		Data: bytes.Repeat([]byte("x"), 13<<20)})
	checkTooLarge(t, err)
	var re *awshttp.ResponseError
	if !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusRequestEntityTooLarge {
		t.Errorf("err = %v, want HTTP status 413", err)
	}
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "SerializationException" {
		t.Errorf("err = %v, want SerializationException", err)
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.PlainURL, bytes.NewReader(bytes.Repeat([]byte(" "), 20<<20)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Amz-Target", "Kinesis_20131202.PutRecords")
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("HTTP/1.1: status %d, want 413", resp.StatusCode)
	}
	checkTooLarge(t, errors.New(string(body)))
}

func checkTooLarge(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("an oversized request was accepted")
	}
	for _, want := range []string{"16777216 bytes (16 MiB)", "SerializationException"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "unexpected end of JSON input") {
		t.Errorf("error %q reports a cut body", err)
	}
}
