// Command chaos checks kinesub's failover across processes: it starts several consumer
// processes (cmd/chaos/consumer) that share one stream through a DynamoDB lease table,
// publishes records with per-key counters, kill -9s a random consumer several times while they
// read (each replaced by a process with a new owner name, so its leases are taken over only
// when they expire, as after a real crash), stops the rest with SIGTERM, and checks the
// consumers' logs:
//
//   - no record is lost: every published record was delivered and logged before its ack;
//   - every duplicate was first delivered by a process that was killed, or whose lease was
//     taken over, before its checkpoint passed the record;
//   - each lease tenure resumes right after the checkpoint it took over and reads on without a
//     gap, and per partition key the counters rise by one;
//   - no takeover resumes before a checkpoint already written;
//   - no shard is read by two processes at once for longer than one renewal period (TTL/3);
//   - after the survivors close, every lease is released at its shard's newest record.
//
// With -process the consumers handle records with Subscriber.Process, 64 at once, so a lease
// tenure no longer logs its shard's records in sequence order; the check that a tenure reads
// on without a gap is replaced by Process's promise: per partition key, no record is handled
// (first logged) before the one before it was first handled.
//
// With -deploy it kills nothing: under a producer publishing steadily, it runs rolling deploys
// (-deploys of them, three by default), each restarting every consumer once, one at a time, as
// an orchestrator does: SIGTERM, whose handler calls Close and exits; a new process started as
// soon as the old one exited; the next restart once every shard is held evenly and read again.
// The same checks apply (a record delivered again after a clean release is a violation), and it
// measures, per shard and deploy, the longest gap from the last record one owner read to the
// first the next owner read (p50, p99, max), and counts records acknowledged before a handoff
// and delivered again. Its defaults are the library's lease TTL (10s) and checkpoint interval
// (5s), as a service deploys with; -ttl and -checkpoint override them.
//
// With -effects sink (or plain) every record's effect is to add one to a DynamoDB counter of
// its own, through dynamosink (or with a plain UpdateItem), from Process handlers; once the
// consumers stopped, the run counts the records whose effect was applied more than once, and
// never. Through dynamosink both must be 0; the plain handler applies again what a killed
// process applied and did not checkpoint.
//
// It prints the lost and duplicated counts and the takeover times (or the deploy figures), and
// exits 1 on a violation; -json prints the report as JSON instead.
// It runs only against local emulators (`make chaos` starts them) and refuses any endpoint
// not on loopback.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub/internal/testenv"
)

func main() {
	cfg := DefaultConfig()
	flag.IntVar(&cfg.Records, "records", cfg.Records, "records to publish")
	flag.IntVar(&cfg.Keys, "keys", cfg.Keys, "partition keys")
	var shards int
	flag.IntVar(&shards, "shards", int(cfg.Shards), "shards of the stream")
	flag.IntVar(&cfg.Consumers, "consumers", cfg.Consumers, "consumer processes running at once")
	flag.IntVar(&cfg.Kills, "kills", cfg.Kills, "kill -9s while publishing")
	flag.IntVar(&cfg.Rate, "rate", cfg.Rate, "records published per second")
	flag.DurationVar(&cfg.TTL, "ttl", cfg.TTL, "lease TTL of the consumers")
	flag.DurationVar(&cfg.Checkpoint, "checkpoint", cfg.Checkpoint, "checkpoint interval of the consumers")
	flag.DurationVar(&cfg.Slack, "slack", cfg.Slack, "allowed beyond the protocol's takeover bound after a kill (two processes never read one shard at once: no slack for that)")
	flag.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "wait for every record after publishing")
	flag.Uint64Var(&cfg.Seed, "seed", 0, "seed of kill times and victims (0: random)")
	flag.StringVar(&cfg.Dir, "dir", "", "directory for logs (default: a new temporary one)")
	flag.BoolVar(&cfg.Race, "race", false, "build the consumer with the race detector")
	flag.BoolVar(&cfg.Process, "process", false, "consumers handle records with Subscriber.Process, many at once")
	flag.StringVar(&cfg.Effects, "effects", "", `with "sink" or "plain", consumers (with Process) add one to a DynamoDB counter per record, through dynamosink or with a plain UpdateItem, and the report counts effects applied twice and lost`)
	deploy := flag.Bool("deploy", false, "rolling deploys under a steady producer instead of kill -9s (its defaults: -records 1000000 as a cap, -rate 500, -ttl 10s, -checkpoint 5s, -kills 0)")
	deploys := flag.Int("deploys", DefaultDeployConfig().Deploys, "rolling deploys with -deploy, each restarting every consumer once")
	flag.DurationVar(&cfg.StartDelay, "start-delay", 0, "with -deploy, time from a consumer's exit until its replacement starts")
	asJSON := flag.Bool("json", false, "print the report as JSON")
	verbose := flag.Bool("v", true, "print progress")
	flag.Parse()
	cfg.Shards = int32(shards)
	if *deploy {
		cfg.Deploys = *deploys
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		d := DefaultDeployConfig()
		// The deploy defaults, where no flag says otherwise.
		if !set["records"] {
			cfg.Records = d.Records
		}
		if !set["rate"] {
			cfg.Rate = d.Rate
		}
		if !set["kills"] {
			cfg.Kills = d.Kills
		}
		if !set["ttl"] {
			cfg.TTL = d.TTL
		}
		if !set["checkpoint"] {
			cfg.Checkpoint = d.Checkpoint
		}
	}
	if *verbose {
		cfg.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}
	if err := cfg.check(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	kc, dc, err := clients()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := Run(ctx, cfg, kc, dc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	if *asJSON {
		err = json.NewEncoder(os.Stdout).Encode(rep)
	} else {
		_, err = fmt.Print(rep)
		if err == nil && rep.Effects != nil {
			_, err = fmt.Print(rep.Effects)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	if len(rep.Violations) > 0 {
		os.Exit(1)
	}
}

// check rejects a configuration the run cannot carry out.
func (c Config) check() error {
	switch {
	case c.Records < 1 || c.Keys < 1 || c.Keys > 99999 || c.Shards < 1 || c.Consumers < 1 || c.Kills < 0 || c.Rate < 1 || c.Deploys < 0:
		return fmt.Errorf("records, keys (up to 99999), shards, consumers and rate must be positive, kills and deploys not negative")
	case c.Deploys > 0 && c.Kills > 0:
		return fmt.Errorf("a run either kills (-kills) or deploys (-deploy), not both")
	case c.TTL <= 0 || c.Checkpoint < 0 || c.Timeout <= 0:
		return fmt.Errorf("ttl and timeout must be positive, checkpoint not negative")
	case c.Effects != "" && c.Effects != EffectsSink && c.Effects != EffectsPlain:
		return fmt.Errorf("effects must be %q or %q, not %q", EffectsSink, EffectsPlain, c.Effects)
	case c.Effects != "" && c.Deploys > 0:
		return fmt.Errorf("effects are counted in runs of kills, not of deploys")
	}
	return nil
}

// clients connects to the local emulators named by the SDK's endpoint variables.
func clients() (*kinesis.Client, *dynamodb.Client, error) {
	for _, v := range []string{testenv.KinesisEndpointVar, testenv.DynamoDBEndpointVar} {
		if err := testenv.CheckLoopback(os.Getenv(v)); err != nil {
			return nil, nil, fmt.Errorf("%s: %v; run `make chaos`, which starts local servers and sets it", v, err)
		}
	}
	cfg, err := config.LoadDefaultConfig(context.Background(), config.WithRegion(region()))
	if err != nil {
		return nil, nil, err
	}
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
		cfg.Credentials = aws.AnonymousCredentials{}
	}
	return kinesis.NewFromConfig(cfg), dynamodb.NewFromConfig(cfg), nil
}

func region() string {
	if r := os.Getenv("AWS_REGION"); r != "" {
		return r
	}
	return "us-east-1" // the emulators accept any
}
