package kinesistest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// inProcessURL is the endpoint of a server made by NewInProcess: nothing listens there; its
// clients' requests never leave the process.
const inProcessURL = "http://kinesistest.in-process"

// NewInProcess returns a server that does not listen: the clients of its Config and Client
// reach it through an HTTP transport that calls ServeHTTP in the calling goroutine, with no
// connection, no TLS and no goroutine of its own. So it can be made and used inside a
// testing/synctest bubble, where time advances only while every goroutine is blocked and a
// goroutine waiting on the network never is: a test can run many subscribers against one
// stream for minutes of the bubble's time in milliseconds. Its URL is a name that no network
// resolves. Every operation but SubscribeToShard is served (an event stream needs HTTP/2);
// a SubscribeToShard call fails with ResourceInUseException naming the limitation. Invalid
// options are rejected as Start rejects them.
func NewInProcess(opts ...Option) (*Server, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{
		URL:     inProcessURL,
		cfg:     cfg,
		served:  make(chan struct{}),
		done:    make(chan struct{}),
		streams: make(map[string]*stream),
		local:   true,
	}
	close(s.served)
	return s, nil
}

// transport serves requests in the calling goroutine (NewInProcess).
type transport struct{ s *Server }

func (t transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		defer r.Body.Close()
	}
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	if r.Header.Get("X-Amz-Target") == targetPrefix+"SubscribeToShard" {
		rec := httptest.NewRecorder()
		writeError(rec, newError(400, "ResourceInUseException",
			"SubscribeToShard is not served by a kinesistest server made by NewInProcess: use Start"))
		return response(r, rec), nil
	}
	if r.Body == nil {
		r.Body = http.NoBody
	}
	rec := httptest.NewRecorder()
	aborted := false
	func() {
		defer func() {
			if v := recover(); v != nil {
				if v != http.ErrAbortHandler { //nolint:errorlint // the sentinel value itself
					panic(v)
				}
				aborted = true
			}
		}()
		t.s.ServeHTTP(rec, r)
	}()
	if aborted { // DropConnection: the connection went without an answer
		return nil, errors.New("kinesistest: connection dropped (injected fault)")
	}
	if err := r.Context().Err(); err != nil {
		return nil, fmt.Errorf("kinesistest: %w", err)
	}
	return response(r, rec), nil
}

// response turns what a handler wrote into the client's answer.
func response(r *http.Request, rec *httptest.ResponseRecorder) *http.Response {
	body := rec.Body.Bytes()
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", rec.Code, http.StatusText(rec.Code)),
		StatusCode:    rec.Code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        rec.Header(),
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       r,
	}
}

// inProcessConfig is Config for a server made by NewInProcess.
func (s *Server) inProcessConfig() aws.Config {
	return aws.Config{
		Region:       s.cfg.region,
		BaseEndpoint: aws.String(s.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDKINESISTEST", "kinesistest", ""),
		HTTPClient:   &http.Client{Transport: transport{s}},
	}
}
