package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	consumer "github.com/harlow/kinesis-consumer"
	memory "github.com/harlow/kinesis-consumer/store/memory"
)

// harlowVersion is the version of the peer consumer in go.mod.
const harlowVersion = "v0.5.0"

// harlowPass reads every record with github.com/harlow/kinesis-consumer, the Go consumer most
// users pick, configured as close to the kinesub passes as it allows: from the oldest record,
// pages of up to pageRecords, checkpoints in its memory store (which it writes after every record).
// It waits scan between two GetRecords calls on a shard, whether or not the first returned
// records. Its Scan calls back once per record on one goroutine per shard.
func harlowPass(ctx context.Context, client *kinesis.Client, stream string, n int, scan time.Duration) (pass, error) {
	runtime.GC()
	store := memory.New()
	c, err := consumer.New(stream,
		consumer.WithClient(client),
		consumer.WithStore(store),
		consumer.WithShardIteratorType("TRIM_HORIZON"),
		consumer.WithMaxRecords(int64(pageRecords)),
		consumer.WithScanInterval(scan))
	if err != nil {
		return pass{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, passTimeout)
	defer cancel()
	scanCtx, stop := context.WithCancel(ctx)
	defer stop()
	var got atomic.Int64
	start, cpu0 := time.Now(), cpuTime()
	err = c.Scan(scanCtx, func(*consumer.Record) error {
		if got.Add(1) == int64(n) {
			stop()
		}
		return nil
	})
	p := pass{wall: time.Since(start), cpu: cpuTime() - cpu0, records: int(got.Load())}
	if err != nil && !errors.Is(err, context.Canceled) {
		return p, err
	}
	if p.records < n {
		return p, fmt.Errorf("read %d records, want %d (%v)", p.records, n, ctx.Err())
	}
	return p, nil
}
