// Package faultproxy is an HTTP proxy for the local Kinesis and DynamoDB emulators that injects
// the faults the real services produce and the emulators never do: throttling, internal
// errors, expired iterators, failed conditional writes, dropped connections and latency.
//
// Point an SDK client's BaseEndpoint at Proxy.URL; the proxy forwards to the emulator unless
// its Plan decides to fault the request. Error responses carry the status, headers and body the
// real service sends, so the AWS SDK returns its typed exceptions for them.
package faultproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/gostream/kinesub/internal/testenv"
)

// Stats keys besides the fault kinds' names.
const (
	// StatForwarded counts requests sent upstream, including those delayed by Latency.
	StatForwarded = "Forwarded"
	// StatForwardFailed counts forwarded requests that got no response from upstream; the
	// client received 502 Bad Gateway.
	StatForwardFailed = "ForwardFailed"
)

// maxConditionBody bounds how much of a DynamoDB write the proxy reads to find its condition;
// DynamoDB itself caps an item at 400 KB.
const maxConditionBody = 16 << 20

// Proxy forwards requests to an upstream emulator and injects faults as its Plan says. It is
// safe for concurrent use.
type Proxy struct {
	decider   *decider
	latency   time.Duration
	condFault bool // the plan can fault conditional writes, so their bodies must be read

	ln        net.Listener
	srv       *http.Server
	rp        *httputil.ReverseProxy
	transport *http.Transport
	serveDone chan struct{}

	// ctx is cancelled by Close, ending delays and upstream calls of in-flight requests.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex // guards closed and the Add side of inflight
	closed   bool
	inflight sync.WaitGroup
	closeErr error
	once     sync.Once

	statsMu sync.Mutex
	stats   map[string]int
}

// New starts a proxy on 127.0.0.1 (a free port) that forwards to target, the base URL of an
// emulator. target must be on loopback: the proxy exists for tests and never reaches real AWS.
func New(target string, plan Plan) (*Proxy, error) {
	if err := plan.validate(); err != nil {
		return nil, err
	}
	if err := testenv.CheckLoopback(target); err != nil {
		return nil, fmt.Errorf("faultproxy: target: %w", err)
	}
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: target: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil // the upstream is on loopback; never route it through HTTP_PROXY

	p := &Proxy{
		decider:   newDecider(plan),
		latency:   plan.Latency,
		ln:        ln,
		transport: transport,
		serveDone: make(chan struct{}),
		stats:     make(map[string]int),
	}
	for _, f := range plan.Faults {
		if f.Kind == ConditionalCheckFailed && f.Weight > 0 {
			p.condFault = true
		}
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			// Keep the Host the client signed (SigV4 covers it), as a transparent proxy must.
			r.Out.Host = r.In.Host
		},
		Transport:     transport,
		FlushInterval: -1, // pass event-stream frames through as they arrive
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.count(StatForwardFailed, r.Header.Get("X-Amz-Target"))
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(p.serveDone)
		_ = p.srv.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	return p, nil
}

// URL returns the proxy's base URL, for an SDK client's BaseEndpoint.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// SetRate changes the fraction of eligible requests faulted, for example to 0 so a test can
// drain its work without faults at the end. r is clamped to [0, 1]; NaN counts as 0.
func (p *Proxy) SetRate(r float64) {
	switch {
	case math.IsNaN(r) || r < 0:
		r = 0
	case r > 1:
		r = 1
	}
	p.decider.setRate(r)
}

// Stats returns counts of what the proxy did so far. For each fault kind and for
// StatForwarded and StatForwardFailed, the key is the name alone for the total and the name,
// "/" and the X-Amz-Target for one operation, as in "Throttle/Kinesis_20131202.GetRecords".
// Kinds that never happened are absent.
func (p *Proxy) Stats() map[string]int {
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	out := make(map[string]int, len(p.stats))
	for k, v := range p.stats {
		out[k] = v
	}
	return out
}

func (p *Proxy) count(name, op string) {
	p.statsMu.Lock()
	p.stats[name]++
	if op != "" {
		p.stats[name+"/"+op]++
	}
	p.statsMu.Unlock()
}

// Close stops the proxy: it closes the listener and every client connection, cancels
// requests still waiting or forwarding, and returns once their handlers have returned.
// Calling Close again returns the first call's result.
func (p *Proxy) Close() error {
	p.once.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.cancel()
		p.closeErr = p.srv.Close()
		p.inflight.Wait()
		<-p.serveDone
		p.transport.CloseIdleConnections()
	})
	return p.closeErr
}

// enter registers an in-flight request unless the proxy is closing; Close waits for every
// request that entered.
func (p *Proxy) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.inflight.Add(1)
	return true
}

// ServeHTTP decides the request's fault, if any, and acts on it.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.enter() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	defer p.inflight.Done()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(p.ctx, cancel)
	defer stop()
	r = r.WithContext(ctx)

	op := r.Header.Get("X-Amz-Target")
	conditional := false
	if p.condFault && conditionalWriteOps[op] {
		var err error
		if conditional, err = readCondition(r); err != nil {
			http.Error(w, "faultproxy: read request: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	kind, ok := p.decider.decide(op, conditional)
	if !ok {
		p.forward(w, r, op)
		return
	}
	p.count(kind.String(), op)
	switch kind {
	case Throttle, InternalFailure, ExpiredIterator, ConditionalCheckFailed:
		// Read the request so the connection can be reused, as the service would; it is
		// never forwarded, so a faulted write did not happen.
		_, _ = io.Copy(io.Discard, r.Body)
		writeError(w, kind, op)
	case DropConnection:
		_, _ = io.Copy(io.Discard, r.Body)
		dropConnection(w)
	case Latency:
		t := time.NewTimer(p.latency)
		defer t.Stop()
		select {
		case <-t.C:
			p.forward(w, r, op)
		case <-ctx.Done():
			// The client went away or the proxy is closing. Returning would send an empty
			// 200, which the SDK takes for success, so cut the connection instead.
			dropConnection(w)
		}
	}
}

func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, op string) {
	p.count(StatForwarded, op)
	p.rp.ServeHTTP(w, r)
}

// dropConnection closes the client's TCP connection without writing a response.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2): aborting the handler resets the stream instead.
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// readCondition reads a DynamoDB write request's body, puts it back for forwarding, and
// reports whether the write is conditional.
func readCondition(r *http.Request) (bool, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxConditionBody+1))
	if err != nil {
		return false, err
	}
	if len(body) > maxConditionBody {
		return false, errors.New("body larger than 16 MiB")
	}
	_ = r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(body))
	var in struct {
		ConditionExpression string
		Expected            map[string]json.RawMessage
	}
	if err := json.Unmarshal(body, &in); err != nil {
		// Not valid JSON: let the emulator answer it as the service would.
		return false, nil
	}
	return in.ConditionExpression != "" || len(in.Expected) > 0, nil
}
