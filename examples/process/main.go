// Command process shows Subscriber.Process: a handler that takes 10ms a record (a stand-in for
// a database write) handles 800 account updates from a four-shard stream, 64 at once, while the
// updates of each account are applied one after another, in the order they were published. One
// update fails once and is retried in process; one always fails and goes to the dead-letter
// function after three attempts, and its account goes on.
//
// It runs against kinesistest, the Kinesis server in this module, so it needs no AWS account
// and no emulator: `cd examples && go run ./process`. Against the service, pass
// kinesis.NewFromConfig(cfg) to Subscribe and a DynamoDB lease store (lease.NewDynamoDB).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/kinesistest"
	"github.com/gostream/kinesub/lease"
)

const (
	accounts = 16
	updates  = 800
	stream   = "account-updates"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "process:", err)
		os.Exit(1)
	}
}

func run() error {
	// Ctrl-C (SIGINT) or SIGTERM stops it early, cleanly: Process returns the signal, Close releases
	// the leases, and it exits 0.
	sig, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	ctx, cancel := context.WithTimeout(sig, time.Minute)
	defer cancel()
	srv := kinesistest.NewServer()
	defer srv.Close()
	client := srv.Client()
	if _, err := client.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(4)}); err != nil {
		return err
	}
	if err := publish(ctx, client); err != nil {
		if sig.Err() != nil {
			fmt.Println("interrupted before the updates were published")
			return nil
		}
		return err
	}

	leases := lease.NewMemory() // one process; use lease.NewDynamoDB for several
	sub, err := kinesub.Subscribe(ctx, client, stream,
		kinesub.WithLeaseStore(leases),
		kinesub.WithStartAt(kinesub.Horizon()),
		kinesub.WithPollInterval(50*time.Millisecond))
	if err != nil {
		return err
	}
	defer closeSub(sub)
	go func() {
		for err := range sub.Errors() { // each failed attempt, as a *kinesub.ShardError
			var se *kinesub.ShardError
			var pe *kinesub.ProcessError
			if errors.As(err, &se) && errors.As(err, &pe) {
				fmt.Printf("  %s: attempt %d failed: %v\n", se.Shard, pe.Attempt, pe.Err)
			}
		}
	}()

	l := &ledger{next: map[string]int{}, failed: map[string]bool{}, inOrder: true}
	pctx, stop := context.WithCancelCause(ctx)
	allHandled := errors.New("every update handled")
	start := time.Now()
	err = sub.Process(pctx, func(ctx context.Context, m *kinesub.Message) error {
		if err := l.apply(ctx, m); err != nil {
			return err
		}
		if l.done() == updates {
			stop(allHandled) // Process returns this cause
		}
		return nil
	},
		kinesub.WithConcurrency(64),
		kinesub.WithMaxAttempts(3),
		kinesub.WithRetryBackoff(20*time.Millisecond, time.Second),
		kinesub.WithDeadLetter(func(ctx context.Context, m *kinesub.Message, err error) error {
			fmt.Printf("  dead letter: %s (%v)\n", m.Data(), err)
			l.skip(m)
			if l.done() == updates {
				stop(allHandled)
			}
			return nil // taken: the record counts as handled, its account goes on
		}))
	if sig.Err() != nil { // SIGINT or SIGTERM: Process returned the signal as its ctx's cause
		if err := closeSub(sub); err != nil {
			return err
		}
		held, err := heldLeases(leases)
		fmt.Printf("interrupted after %d of %d updates, checkpoints written; leases still held: %d\n", l.done(), updates, held)
		return err
	}
	if !errors.Is(err, allHandled) {
		return err // the minute ran out, or the subscription ended: Process says why
	}
	took := time.Since(start)
	fmt.Printf("handled %d updates of %d accounts in %v (one at a time: at least %v); per account in order: %v\n",
		updates, accounts, took.Round(time.Millisecond), time.Duration(updates)*10*time.Millisecond, l.inOrder)
	return closeSub(sub)
}

// heldLeases counts the stream's shard leases that have an owner.
func heldLeases(store lease.Store) (int, error) {
	ls, err := store.List(context.Background())
	held := 0
	for _, l := range ls {
		// <stream>/<shard id>: not the stream's bookkeeping rows (heartbeats, the marker row)
		if shard, ok := strings.CutPrefix(l.Key, stream+"/"); ok && strings.HasPrefix(shard, "shardId-") && l.Owner != "" {
			held++
		}
	}
	return held, err
}

// closeSub closes sub, waiting up to 10s for its checkpoints and lease releases; a second call
// does nothing.
func closeSub(sub *kinesub.Subscriber) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return sub.Close(ctx)
}

// publish writes the updates: "<account>/<its update number>", under the account as partition
// key, so that each account's updates are in one shard, in order.
func publish(ctx context.Context, client *kinesis.Client) error {
	pub, err := kinesub.NewPublisher(client, stream)
	if err != nil {
		return err
	}
	recs := make([]kinesub.Record, updates)
	for i := range recs {
		acct := "acct-" + strconv.Itoa(i%accounts)
		recs[i] = kinesub.Record{PartitionKey: acct, Data: fmt.Appendf(nil, "%s/%d", acct, i/accounts)}
	}
	return pub.PublishBatch(ctx, recs)
}

// ledger applies updates and checks that each account's arrive in order, one at a time.
type ledger struct {
	mu      sync.Mutex
	next    map[string]int  // account → the update expected next
	failed  map[string]bool // updates that failed once already
	handled int
	inOrder bool
}

func (l *ledger) apply(ctx context.Context, m *kinesub.Message) error {
	acct, n, _ := strings.Cut(string(m.Data()), "/")
	l.mu.Lock()
	if want := strconv.Itoa(l.next[acct]); n != want {
		l.inOrder = false
	}
	first := !l.failed[string(m.Data())]
	l.failed[string(m.Data())] = true
	l.mu.Unlock()

	select { // the database write
	case <-time.After(10 * time.Millisecond):
	case <-ctx.Done(): // the shard moved on (Seek, lost lease) or Close's drain ended
		return ctx.Err()
	}
	switch string(m.Data()) {
	case "acct-3/7":
		if first {
			return errors.New("database timeout") // retried in process after the backoff
		}
	case "acct-5/20":
		return errors.New("account closed") // never succeeds: dead-lettered after 3 attempts
	}
	l.skip(m)
	return nil
}

// skip moves the account past m.
func (l *ledger) skip(m *kinesub.Message) {
	acct, _, _ := strings.Cut(string(m.Data()), "/")
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next[acct]++
	l.handled++
}

func (l *ledger) done() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.handled
}
