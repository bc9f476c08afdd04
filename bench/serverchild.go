package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/kinesistest"
)

// The kinesistest and latency figures run kinesistest and the publisher in a child process (this command run
// again with childEnv set), so that the CPU time the parent measures is its client's alone.
//
// The child prints the server's endpoint on its first line, then its certificate in PEM, then
// "ready". Then it reads commands from stdin, one a line, answering each with "ok" or
// "error: ..." on a line:
//
//	publish STREAM N GAP SIZE BATCH
//	    publish N records in PutRecord(s) calls of BATCH records, GAP apart (a time.Duration),
//	    each of SIZE bytes starting with its call's start time (UnixNano, big-endian), under
//	    partition keys "0", "1", ...
//
// It closes the server and exits when stdin closes.
const childEnv = "KINESUB_BENCH_CHILD"

// serverChild runs in the child process: the kinesistest server and the publisher.
func serverChild(limits bool) error {
	srv := kinesistest.NewServer(kinesistest.WithLimits(limits))
	defer srv.Close()
	fmt.Println(srv.URL)
	os.Stdout.Write(srv.CertificatePEM())
	fmt.Println("ready")
	client := srv.Client()
	pubs := map[string]*kinesub.Publisher{}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		err := childCommand(client, pubs, strings.Fields(in.Text()))
		if err != nil {
			fmt.Println("error:", err)
		} else {
			fmt.Println("ok")
		}
	}
	return in.Err()
}

func childCommand(client *kinesis.Client, pubs map[string]*kinesub.Publisher, args []string) error {
	if len(args) != 6 || args[0] != "publish" {
		return fmt.Errorf("unknown command %q", args)
	}
	stream := args[1]
	n, err1 := strconv.Atoi(args[2])
	gap, err2 := time.ParseDuration(args[3])
	size, err3 := strconv.Atoi(args[4])
	batch, err4 := strconv.Atoi(args[5])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return err
	}
	if batch < 1 {
		return fmt.Errorf("batch %d: must be at least 1", batch)
	}
	pub := pubs[stream]
	if pub == nil {
		var err error
		if pub, err = kinesub.NewPublisher(client, stream); err != nil {
			return err
		}
		pubs[stream] = pub
	}
	ctx, cancel := context.WithTimeout(context.Background(), passTimeout)
	defer cancel()
	payload := make([]byte, max(size, 8))
	next := time.Now()
	for i := 0; i < n; i += batch {
		binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
		if batch == 1 {
			if _, err := pub.Publish(ctx, strconv.Itoa(i), payload, nil); err != nil {
				return err
			}
		} else {
			recs := make([]kinesub.Record, 0, batch)
			for j := i; j < min(i+batch, n); j++ {
				recs = append(recs, kinesub.Record{PartitionKey: strconv.Itoa(j), Data: payload})
			}
			if err := pub.PublishBatch(ctx, recs); err != nil {
				return err
			}
		}
		// A fixed rate: the gap counts from the previous call's start, not its answer.
		next = next.Add(gap)
		time.Sleep(time.Until(next))
	}
	return nil
}

// childServer is the parent's handle on the child process.
type childServer struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	url    string
	client *kinesis.Client
}

// startChildServer starts the child and returns a client for its server, which enforces the
// service's throughput limits (kinesistest.WithLimits) when limits is set.
func startChildServer(limits bool) (*childServer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	mode := "server"
	if limits {
		mode = "server-limits"
	}
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &childServer{cmd: cmd, in: in, out: bufio.NewScanner(stdout)}
	var pem strings.Builder
	for c.out.Scan() {
		line := c.out.Text()
		switch {
		case c.url == "":
			c.url = line
		case line == "ready":
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM([]byte(pem.String())) {
				_ = c.close()
				return nil, errors.New("child server: no certificate")
			}
			c.client = kinesis.NewFromConfig(aws.Config{
				Region:       "us-east-1",
				BaseEndpoint: aws.String(c.url),
				Credentials:  credentials.NewStaticCredentialsProvider("AKIDKINESISTEST", "kinesistest", ""),
				HTTPClient: &http.Client{Transport: &http.Transport{
					TLSClientConfig:     &tls.Config{RootCAs: roots},
					ForceAttemptHTTP2:   true,
					MaxIdleConnsPerHost: 64,
					IdleConnTimeout:     90 * time.Second,
				}},
			})
			return c, nil
		default:
			pem.WriteString(line + "\n")
		}
	}
	_ = c.close()
	return nil, fmt.Errorf("child server ended before it was ready: %v", c.out.Err())
}

// publish has the child publish n records in calls of batch records, gap apart, and returns
// when it has.
func (c *childServer) publish(stream string, n int, gap time.Duration, size, batch int) error {
	if _, err := fmt.Fprintf(c.in, "publish %s %d %v %d %d\n", stream, n, gap, size, batch); err != nil {
		return err
	}
	if !c.out.Scan() {
		return fmt.Errorf("child server: %v", c.out.Err())
	}
	if reply := c.out.Text(); reply != "ok" {
		return fmt.Errorf("child server: %s", reply)
	}
	return nil
}

// close closes the child's stdin, which ends it, and waits for it.
func (c *childServer) close() error {
	_ = c.in.Close()
	return c.cmd.Wait()
}
