// Command consumer is the process that the chaos driver (cmd/chaos) starts, kills and restarts:
// it subscribes to one stream with leases in a DynamoDB table and logs every delivered record,
// every lease event and every checkpoint to its log file (see package chaoslog).
//
// A record is acknowledged only after its log line was handed to the operating system, so a
// record whose checkpoint was written is always in some log, even after kill -9; each ack is
// logged too, once Ack returned (those lines may be cut by kill -9). SIGTERM (or SIGINT) closes
// the subscription, as an orchestrator's stop does: Close settles what was handed out, writes
// the final checkpoints and releases the leases, and the process exits.
//
// With -process it handles records with Subscriber.Process instead of a Messages loop: 64
// handlers at once, each logging its record as it starts, taking up to 2ms (a stand-in for a
// service's I/O), flushing the log, logging the ack and returning nil, which acks the record.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/cmd/chaos/internal/chaoslog"
	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/lease"
)

// maxBatch bounds the deliveries logged before one flush and their acks.
const maxBatch = 512

func main() {
	var (
		stream     = flag.String("stream", "", "stream to consume")
		table      = flag.String("table", "", "DynamoDB lease table")
		owner      = flag.String("owner", "", "lease owner name, unique per process")
		logPath    = flag.String("log", "", "log file to append to")
		ttl        = flag.Duration("ttl", 1500*time.Millisecond, "lease TTL")
		poll       = flag.Duration("poll", 100*time.Millisecond, "poll interval of an idle shard")
		sync       = flag.Duration("sync", time.Second, "shard list refresh interval")
		checkpoint = flag.Duration("checkpoint", 200*time.Millisecond, "checkpoint interval")
		process    = flag.Bool("process", false, "handle records with Subscriber.Process")
		effects    = flag.String("effects", "", `with Process, apply each record's effect to -effects-table: "sink" through dynamosink (marks in -marks-table), "plain" with an UpdateItem`)
		effTable   = flag.String("effects-table", "", "DynamoDB table of the effects (-effects)")
		marksTable = flag.String("marks-table", "", "dynamosink's mark table (-effects sink)")
	)
	flag.Parse()
	if *stream == "" || *table == "" || *owner == "" || *logPath == "" {
		fmt.Fprintln(os.Stderr, "consumer: -stream, -table, -owner and -log are required")
		os.Exit(2)
	}
	log, err := chaoslog.Create(*logPath, *owner)
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
	eff := effectsConfig{mode: *effects, table: *effTable, marks: *marksTable}
	err = run(log, *stream, *table, *process, eff,
		kinesub.WithOwner(*owner),
		kinesub.WithLeaseTTL(*ttl),
		kinesub.WithPollInterval(*poll),
		kinesub.WithShardSyncInterval(*sync),
		kinesub.WithCheckpointInterval(*checkpoint),
		kinesub.WithLogger(slog.New(&eventHandler{log: log})),
	)
	if err != nil {
		_ = log.Event("exit", map[string]string{"err": err.Error()})
	} else {
		_ = log.Event("exit", nil)
	}
	if cerr := log.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

func run(log *chaoslog.Writer, stream, table string, process bool, eff effectsConfig, opts ...kinesub.Option) error {
	for _, v := range []string{testenv.KinesisEndpointVar, testenv.DynamoDBEndpointVar} {
		if err := testenv.CheckLoopback(os.Getenv(v)); err != nil {
			return fmt.Errorf("%s: %w", v, err)
		}
	}
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region()))
	if err != nil {
		return err
	}
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
		cfg.Credentials = aws.AnonymousCredentials{}
	}
	db := dynamodb.NewFromConfig(cfg)
	store := lease.NewDynamoDB(db, table)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = store.EnsureTable(sctx)
	cancel()
	if err != nil {
		return err
	}
	// The subscription lives as long as Subscribe's ctx: SIGTERM ends it through Close.
	sub, err := kinesub.Subscribe(ctx, kinesis.NewFromConfig(cfg), stream, append(opts, kinesub.WithLeaseStore(store))...)
	if err != nil {
		return err
	}
	_ = log.Event("subscribed", map[string]string{"pid": fmt.Sprint(os.Getpid())})

	go func() {
		for err := range sub.Errors() {
			_ = log.Event("error", map[string]string{"err": err.Error()})
		}
	}()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	closed := make(chan error, 1)
	go func() {
		<-stop
		_ = log.Event("closing", nil)
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		closed <- sub.Close(ctx)
	}()

	if eff.mode != "" {
		handle, err := eff.handler(log, db)
		if err != nil {
			return err
		}
		return processWith(sub, closed, handle)
	}
	if process {
		return processRecords(log, sub, closed)
	}
	// Log each delivery, then flush the lines and only then ack them: a checkpoint can never
	// pass a record whose line could still be lost.
	var pending []*kinesub.Message
	settle := func() error {
		if len(pending) == 0 {
			return nil
		}
		if err := log.Flush(); err != nil {
			return err
		}
		for _, m := range pending {
			switch err := m.Ack(ctx); {
			case errors.Is(err, kinesub.ErrAckedLate):
				// The shard's reading ended first: no checkpoint moved, the record comes again.
				_ = log.Event("acked_late", map[string]string{"shard": m.ShardID(), "seq": m.SequenceNumber()})
				continue
			case err != nil:
				return err
			}
			log.Ack(m.ShardID(), m.SequenceNumber())
		}
		pending = pending[:0]
		return nil
	}
	msgs := sub.Messages()
	for m := range msgs {
		log.Delivery(m.ShardID(), m.SequenceNumber(), m.PartitionKey(), m.Data())
		pending = append(pending, m)
		// Take what is ready without waiting, so one flush covers a burst.
	burst:
		for len(pending) < maxBatch {
			select {
			case m, ok := <-msgs:
				if !ok {
					break burst
				}
				log.Delivery(m.ShardID(), m.SequenceNumber(), m.PartitionKey(), m.Data())
				pending = append(pending, m)
			default:
				break burst
			}
		}
		if err := settle(); err != nil {
			return err
		}
	}
	if err := settle(); err != nil {
		return err
	}
	if err := sub.Err(); err != nil {
		return err // the subscription failed on its own
	}
	return <-closed
}

// processRecords handles the records with Process until the subscription is closed: each
// handler logs its record first thing (the verifier takes a record's first line as when it was
// first handled), works up to 2ms, and flushes the log before it returns nil, which acks the
// record.
func processRecords(log *chaoslog.Writer, sub *kinesub.Subscriber, closed <-chan error) error {
	return processWith(sub, closed, func(ctx context.Context, m *kinesub.Message) error {
		log.Delivery(m.ShardID(), m.SequenceNumber(), m.PartitionKey(), m.Data())
		t := time.NewTimer(time.Duration(rand.N(2000)) * time.Microsecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		if err := log.Flush(); err != nil {
			return err
		}
		log.Ack(m.ShardID(), m.SequenceNumber()) // returning nil acks it
		return nil
	})
}

// processWith runs handle with Process, 64 at once, until the subscription is closed.
func processWith(sub *kinesub.Subscriber, closed <-chan error, handle func(context.Context, *kinesub.Message) error) error {
	err := sub.Process(context.Background(), handle, kinesub.WithConcurrency(64))
	if !errors.Is(err, kinesub.ErrClosed) {
		return err // the subscription failed on its own
	}
	return <-closed
}

// eventHandler writes the subscriber's lease events (Info and above) and its checkpoint writes
// (Debug "checkpoint") to the log, each with its attributes.
type eventHandler struct {
	log   *chaoslog.Writer
	attrs []slog.Attr
}

func (h *eventHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *eventHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelInfo && r.Message != "checkpoint" {
		return nil
	}
	attrs := make(map[string]string, len(h.attrs)+r.NumAttrs())
	for _, a := range h.attrs {
		attrs[a.Key] = a.Value.Resolve().String()
	}
	r.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.Resolve().String()
		return true
	})
	attrs["level"] = r.Level.String()
	return h.log.Event(r.Message, attrs)
}

func (h *eventHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &eventHandler{log: h.log, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

// WithGroup is not needed: the subscriber logs no groups.
func (h *eventHandler) WithGroup(string) slog.Handler { return h }

func region() string {
	if r := os.Getenv("AWS_REGION"); r != "" {
		return r
	}
	return "us-east-1" // the emulators accept any
}
