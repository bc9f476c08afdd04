package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kinesistypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// ErrImportRefused is wrapped by the importers' errors when they write nothing: the other
// consumer's workers still run, a row cannot be translated, a shard's kinesub lease is held,
// the source table holds no rows of the stream, or the stream does not exist.
var ErrImportRefused = errors.New("lease: import refused")

// importOwner holds a lease for the instant an import writes its checkpoint; the lease is
// released (free: no owner, zero expiry) at once.
const importOwner = "kinesub-import"

// ImportReport says what an import wrote, or would write in a dry run.
type ImportReport struct {
	Source    string // "kcl", "harlow" or "crate"
	Stream    string
	Rows      int // rows read from the source table
	Imported  int // shards whose checkpoint was written (or would be, in a dry run)
	Unchanged int // shards whose kinesub lease already held the same checkpoint
	// Kept counts the shards whose kinesub checkpoint is ahead of the imported one, or cannot
	// be compared with it (a kinesub subscriber has read the shard since): left as they are
	// unless WithMoveBack.
	Kept    int
	Skipped int  // rows of other streams, and rows with no checkpoint to carry over
	DryRun  bool // nothing was written
	Shards  []ImportedShard
	// Pending lists the shards whose source row also held a checkpoint the old consumer had
	// prepared and not committed (the KCL's two-phase checkpoint). The committed checkpoint is
	// the one imported: the records between the two are delivered again (at least once), and
	// an application state stored with the prepared checkpoint is not carried over.
	Pending []PendingCheckpoint
}

// PendingCheckpoint is a checkpoint prepared and not committed, as the source row stored it:
// for the KCL, pendingCheckpoint, pendingCheckpointSubSequenceNumber and
// pendingCheckpointState.
type PendingCheckpoint struct {
	Shard       string
	Sequence    string // the prepared checkpoint, as stored (empty when only a state was stored)
	SubSequence int64  // its sub-sequence number, as the KCL counts it: the last user record it covers
	State       bool   // an application state was stored with it
}

// ImportedShard is one shard's row in an ImportReport.
type ImportedShard struct {
	Shard string
	From  string // the source row's checkpoint, as stored there
	// FromSubSequence is the source row's sub-sequence number as stored there, "" when it has
	// none. The KCL stores the last handled user record of an aggregate, 0 for a record that
	// is not one; kinesub's Checkpoint.SubSequence counts the handled user records instead, so
	// the KCL's k is kinesub's k+1 (a whole record handled is 1, or 0).
	FromSubSequence string
	// Current is the kinesub lease's checkpoint before the import (zero: none).
	Current    Checkpoint
	Checkpoint Checkpoint // the kinesub checkpoint the source's translates to
	// Action: "import", "unchanged", "keep" (Current is ahead of Checkpoint, or cannot be
	// compared with it, and is left as it is) or "skip" (the row has no checkpoint).
	Action string
}

// Importer carries the options of the importers; NewImporter builds one.
type Importer struct {
	dryRun, force, overwrite, moveBack bool
	watch                              time.Duration
	at                                 time.Time
	streamID                           string
	kinesis                            StreamDescriber
	progress                           io.Writer
	now                                func() time.Time
}

// StreamDescriber is the part of a Kinesis client (*kinesis.Client) the importers use to check
// that the stream exists.
type StreamDescriber interface {
	DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error)
}

// ImportOption configures an Importer.
type ImportOption func(*Importer)

// WithDryRun makes the import write nothing and report what it would write. Default off.
func WithDryRun() ImportOption { return func(i *Importer) { i.dryRun = true } }

// WithForce imports although the source table's workers look live: a KCL lease counter changed
// during the watch window, or a crate lease has not expired. Default off: the import is
// refused, naming the live workers.
func WithForce() ImportOption { return func(i *Importer) { i.force = true } }

// WithOverwrite replaces the checkpoint of a shard whose kinesub lease is held by a subscriber.
// Default off: such a shard refuses the whole import.
func WithOverwrite() ImportOption { return func(i *Importer) { i.overwrite = true } }

// WithMoveBack replaces a kinesub checkpoint that is ahead of the imported one, or that cannot
// be compared with it. Default off: such a shard is left as it is (reported as "keep"), so
// that importing again after kinesub has read the stream delivers nothing again. A kinesub
// checkpoint is ahead when it is SHARD_END, or a later record (or more user records of the
// same aggregate) than the imported one; one that is a position marker (where a subscriber
// opened the shard) or is set where the import has a marker cannot be compared.
func WithMoveBack() ImportOption { return func(i *Importer) { i.moveBack = true } }

// WithStreamCheck makes the importers check, with client, that the stream exists before they
// read anything else, and refuse (ErrImportRefused) when it does not. Default: no check; the
// rows of a KCL table in single-stream mode do not name their stream, so without it a
// misspelt stream name imports the table's rows under that name.
func WithStreamCheck(client StreamDescriber) ImportOption {
	return func(i *Importer) { i.kinesis = client }
}

// WithProgress makes the importers write to w, one line each, what they wait for (the KCL
// importer's watch). Default: nothing is written.
func WithProgress(w io.Writer) ImportOption { return func(i *Importer) { i.progress = w } }

// WithWatch sets how long ImportKCL watches the KCL's lease counters for live workers: by
// default 10s, the KCL's failover time. Zero skips the watch; negative is an error.
func WithWatch(d time.Duration) ImportOption { return func(i *Importer) { i.watch = d } }

// WithAtTimestamp gives the instant the KCL's AT_TIMESTAMP checkpoints stand for (the KCL keeps
// it in its configuration, not in the table). Without it such a row cannot be translated.
func WithAtTimestamp(t time.Time) ImportOption { return func(i *Importer) { i.at = t } }

// WithKCLStreamIdentifier selects the rows of a multi-stream KCL table by their stream
// identifier, "account:stream:creationEpoch". Without it the rows are selected by stream name,
// and a table holding two streams of that name (a stream recreated) is refused.
func WithKCLStreamIdentifier(id string) ImportOption { return func(i *Importer) { i.streamID = id } }

// NewImporter returns an Importer with opts applied over the defaults.
func NewImporter(opts ...ImportOption) *Importer {
	i := &Importer{watch: 10 * time.Second, now: time.Now}
	for _, o := range opts {
		o(i)
	}
	return i
}

func (i *Importer) validate() error {
	if i.watch < 0 {
		return fmt.Errorf("%w: WithWatch(%v) must not be negative", ErrInvalidArgument, i.watch)
	}
	return nil
}

// sourceRow is one shard's checkpoint as another consumer stored it, already tied to a shard
// of the stream being imported.
type sourceRow struct {
	shard, checkpoint string
	sub               int64 // the last handled user record of an aggregate, as the KCL counts it
	hasSub            bool
	pending           *PendingCheckpoint // a checkpoint prepared and not committed, reported only
}

// translateCheckpoint turns a KCL-style checkpoint into kinesub's: ok false with no error when
// the row carries nothing to import (no checkpoint yet).
func translateCheckpoint(r sourceRow, at, now time.Time) (Checkpoint, bool, error) {
	switch c := r.checkpoint; c {
	case "":
		return Checkpoint{}, false, nil
	case "TRIM_HORIZON":
		return Checkpoint{Sequence: TrimHorizon}, true, nil
	case "SHARD_END":
		return Checkpoint{Sequence: ShardEnd}, true, nil
	case "LATEST":
		// Opened at the tip, nothing handled yet: the tip as of the import, so that what is
		// published before a kinesub subscriber opens the shard is not skipped.
		return Checkpoint{Sequence: AtTimestampPrefix + strconv.FormatInt(now.UnixMilli(), 10)}, true, nil
	case "AT_TIMESTAMP":
		if at.IsZero() {
			return Checkpoint{}, false, fmt.Errorf("shard %s: checkpoint AT_TIMESTAMP needs the instant it stands for (WithAtTimestamp)", r.shard)
		}
		return Checkpoint{Sequence: AtTimestampPrefix + strconv.FormatInt(at.UnixMilli(), 10)}, true, nil
	default:
		if !isSequenceNumber(c) {
			return Checkpoint{}, false, fmt.Errorf("shard %s: checkpoint %q is neither a sequence number nor a known marker", r.shard, c)
		}
		if r.sub < 0 {
			return Checkpoint{}, false, fmt.Errorf("shard %s: sub-sequence %d is negative", r.shard, r.sub)
		}
		if !r.hasSub {
			return Checkpoint{Sequence: c}, true, nil
		}
		// The source names the last handled user record; kinesub counts the handled ones. On a
		// record that is not an aggregate, a positive count means the record itself is handled.
		return Checkpoint{Sequence: c, SubSequence: r.sub + 1}, true, nil
	}
}

func isSequenceNumber(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// ShardLeaseKey is the key of a shard's lease in a kinesub table: "<stream>/<shard id>".
func ShardLeaseKey(stream, shard string) string { return stream + "/" + shard }

// apply translates rows and writes them through dst as free leases: all or nothing.
func (i *Importer) apply(ctx context.Context, rep ImportReport, rows []sourceRow, dst Store) (ImportReport, error) {
	if err := checkContext(ctx, "Import"); err != nil {
		return rep, err
	}
	now := i.now()
	type plan struct {
		key string
		cp  Checkpoint
		cur Lease
	}
	var plans []plan
	var bad []string
	held := map[string][]string{} // owner → the shards whose kinesub lease it holds
	for _, r := range rows {
		if r.pending != nil {
			rep.Pending = append(rep.Pending, *r.pending)
		}
		sh := ImportedShard{Shard: r.shard, From: r.checkpoint}
		if r.hasSub {
			sh.FromSubSequence = strconv.FormatInt(r.sub, 10)
		}
		cp, ok, err := translateCheckpoint(r, i.at, now)
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		if !ok {
			rep.Skipped++
			sh.Action = "skip"
			rep.Shards = append(rep.Shards, sh)
			continue
		}
		key := ShardLeaseKey(rep.Stream, r.shard)
		cur, err := dst.Read(ctx, key)
		if err != nil {
			return rep, fmt.Errorf("lease: import: read %s: %w", key, err)
		}
		sh.Current, sh.Checkpoint = cur.Checkpoint, cp
		switch {
		case cur.Checkpoint == cp:
			rep.Unchanged++
			sh.Action = "unchanged"
		case !i.moveBack && !behind(cur.Checkpoint, cp):
			rep.Kept++
			sh.Action = "keep"
		case cur.Owner != "" && !i.overwrite:
			held[cur.Owner] = append(held[cur.Owner], r.shard)
			continue
		default:
			plans = append(plans, plan{key: key, cp: cp, cur: cur})
			sh.Action = "import"
		}
		rep.Shards = append(rep.Shards, sh)
	}
	if len(held) > 0 {
		owners := make([]string, 0, len(held))
		for o := range held {
			owners = append(owners, o)
		}
		sort.Strings(owners)
		var by []string
		for _, o := range owners {
			by = append(by, fmt.Sprintf("%s (shards %s)", o, strings.Join(held[o], ", ")))
		}
		bad = append(bad, fmt.Sprintf("kinesub leases held by %s: stop those subscribers, or use WithOverwrite to replace their checkpoints", strings.Join(by, "; ")))
	}
	if len(bad) > 0 {
		return ImportReport{Source: rep.Source, Stream: rep.Stream, Rows: rep.Rows, DryRun: i.dryRun, Pending: rep.Pending},
			fmt.Errorf("%w: %s", ErrImportRefused, strings.Join(bad, "; "))
	}
	rep.Imported = len(plans)
	if i.dryRun {
		return rep, nil
	}
	for n, p := range plans {
		if err := writeFree(ctx, dst, p.key, p.cur, p.cp); err != nil {
			rep.Imported = n
			return rep, err
		}
	}
	return rep, nil
}

// behind reports whether the kinesub checkpoint cur is behind cp, so that writing cp moves the
// shard forward: cur is none, cp is SHARD_END, or both are sequence numbers and cp is further
// on. A sub-sequence of 0 stands for the whole record, past every user record of it. Position
// markers compare with nothing, as they say where a shard was opened, not what was handled.
func behind(cur, cp Checkpoint) bool {
	switch {
	case cur.Sequence == "":
		return true
	case cur.Sequence == ShardEnd:
		return false
	case cp.Sequence == ShardEnd:
		return true
	case !isSequenceNumber(cur.Sequence) || !isSequenceNumber(cp.Sequence):
		return false
	}
	a, _ := new(big.Int).SetString(cur.Sequence, 10)
	b, _ := new(big.Int).SetString(cp.Sequence, 10)
	if c := a.Cmp(b); c != 0 {
		return c < 0
	}
	whole := func(sub int64) int64 {
		if sub <= 0 {
			return 1<<63 - 1
		}
		return sub
	}
	return whole(cur.SubSequence) < whole(cp.SubSequence)
}

// checkTarget makes sure, before anything is read or watched, that the stream exists (with
// WithStreamCheck) and that dst can be read: a destination table that does not exist fails
// here, not after the watch.
func (i *Importer) checkTarget(ctx context.Context, stream string, dst Store) error {
	if i.kinesis != nil {
		_, err := i.kinesis.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: &stream})
		var missing *kinesistypes.ResourceNotFoundException
		switch {
		case errors.As(err, &missing):
			return fmt.Errorf("%w: stream %s does not exist", ErrImportRefused, stream)
		case err != nil:
			return fmt.Errorf("lease: import: describe stream %s: %w", stream, err)
		}
	}
	if _, err := dst.Read(ctx, ShardLeaseKey(stream, changesRowID)); err != nil {
		return fmt.Errorf("lease: import: the destination store cannot be read: %w", err)
	}
	return nil
}

// changesRowID is the id of a stream's change row in a kinesub table ("<stream>/~table/changes").
const changesRowID = "~table/changes"

// noRowsOf refuses an import from a table that holds no rows of stream, naming what it does
// hold: the streams (or, what "streams" when the table keys its rows otherwise), or nothing.
func noRowsOf(table, stream, what string, held map[string]bool) error {
	if len(held) == 0 {
		return fmt.Errorf("%w: table %s holds no rows of stream %s, nor of any other", ErrImportRefused, table, stream)
	}
	names := make([]string, 0, len(held))
	for n := range held {
		names = append(names, n)
	}
	sort.Strings(names)
	return fmt.Errorf("%w: table %s holds no rows of stream %s; it holds the rows of %s %s", ErrImportRefused, table, stream, what, strings.Join(names, ", "))
}

// writeFree records cp as the lease's checkpoint and leaves the lease free: taken without a TTL
// (no expiry is ever written), checkpointed, released.
func writeFree(ctx context.Context, dst Store, key string, cur Lease, cp Checkpoint) error {
	var ok bool
	var err error
	if cur.Owner == "" {
		ok, err = dst.Acquire(ctx, key, importOwner, 0)
	} else {
		ok, err = dst.Steal(ctx, key, importOwner, cur.Counter, 0)
	}
	if err != nil || !ok {
		return fmt.Errorf("lease: import: take %s: changed while importing (taken: %v): %w", key, ok, err)
	}
	l, err := dst.Read(ctx, key)
	if err != nil {
		return fmt.Errorf("lease: import: read %s: %w", key, err)
	}
	t := l.Tenure()
	if ok, err = dst.Checkpoint(ctx, key, t, cp); err != nil || !ok {
		return fmt.Errorf("lease: import: checkpoint %s (written: %v): %w", key, ok, err)
	}
	if ok, err = dst.Release(ctx, key, t); err != nil || !ok {
		return fmt.Errorf("lease: import: release %s (released: %v): %w", key, ok, err)
	}
	return nil
}
