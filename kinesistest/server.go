package kinesistest

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
)

// Server is a Kinesis server running in the calling process, on 127.0.0.1, over TLS with
// HTTP/2. It speaks the service's wire protocol (JSON 1.1, and the event-stream encoding for
// SubscribeToShard), so the real SDK client talks to it unchanged. It is safe for concurrent
// use.
type Server struct {
	// URL is the server's endpoint, https://127.0.0.1:<port>.
	URL string
	// PlainURL is the server's plain HTTP/1.1 endpoint, http://127.0.0.1:<port>, under
	// WithPlainHTTP; empty otherwise.
	PlainURL string

	cfg     config
	ln      net.Listener
	srv     *http.Server
	plain   *http.Server // under WithPlainHTTP
	certPEM []byte
	roots   *x509.CertPool
	served  chan struct{} // closed when the serving goroutines have returned
	done    chan struct{} // closed by Close: ends every subscription

	subscriptions atomic.Int64 // SubscribeToShard streams being served
	local         bool         // made by NewInProcess: no listener, clients served in-process

	mu      sync.Mutex
	streams map[string]*stream
	nextID  uint64 // tells apart streams of the same name created one after the other

	closeOnce sync.Once
}

// NewServer starts a server with the given options. It panics if an option is invalid or the
// server cannot listen, as httptest.NewServer does; Start returns the error instead.
func NewServer(opts ...Option) *Server {
	s, err := Start(opts...)
	if err != nil {
		panic(err)
	}
	return s
}

// Start starts a server with the given options. Invalid options are rejected before it listens,
// with an error naming the option and its allowed range.
func Start(opts ...Option) (*Server, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cert, certPEM, err := newCertificate()
	if err != nil {
		return nil, fmt.Errorf("kinesistest: certificate: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certPEM)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("kinesistest: listen: %w", err)
	}
	s := &Server{
		URL:     "https://" + ln.Addr().String(),
		cfg:     cfg,
		ln:      ln,
		certPEM: certPEM,
		roots:   roots,
		served:  make(chan struct{}),
		done:    make(chan struct{}),
		streams: make(map[string]*stream),
	}
	s.srv = &http.Server{
		Handler:           s,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}},
		ReadHeaderTimeout: time.Minute,
		ErrorLog:          quiet,
	}
	var plainLn net.Listener
	if cfg.plain {
		if plainLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("kinesistest: listen: %w", err)
		}
		s.PlainURL = "http://" + plainLn.Addr().String()
		s.plain = &http.Server{Handler: s, ReadHeaderTimeout: time.Minute, ErrorLog: quiet}
	}
	// Owned by the Server: Close shuts the http.Servers down and waits for these goroutines.
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.srv.ServeTLS(ln, "", "") })
	if plainLn != nil {
		wg.Go(func() { _ = s.plain.Serve(plainLn) })
	}
	go func() {
		wg.Wait()
		close(s.served)
	}()
	return s, nil
}

// Close ends every subscription, stops the server and waits for it. It may be called more than
// once.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.done)
		if s.local {
			return
		}
		_ = s.srv.Close()
		if s.plain != nil {
			_ = s.plain.Close()
		}
		<-s.served
	})
}

// CertificatePEM returns the server's self-signed certificate in PEM, for clients in other
// processes or languages; nil for a server made by NewInProcess, which has none.
func (s *Server) CertificatePEM() []byte { return append([]byte(nil), s.certPEM...) }

// HTTPClient returns a new HTTP client that trusts the server's certificate and speaks HTTP/2.
func (s *Server) HTTPClient() *http.Client {
	if s.local {
		return &http.Client{Transport: transport{s}}
	}
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: s.roots},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}}
}

// Config returns an AWS configuration for the server: its endpoint, its region, static
// credentials and an HTTP client from HTTPClient. Use it to build clients with options of your
// own (kinesis.NewFromConfig(cfg, ...)).
func (s *Server) Config() aws.Config {
	if s.local {
		return s.inProcessConfig()
	}
	return aws.Config{
		Region:       s.cfg.region,
		BaseEndpoint: aws.String(s.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDKINESISTEST", "kinesistest", ""),
		HTTPClient:   s.HTTPClient(),
	}
}

// Client returns a new Kinesis client for the server, with its own HTTP client. One client
// serves any number of concurrent calls; but the SDK's event-stream reader is known to race
// when one client reads several SubscribeToShard streams at once (aws/smithy-go#714), so give
// each concurrent subscription a client of its own.
func (s *Server) Client() *kinesis.Client { return kinesis.NewFromConfig(s.Config()) }

// Subscriptions returns the number of SubscribeToShard subscriptions the server is serving:
// those it accepted (a call that returned without error is counted) and that have not ended,
// by their lifetime, their shard's end, a takeover, a fault, or the client closing the stream. A test checks with it that a
// consumer released the HTTP/2 streams of the subscriptions it ended.
func (s *Server) Subscriptions() int { return int(s.subscriptions.Load()) }

func (s *Server) now() time.Time { return s.cfg.now() }

// quiet drops the http.Server's log of clients that hang up mid-handshake or mid-request,
// which tests do all the time.
var quiet = log.New(io.Discard, "", 0)

const targetPrefix = "Kinesis_20131202."

const (
	// maxRequestBody bounds a request's body: above every valid request (a 10 MiB record, the
	// service's largest, is 13.3 MiB once base64-encoded in PutRecord's JSON).
	maxRequestBody = 16 << 20
	// maxDrain bounds what is read of a body past maxRequestBody before answering.
	maxDrain = 256 << 20
)

type handler func(s *Server, body []byte) (any, *apiError)

var handlers = map[string]handler{
	"CreateStream":             (*Server).createStream,
	"DeleteStream":             (*Server).deleteStream,
	"DescribeStream":           (*Server).describeStream,
	"DescribeStreamSummary":    (*Server).describeStreamSummary,
	"ListStreams":              (*Server).listStreams,
	"ListShards":               (*Server).listShards,
	"PutRecord":                (*Server).putRecord,
	"PutRecords":               (*Server).putRecords,
	"GetShardIterator":         (*Server).getShardIterator,
	"GetRecords":               (*Server).getRecords,
	"SplitShard":               (*Server).splitShard,
	"MergeShards":              (*Server).mergeShards,
	"UpdateShardCount":         (*Server).updateShardCount,
	"RegisterStreamConsumer":   (*Server).registerConsumer,
	"DescribeStreamConsumer":   (*Server).describeConsumer,
	"ListStreamConsumers":      (*Server).listConsumers,
	"DeregisterStreamConsumer": (*Server).deregisterConsumer,
}

// ServeHTTP answers one Kinesis call.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	op, ok := strings.CutPrefix(target, targetPrefix)
	if r.Method != http.MethodPost || !ok {
		writeError(w, newError(400, "UnknownOperationException", "unknown operation %q", target))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody+1))
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if len(body) > maxRequestBody {
		// Read the rest, so that an HTTP/1.1 client that is still sending reads the answer
		// rather than a reset connection.
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxDrain))
		writeError(w, errTooLarge(op))
		return
	}
	var broken *Fault // a fault of the subscription, once it started
	if f, ok := s.cfg.faults.draw(op); ok {
		switch f.Kind {
		case ResetStream, StreamError:
			broken = &f
		case Throttle:
			writeError(w, throttleError(op))
			return
		case InternalFailure:
			writeError(w, errInternal("Internal service failure (injected fault)."))
			return
		case DropConnection:
			panic(http.ErrAbortHandler)
		case Latency:
			t := time.NewTimer(f.Latency)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
	}
	if op == "SubscribeToShard" {
		s.subscribeToShard(w, r, body, broken)
		return
	}
	h, ok := handlers[op]
	if !ok {
		writeError(w, newError(400, "UnknownOperationException", "unknown operation %q", op))
		return
	}
	out, aerr := h(s, body)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	buf, ok := out.(rawJSON)
	if !ok {
		var err error
		if buf, err = json.Marshal(out); err != nil {
			writeError(w, errInternal("encode response: %v", err))
			return
		}
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_, _ = w.Write(buf)
}

func writeError(w http.ResponseWriter, e *apiError) {
	buf, _ := json.Marshal(struct {
		Type    string `json:"__type"`
		Message string `json:"message"`
	}{e.typ, e.message})
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-ErrorType", e.typ)
	w.WriteHeader(e.status)
	_, _ = w.Write(buf)
}

// decode reads a request body into v, answering SerializationException as the service does
// for a body that is not the operation's JSON.
func decode(body []byte, v any) *apiError {
	if len(body) == 0 {
		body = []byte("{}")
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return newError(400, "SerializationException", "field %s: %v", te.Field, err)
		}
		return newError(400, "SerializationException", "%v", err)
	}
	return nil
}
