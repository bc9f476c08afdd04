// Command service is the plain service loop: consume a stream with the shard leases in a
// DynamoDB table (so several instances share the shards), handle each record, acknowledge it,
// and shut down cleanly on SIGINT or SIGTERM (checkpoints written, leases released, so the
// other instances take the shards over within about a second). It serves kinesub's
// OpenTelemetry metrics in the Prometheus format on /metrics (see the README, "Metrics").
//
//	cd examples && go run ./service -stream orders -table orders-leases -metrics :9464
//
// It uses the standard AWS configuration (environment, shared config, instance role).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/lease"
)

func main() {
	stream := flag.String("stream", "orders", "Kinesis stream to consume")
	table := flag.String("table", "orders-leases", "DynamoDB lease table (created if missing)")
	metricsAddr := flag.String("metrics", ":9464", "address to serve Prometheus metrics on (/metrics)")
	flag.Parse()
	// Errors end run, whose deferred calls (Close, the metrics' shutdown) run before the exit.
	if err := run(*stream, *table, *metricsAddr); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

// run consumes until SIGINT or SIGTERM (nil: the normal stop) or a fatal error.
func run(stream, table, metricsAddr string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	leases := lease.NewDynamoDB(dynamodb.NewFromConfig(cfg), table)
	if err := leases.EnsureTable(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // a signal while starting: nothing to release
		}
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	meters, err := serveMetrics(metricsAddr, logger)
	if err != nil {
		return err
	}
	defer meters.Shutdown(context.Background())
	sub, err := kinesub.Subscribe(context.Background(), kinesis.NewFromConfig(cfg), stream,
		kinesub.WithLeaseStore(leases), kinesub.WithLogger(logger), kinesub.WithMeterProvider(meters))
	if err != nil {
		return err
	}
	// A signal closes the subscription: checkpoints written, leases released, then Messages
	// closed, which ends the loop below. So does a fatal error, after which run stops ctx
	// itself: either way run waits for Close.
	closed := make(chan error, 1)
	go func() {
		<-ctx.Done()
		closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		closed <- sub.Close(closeCtx)
	}()
	go func() { // ends when Close closes Errors
		for err := range sub.Errors() {
			logger.Warn("kinesub", "err", err)
		}
	}()
	for msg := range sub.Messages() {
		handle(msg)
		if err := msg.Ack(context.Background()); err != nil {
			logger.Error("ack", "err", err)
		}
	}
	failed := sub.Err() // nil when Close ended the subscription
	stop()
	if err := <-closed; err != nil {
		return errors.Join(failed, fmt.Errorf("close: %w", err))
	}
	if failed == nil {
		logger.Info("stopped: checkpoints written, leases released")
	}
	return failed
}

func handle(msg *kinesub.Message) {
	log.Printf("%s %s %s: %s", msg.ShardID(), msg.SequenceNumber(), msg.PartitionKey(), msg.Data())
}

// serveMetrics returns a MeterProvider whose metrics are served in the Prometheus format on
// addr's /metrics. An application that installs it globally (otel.SetMeterProvider) need not
// pass kinesub.WithMeterProvider: kinesub uses the global provider by default.
func serveMetrics(addr string, logger *slog.Logger) (*sdkmetric.MeterProvider, error) {
	exporter, err := otelprom.New()
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.Handler())
	go func() { // lives as long as the process
		if err := http.ListenAndServe(addr, mux); err != nil {
			logger.Error("metrics server", "err", err)
		}
	}()
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)), nil
}
