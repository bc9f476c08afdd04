// Command kinesub carries another consumer's checkpoints into a kinesub lease table, so that a
// team moving to kinesub resumes where its old consumer stopped instead of reprocessing the
// stream's retention window:
//
//	kinesub import-kcl    -from <KCL lease table>     -stream <name> -to <kinesub table>
//	kinesub import-harlow -from <harlow table> -app <app name> -stream <name> -to <kinesub table>
//	kinesub import-crate  -from <crate lease table>   -stream <name> -to <kinesub table> [-legacy]
//
// Each wraps an importer of package lease (Importer.KCL, Importer.Harlow, Importer.Crate). Flags
// common to all: -dry-run (report, write nothing), -force (import although the KCL's workers
// or the crate's instances look live), -overwrite (replace the checkpoint of a shard whose
// kinesub lease is held), -move-back (replace a kinesub checkpoint that is ahead of the
// imported one: by default it is kept, so importing again after kinesub has read on delivers
// nothing again), -json. import-kcl also takes -watch (default 10s), -at-timestamp (RFC 3339,
// for AT_TIMESTAMP rows) and -stream-id (account:stream:creationEpoch, for a multi-stream
// table).
//
// Before anything is read or watched the command checks that the stream exists (Kinesis
// DescribeStreamSummary) and that the source table holds rows of it; a refusal names the
// streams the table holds. The report shows, per shard, the source's checkpoint, the kinesub
// lease's before the import and the one imported, as positions ParsePosition reads.
//
// The region, the credentials and the endpoints come from the standard AWS environment
// (AWS_REGION, AWS_PROFILE, AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_KINESIS…); -endpoint
// overrides the DynamoDB endpoint. The kinesub table is created when missing. Stop the old
// consumer first: the import refuses while the KCL's workers renew their leases, or a crate
// lease has not expired.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub/lease"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "kinesub:", err)
		}
		os.Exit(1)
	}
}

const usage = "usage: kinesub import-kcl|import-harlow|import-crate -from <table> -stream <name> -to <kinesub table> [flags]"

// run carries out one command; main only wires it to the process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return flag.ErrHelp
	}
	cmd := args[0]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "the source table")
	to := fs.String("to", "", "the kinesub lease table (created when missing)")
	stream := fs.String("stream", "", "the stream name")
	endpoint := fs.String("endpoint", "", "DynamoDB endpoint URL (default: from the AWS environment)")
	dryRun := fs.Bool("dry-run", false, "report what would be written, write nothing")
	force := fs.Bool("force", false, "import although the KCL's workers or the crate's instances look live")
	overwrite := fs.Bool("overwrite", false, "replace checkpoints of shards whose kinesub lease is held")
	moveBack := fs.Bool("move-back", false, "replace kinesub checkpoints that are ahead of the imported ones (default: keep them)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	var app, streamID, at string
	var watch time.Duration
	var legacy bool
	switch cmd {
	case "import-kcl":
		fs.DurationVar(&watch, "watch", 10*time.Second, "how long to watch the KCL's lease counters for live workers")
		fs.StringVar(&streamID, "stream-id", "", "multi-stream identifier account:stream:creationEpoch")
		fs.StringVar(&at, "at-timestamp", "", "RFC 3339 instant the KCL's AT_TIMESTAMP checkpoints stand for")
	case "import-harlow":
		fs.StringVar(&app, "app", "", "harlow's application name (rows are namespaced <app>-<stream>)")
	case "import-crate":
		fs.BoolVar(&legacy, "legacy", false, "also read rows keyed by the bare shard id (crate 0.6)")
	default:
		fmt.Fprintln(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *from == "" || *to == "" || *stream == "" || (cmd == "import-harlow" && app == "") {
		fs.Usage()
		return errors.New("-from, -to and -stream are required (and -app for import-harlow)")
	}
	opts := []lease.ImportOption{lease.WithWatch(watch), lease.WithProgress(stderr)}
	if *dryRun {
		opts = append(opts, lease.WithDryRun())
	}
	if *force {
		opts = append(opts, lease.WithForce())
	}
	if *overwrite {
		opts = append(opts, lease.WithOverwrite())
	}
	if *moveBack {
		opts = append(opts, lease.WithMoveBack())
	}
	if streamID != "" {
		opts = append(opts, lease.WithKCLStreamIdentifier(streamID))
	}
	if at != "" {
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return fmt.Errorf("-at-timestamp: %w", err)
		}
		opts = append(opts, lease.WithAtTimestamp(t))
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return fmt.Errorf("AWS configuration: %w", err)
	}
	client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if *endpoint != "" {
			o.BaseEndpoint = aws.String(*endpoint)
		}
	})
	opts = append(opts, lease.WithStreamCheck(kinesis.NewFromConfig(cfg)))
	var dst lease.Store = lease.NewDynamoDB(client, *to)
	if !*dryRun {
		if err := dst.(*lease.DynamoDB).EnsureTable(ctx); err != nil {
			return err
		}
	} else if _, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: to}); err != nil {
		var missing *types.ResourceNotFoundException
		if !errors.As(err, &missing) {
			return fmt.Errorf("describe %s: %w", *to, err)
		}
		dst = lease.NewMemory() // a dry run into a table not yet created: every lease is absent
	}
	imp := lease.NewImporter(opts...)
	var rep lease.ImportReport
	switch cmd {
	case "import-kcl":
		rep, err = imp.KCL(ctx, client, *from, *stream, dst)
	case "import-harlow":
		rep, err = imp.Harlow(ctx, client, *from, app, *stream, dst)
	case "import-crate":
		rep, err = imp.Crate(ctx, client, *from, *stream, legacy, dst)
	}
	if err != nil {
		return flagError(err)
	}
	return printReport(stdout, rep, *asJSON)
}

// optionFlags names, for each option of package lease its errors mention, the flag that sets it.
var optionFlags = strings.NewReplacer(
	"WithForce", "-force",
	"WithOverwrite", "-overwrite",
	"WithMoveBack", "-move-back",
	"WithAtTimestamp", "-at-timestamp",
	"WithKCLStreamIdentifier", "-stream-id",
	"WithWatch", "-watch",
)

// flagError returns err as the command's user sees it: naming its flags, not the options of
// package lease they set. errors.Is and errors.As still reach err.
func flagError(err error) error {
	msg := optionFlags.Replace(err.Error())
	if msg == err.Error() {
		return err
	}
	return &renamed{msg: msg, err: err}
}

type renamed struct {
	msg string
	err error
}

func (e *renamed) Error() string { return e.msg }
func (e *renamed) Unwrap() error { return e.err }

func printReport(w io.Writer, rep lease.ImportReport, asJSON bool) error {
	if asJSON {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(rep)
	}
	verb := "imported"
	if rep.DryRun {
		verb = "would import"
	}
	fmt.Fprintf(w, "%s: stream %s: %d rows read, %s %d, %d unchanged, %d kept, %d skipped\n",
		rep.Source, rep.Stream, rep.Rows, verb, rep.Imported, rep.Unchanged, rep.Kept, rep.Skipped)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tACTION\tSOURCE\tKINESUB NOW\tIMPORTED")
	subs := false
	for _, s := range rep.Shards {
		from := s.From
		if s.FromSubSequence != "" {
			from += " sub " + s.FromSubSequence
			subs = true
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Shard, s.Action, from, position(s.Shard, s.Current), position(s.Shard, s.Checkpoint))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if subs {
		fmt.Fprintln(w, "SOURCE sub k: the KCL's last handled user record of an aggregate (0 for a record not aggregated); after:<shard>:<sequence>:<n>: kinesub resumes after the first n user records of that aggregate, n = k+1 (a record not aggregated is handled whole at 1 as at 0)")
	}
	if rep.Kept > 0 {
		fmt.Fprintln(w, "keep: the kinesub checkpoint is ahead of the imported one, or cannot be compared with it (a subscriber has read the shard since): left as it is; -move-back replaces it")
	}
	printPending(w, rep.Pending)
	return nil
}

// position writes a kinesub checkpoint as the position a subscriber opens the shard at, in the
// form kinesub.ParsePosition reads ("-": none; SHARD_END: read to its end).
func position(shard string, cp lease.Checkpoint) string {
	switch seq := cp.Sequence; {
	case seq == "":
		return "-"
	case seq == lease.ShardEnd:
		return seq
	case seq == lease.TrimHorizon:
		return "horizon"
	case strings.HasPrefix(seq, lease.AtTimestampPrefix):
		ms, err := strconv.ParseInt(seq[len(lease.AtTimestampPrefix):], 10, 64)
		if err != nil {
			return seq
		}
		return "timestamp:" + time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
	case cp.SubSequence > 0:
		return "after:" + shard + ":" + seq + ":" + strconv.FormatInt(cp.SubSequence, 10)
	default:
		return "after:" + shard + ":" + seq
	}
}

// printPending tells the operator which shards had a checkpoint prepared and not committed: the
// committed one is imported, so the records between the two are read again.
func printPending(w io.Writer, pending []lease.PendingCheckpoint) {
	if len(pending) == 0 {
		return
	}
	shards := "shards"
	if len(pending) == 1 {
		shards = "shard"
	}
	fmt.Fprintf(w, "pending: %d %s had a checkpoint prepared and not committed; the committed checkpoint is imported, so the records after it are delivered again, and no prepared application state is carried over:\n", len(pending), shards)
	for _, p := range pending {
		line := "  " + p.Shard + ": prepared "
		if p.Sequence != "" {
			line += fmt.Sprintf("%s (sub-sequence %d)", p.Sequence, p.SubSequence)
		} else {
			line += "no checkpoint"
		}
		if p.State {
			line += ", with application state"
		}
		fmt.Fprintln(w, line)
	}
}
