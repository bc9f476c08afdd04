// Command admin-seek consumes a Kinesis stream, prints every record, and serves
// kinesub.SeekHandler so that an operator can move the subscription while it runs:
//
//	curl -X POST --data horizon http://127.0.0.1:8080/seek          # replay everything retained
//	curl -X POST --data latest http://127.0.0.1:8080/seek           # skip to the tip
//	curl -X POST 'http://127.0.0.1:8080/seek?to=timestamp:2026-12-02T10:00:00Z'
//	curl -X POST --data sequence:shardId-000000000000:49590338271490256608559692538361571095921575989136588898 \
//	    http://127.0.0.1:8080/seek                                  # one shard, from that record
//
// and shows what this instance sees of each shard (reading here, leased elsewhere, waiting for
// a parent, finished; last delivered and checkpointed sequence numbers, lag):
//
//	curl http://127.0.0.1:8080/shards
//
// A 204 means the seek is done; see kinesub.SeekHandler for the other answers (409 means
// another instance holds that shard: ask it instead).
//
// It takes the standard AWS configuration from the environment (AWS_REGION, credentials,
// AWS_ENDPOINT_URL_KINESIS and AWS_ENDPOINT_URL_DYNAMODB). Against the local servers:
//
//	scripts/emulators.sh up && eval "$(scripts/emulators.sh env)"
//	cd examples && go run ./admin-seek -stream orders -table orders-leases -create 2
//
// The seek endpoint has no authentication, so it listens on a loopback address only.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/lease"
)

func main() {
	stream := flag.String("stream", "", "the Kinesis stream to consume (required)")
	table := flag.String("table", "", "the DynamoDB lease table, created if missing (required)")
	addr := flag.String("addr", "127.0.0.1:8080", "loopback address to serve /seek on")
	create := flag.Int("create", 0, "create the stream with this many shards if it does not exist")
	flag.Parse()
	if *stream == "" || *table == "" {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A signal ends run cleanly (nil). run has closed what it opened when it returns.
	if err := run(ctx, *stream, *table, *addr, *create); err != nil {
		log.Fatal(err)
	}
	log.Print("stopped")
}

func run(ctx context.Context, stream, table, addr string, create int) error {
	if err := checkLoopback(addr); err != nil {
		return err
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return fmt.Errorf("load AWS config: %w", err)
	}
	store := lease.NewDynamoDB(dynamodb.NewFromConfig(cfg), table)
	if err := store.EnsureTable(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // a signal while starting: nothing to release
		}
		return err
	}
	opts := []kinesub.Option{kinesub.WithLeaseStore(store)}
	if create > 0 {
		opts = append(opts, kinesub.WithCreateIfMissing(create))
	}
	sub, err := kinesub.Subscribe(ctx, kinesis.NewFromConfig(cfg), stream, opts...)
	if err != nil {
		if ctx.Err() != nil {
			return nil // a signal while starting: Subscribe released what it took
		}
		return err
	}

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = sub.Close(context.Background())
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/seek", kinesub.SeekHandler(sub.Seeker()))
	mux.HandleFunc("GET /shards", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(sub.Shards())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Printf("seek endpoint: %v", err)
		}
	}()
	log.Printf("consuming %s; seek with: curl -X POST --data horizon http://%s/seek", stream, ln.Addr())

	go func() {
		for err := range sub.Errors() {
			log.Printf("warning: %v", err)
		}
	}()
	for m := range sub.Messages() {
		fmt.Printf("%s %s %s %q\n", m.ShardID(), m.SequenceNumber(), m.PartitionKey(), m.Data())
		if err := m.Ack(ctx); err != nil && ctx.Err() == nil {
			log.Printf("ack: %v", err)
		}
	}
	// Messages closes after ctx ends (Subscribe's ctx: a signal) or a fatal error.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	failed := sub.Err()
	if errors.Is(failed, kinesub.ErrSubscriptionEnded) && ctx.Err() != nil {
		failed = nil // the signal: the normal stop, with the leases released
	}
	return errors.Join(failed, sub.Close(sctx))
}

// checkLoopback refuses to serve the unauthenticated endpoint beyond this machine.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-addr %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-addr %q: the seek endpoint has no authentication; serve it on a loopback address", addr)
	}
	return nil
}
