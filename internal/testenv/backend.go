package testenv

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub/kinesistest"
)

// KinesisBackendVar chooses the Kinesis server of the tests: unset or "kinesalite" for the
// server at AWS_ENDPOINT_URL_KINESIS, "kinesistest" for a kinesistest server in the test
// process.
const KinesisBackendVar = "KINESUB_KINESIS_BACKEND"

// inProcess is the test binary's kinesistest server under KINESUB_KINESIS_BACKEND=kinesistest,
// started before any test runs and never closed: it lives as long as the binary.
var inProcess struct {
	srv *kinesistest.Server
	cfg aws.Config
	err error
}

func init() {
	switch b := os.Getenv(KinesisBackendVar); b {
	case "", "kinesalite":
		return
	case "kinesistest":
	default:
		inProcess.err = fmt.Errorf("%s=%q: must be kinesalite or kinesistest", KinesisBackendVar, b)
		return
	}
	srv, err := kinesistest.Start(kinesistest.WithPlainHTTP())
	if err != nil {
		inProcess.err = err
		return
	}
	cfg := srv.Config()
	// One HTTP client, whose one HTTP/2 connection never idles out, serves every client: its
	// goroutines and the server's exist before any test, so leak checks see none appear.
	hc := srv.HTTPClient()
	hc.Transport.(*http.Transport).IdleConnTimeout = 0
	cfg.HTTPClient = hc
	// Code that reads the endpoint variable (a fault proxy's upstream) reaches the same server
	// over plain HTTP.
	if err := os.Setenv(KinesisEndpointVar, srv.PlainURL); err != nil {
		inProcess.err = err
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kinesis.NewFromConfig(cfg).ListStreams(ctx, &kinesis.ListStreamsInput{}); err != nil {
		inProcess.err = fmt.Errorf("kinesistest: %w", err)
		return
	}
	inProcess.srv, inProcess.cfg = srv, cfg
}

// KinesisBackend returns the Kinesis server the tests use: "kinesalite" or "kinesistest".
// Tests of a server's quirks (kinesalite hangs where the service answers) assert what each one
// does.
func KinesisBackend() string {
	if inProcess.srv != nil {
		return "kinesistest"
	}
	return "kinesalite"
}

// inProcessKinesis returns a client for the in-process server, if the tests use one.
func inProcessKinesis() (*kinesis.Client, bool, error) {
	if inProcess.err != nil {
		return nil, false, inProcess.err
	}
	if inProcess.srv == nil {
		return nil, false, nil
	}
	return kinesis.NewFromConfig(inProcess.cfg), true, nil
}
