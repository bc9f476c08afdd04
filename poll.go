package kinesub

import (
	"context"
	"errors"
	"github.com/gostream/kinesub/internal/recordsjson"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"golang.org/x/time/rate"

	"github.com/gostream/kinesub/internal/kinesisiface"
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
	timeout time.Duration  // of each call (WithRequestTimeout)
	idle    time.Duration  // the wait after an empty page (WithPollInterval)
	quiet   time.Duration  // the wait after an empty page once the shard is quiet (WithIdlePollInterval)
	direct  *directRecords // GetRecords without the SDK's middleware (direct.go); nil: through the SDK
	empties int            // empty pages in a row at the tip of the shard
	iter    *string
	calls   *rate.Limiter
	bytes   *rate.Limiter
	paced   bool // pace has waited for the next call's turn
}

func newPoller(client kinesisiface.Kinesis, direct *directRecords, stream streamRef, shard string, timeout, idle, quiet time.Duration) *poller {
	return &poller{
		client: client, direct: direct, stream: stream, shard: shard, timeout: timeout, idle: idle, quiet: max(quiet, idle),
		calls: rate.NewLimiter(getRecordsPerSecond, 1),
		bytes: rate.NewLimiter(bytesPerSecond, bytesBurst),
	}
}

func (p *poller) open(ctx context.Context, at Position) error {
	p.iter, p.empties = nil, 0
	cctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	out, err := p.client.GetShardIterator(cctx, at.iteratorInput(p.stream, p.shard), noRetry, cachedEndpoints)
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
// through the SDK otherwise.
func (p *poller) getRecords(ctx context.Context, in *kinesis.GetRecordsInput, limit int) (*kinesis.GetRecordsOutput, error) {
	if d := p.direct; d != nil {
		out, useSDK, err := d.getRecords(ctx, in, limit)
		if useSDK {
			p.direct = nil
		}
		if !errors.Is(err, errUseSDK) {
			return out, err
		}
	}
	return p.client.GetRecords(ctx, in, noRetry, recordsjson.UpTo(limit), cachedEndpoints)
}

func (p *poller) close() {}
