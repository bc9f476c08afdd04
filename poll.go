package kinesub

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"golang.org/x/time/rate"

	"github.com/gostream/kinesub/internal/direct"
	"github.com/gostream/kinesub/internal/kinesisiface"
	"github.com/gostream/kinesub/internal/recordsjson"
)

// quietAfter is how many empty pages in a row at the tip of its shard make a shard quiet: it is
// then polled at the idle poll interval until a page brings records. At the default 1s poll
// interval, a shard is quiet after about 10s without records.
const quietAfter = 10

// Service limits a poller keeps to on its shard.
const (
	getRecordsPerSecond = 5                            // GetRecords calls per second per shard
	bytesPerSecond      = 2 << 20                      // read throughput per shard
	maxResponseBytes    = recordsjson.MaxResponseBytes // the most record data one GetRecords response carries
	bytesBurst          = maxResponseBytes             // the byte budget holds one; reads past it pause the shard
)

// poller reads one shard with GetShardIterator and GetRecords, within the shard's call rate
// and read throughput, and with the SDK's retries off: the reader retries with its own backoff.
type poller struct {
	client  kinesisiface.Kinesis
	stream  streamRef
	shard   string
	timeout time.Duration // of each call (WithRequestTimeout)
	idle    time.Duration // the wait after an empty page (WithPollInterval)
	quiet   time.Duration // the wait after an empty page once the shard is quiet (WithIdlePollInterval)
	direct  *directPath   // GetRecords without the SDK's middleware (WithDirectGetRecords); nil: through the SDK
	strikes int           // direct calls in a row that failed in transport where the SDK's succeeded
	empties int           // empty pages in a row at the tip of the shard
	iter    *string
	calls   *rate.Limiter
	bytes   *rate.Limiter
	paced   bool // pace has waited for the next call's turn
}

func newPoller(client kinesisiface.Kinesis, d *directPath, stream streamRef, shard string, timeout, idle, quiet time.Duration) *poller {
	return &poller{
		client: client, direct: d, stream: stream, shard: shard, timeout: timeout, idle: idle, quiet: max(quiet, idle),
		calls: rate.NewLimiter(getRecordsPerSecond, 1),
		bytes: rate.NewLimiter(bytesPerSecond, bytesBurst),
	}
}

func (p *poller) open(ctx context.Context, at Position) error {
	p.iter, p.empties = nil, 0
	cctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	out, err := p.client.GetShardIterator(cctx, at.iteratorInput(p.stream, p.shard), noRetry, direct.CachedEndpoints)
	if err != nil {
		return &sourceError{op: OpGetShardIterator, err: err}
	}
	p.iter = out.ShardIterator
	return nil
}

// pace waits for the next GetRecords call's turn under the shard's call rate, so that the
// reader sizes the call afterwards, with the room that acks made meanwhile: sized before the
// wait, a call would ask for what was free up to 200 ms earlier, and at 5 calls a second the
// pages it leaves short cap the shard's throughput.
func (p *poller) pace(ctx context.Context) error {
	if p.paced {
		return nil
	}
	if err := p.calls.Wait(ctx); err != nil {
		return &sourceError{op: OpGetRecords, err: err}
	}
	p.paced = true
	return nil
}

func (p *poller) next(ctx context.Context, limit int) (page, error) {
	if err := p.pace(ctx); err != nil {
		return page{}, err
	}
	p.paced = false
	cctx, cancel := context.WithTimeout(ctx, p.timeout)
	out, err := p.getRecords(cctx, &kinesis.GetRecordsInput{ShardIterator: p.iter, Limit: aws.Int32(int32(limit)), StreamARN: p.stream.streamARN()}, limit)
	cancel()
	if err != nil {
		return page{}, &sourceError{op: OpGetRecords, err: err}
	}
	pg := page{records: out.Records, millisBehind: aws.ToInt64(out.MillisBehindLatest), end: out.NextShardIterator == nil}
	for _, c := range out.ChildShards {
		pg.children = append(pg.children, aws.ToString(c.ShardId))
	}
	size := 0
	for i := range out.Records {
		size += len(out.Records[i].Data)
	}
	// A very large read spends the shard's byte budget: the next call waits as the service
	// would otherwise throttle it.
	if size > 0 {
		if res := p.bytes.ReserveN(time.Now(), min(size, bytesBurst)); res.OK() {
			pg.pause = res.Delay()
		}
	}
	// A shard that stays empty at its tip is polled less often; the first record, or a page
	// behind the tip (a reopened iterator, a backlog), ends the quiet spell.
	switch {
	case len(out.Records) > 0 || pg.millisBehind > 0 || pg.end:
		p.empties = 0
	case p.empties < quietAfter:
		p.empties++
	}
	if len(out.Records) == 0 && !pg.end {
		pg.quiet = p.empties >= quietAfter && p.quiet > p.idle
		if pg.quiet {
			pg.pause = max(pg.pause, p.quiet)
		} else {
			pg.pause = max(pg.pause, p.idle)
		}
	}
	p.iter = out.NextShardIterator
	return pg, nil
}

// getRecords makes one GetRecords call: directly while the direct path serves this poller,
// through the SDK otherwise. A direct call that got no answer (a transport error, a body cut
// short) is made again through the SDK; one the direct path cannot make or answer as the SDK
// does sends this call (when nothing came back) and every later one through the SDK.
func (p *poller) getRecords(ctx context.Context, in *kinesis.GetRecordsInput, limit int) (*kinesis.GetRecordsOutput, error) {
	d := p.direct
	if d == nil {
		return p.viaSDK(ctx, in, limit)
	}
	out, fb, err := d.records.GetRecords(ctx, in, limit)
	switch {
	case fb.Reason == "":
		p.strikes = 0
		return out, err
	case ctx.Err() != nil:
		// The call's time ran out, which is no reason to leave the direct path: the SDK
		// answers what it answers for an ended context.
		if fb.Again {
			return p.viaSDK(ctx, in, limit)
		}
		return nil, err
	}
	d.fellBack(ctx, p.shard, fb, err)
	if fb.ForGood {
		p.direct = nil
	}
	if !fb.Again {
		return nil, err
	}
	out, err = p.viaSDK(ctx, in, limit)
	if !fb.ForGood && err == nil {
		// The SDK's path reached the service where the direct one did not: after a few in a
		// row, the direct path is what fails here (its HTTP client, its connection), not the
		// network, and this reader keeps to the SDK.
		if p.strikes++; p.strikes >= directStrikes {
			p.direct, p.strikes = nil, 0
			d.gaveUp(p.shard, fb.Reason)
		}
	}
	return out, err
}

// viaSDK makes one GetRecords call through the SDK.
func (p *poller) viaSDK(ctx context.Context, in *kinesis.GetRecordsInput, limit int) (*kinesis.GetRecordsOutput, error) {
	return p.client.GetRecords(ctx, in, noRetry, recordsjson.UpTo(limit), direct.CachedEndpoints)
}

// directStrikes is how many direct calls in a row a poller makes again through the SDK, for
// failing in transport where the SDK's succeeded, before it sends its calls through the SDK
// for good.
const directStrikes = 3

// directPath is a subscriber's direct GetRecords path (WithDirectGetRecords), shared by its
// pollers, and where they report falling back to the SDK's path: the metric
// kinesub.getrecords.fallbacks, and a log line at Warn for the first fallback of each reason.
// It is safe for concurrent use.
type directPath struct {
	records *direct.Records
	metrics *metrics
	log     *slog.Logger

	mu     sync.Mutex
	logged map[string]bool // reasons logged
}

// newDirectPath returns the direct path for client when cfg asks for it (nil otherwise), or
// an error naming WithDirectGetRecords and what in the client's options it does not
// reproduce.
func newDirectPath(cfg *config, client kinesisiface.Kinesis, m *metrics, log *slog.Logger) (*directPath, error) {
	if !cfg.directGetRecords {
		return nil, nil
	}
	var record direct.Recorder
	if m != nil && m.req != nil {
		record = m.req.Record
	}
	d, err := direct.New(client, record)
	if err != nil {
		return nil, optionError("WithDirectGetRecords", "", err.Error()+"; without the option, GetRecords goes through the SDK's request path")
	}
	return &directPath{records: d, metrics: m, log: log, logged: map[string]bool{}}, nil
}

// fellBack counts a call of shard's handed to the SDK's path, and logs the first of its reason.
func (d *directPath) fellBack(ctx context.Context, shard string, fb direct.Fallback, err error) {
	d.metrics.getRecordsFallback(ctx, fb.Reason)
	if d.first(fb.Reason) {
		d.log.Warn("GetRecords fell back to the SDK's request path (WithDirectGetRecords); later fallbacks of this reason are counted in kinesub.getrecords.fallbacks, not logged",
			"reason", fb.Reason, logShard, shard, "call_again", fb.Again, "reader_keeps_to_sdk", fb.ForGood, "err", err)
	}
}

// gaveUp logs, once, a reader that keeps to the SDK's path after repeated fallbacks.
func (d *directPath) gaveUp(shard, reason string) {
	if d.first("repeated " + reason) {
		d.log.Warn("GetRecords: direct calls keep failing where the SDK's succeed; this shard's reader sends its calls through the SDK from now on",
			"reason", reason, "in_a_row", directStrikes, logShard, shard)
	}
}

func (d *directPath) first(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.logged[key] {
		return false
	}
	d.logged[key] = true
	return true
}

func (p *poller) close() {}
