package lease

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ImportKCL writes into dst the checkpoints of stream that the Kinesis Client Library (Java, or
// its multilang daemon) keeps in its lease table kclTable, with the default options: see
// Importer.KCL.
func ImportKCL(ctx context.Context, client *dynamodb.Client, kclTable, stream string, dst Store) (ImportReport, error) {
	return NewImporter().KCL(ctx, client, kclTable, stream, dst)
}

// KCL imports the KCL lease table kclTable's checkpoints of stream into dst, as free leases.
// Rows are keyed by shard id, or by "account:stream:creationEpoch:shardId" in multi-stream
// mode. A sequence-number checkpoint with checkpointSubSequenceNumber k (the last handled user
// record of an aggregate) resumes at user record k+1; a checkpoint prepared and not committed
// (pendingCheckpoint) is not imported but listed in ImportReport.Pending; TRIM_HORIZON, LATEST (the tip as of the
// import), AT_TIMESTAMP (see WithAtTimestamp) and SHARD_END carry over. Before writing it watches
// the lease counters for the watch window and refuses, naming the live workers, when one
// changed (unless WithForce). It writes nothing when any row cannot be translated, and refuses
// a table that holds no rows of stream (in multi-stream mode, rows of other streams only),
// naming the streams it holds. It never moves a kinesub checkpoint back (see WithMoveBack), so
// a second import of the same table changes nothing.
func (i *Importer) KCL(ctx context.Context, client *dynamodb.Client, kclTable, stream string, dst Store) (ImportReport, error) {
	rep := ImportReport{Source: "kcl", Stream: stream, DryRun: i.dryRun}
	if err := i.validate(); err != nil {
		return rep, err
	}
	if err := i.checkImportArgs(ctx, client, kclTable, stream, dst); err != nil {
		return rep, err
	}
	items, err := scanAll(ctx, client, kclTable)
	if err != nil {
		return rep, err
	}
	// Refused before the watch: a misspelt stream costs no wait.
	if _, _, err := kclRows(items, stream, i.streamID, kclTable); err != nil {
		return rep, err
	}
	if i.watch > 0 {
		if i.progress != nil {
			fmt.Fprintf(i.progress, "watching the lease counters of KCL table %s for %v: a KCL worker still running renews its leases and moves them (the import is then refused)\n", kclTable, i.watch)
		}
		t := time.NewTimer(i.watch)
		select {
		case <-ctx.Done():
			t.Stop()
			return rep, ctx.Err()
		case <-t.C:
		}
		again, err := scanAll(ctx, client, kclTable)
		if err != nil {
			return rep, err
		}
		if live := liveWorkers(items, again); len(live) > 0 && !i.force {
			return rep, fmt.Errorf("%w: KCL workers still hold leases of table %s: %s (stop them, or use WithForce)",
				ErrImportRefused, kclTable, strings.Join(live, ", "))
		}
		items = again
	}
	rows, skipped, err := kclRows(items, stream, i.streamID, kclTable)
	if err != nil {
		return rep, err
	}
	rep.Rows, rep.Skipped = len(items), skipped
	return i.apply(ctx, rep, rows, dst)
}

// liveWorkers names the owners of the leases whose counter moved between two scans.
func liveWorkers(before, after []map[string]types.AttributeValue) []string {
	counters := map[string]string{}
	for _, it := range before {
		counters[attrS(it, "leaseKey")] = attrN(it, "leaseCounter")
	}
	seen := map[string]bool{}
	var live []string
	for _, it := range after {
		if c, ok := counters[attrS(it, "leaseKey")]; ok && c == attrN(it, "leaseCounter") {
			continue
		}
		owner := attrS(it, "leaseOwner")
		if owner == "" {
			owner = "(no owner, lease " + attrS(it, "leaseKey") + ")"
		}
		if !seen[owner] {
			seen[owner] = true
			live = append(live, owner)
		}
	}
	sort.Strings(live)
	return live
}

// kclRows selects the rows of stream from a KCL lease table (single- or multi-stream) and reads
// their checkpoints; skipped counts the rows of other streams. A table with no row of stream is
// refused, naming the streams (or stream identifiers) it holds.
func kclRows(items []map[string]types.AttributeValue, stream, streamID, table string) ([]sourceRow, int, error) {
	rows, skipped, err := kclSelect(items, stream, streamID)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrImportRefused, err)
	}
	if len(rows) == 0 {
		held := map[string]bool{}
		for _, it := range items {
			if parts := strings.Split(attrS(it, "leaseKey"), ":"); len(parts) == 4 {
				if streamID != "" {
					held[strings.Join(parts[:3], ":")] = true
				} else {
					held[parts[1]] = true
				}
			}
		}
		what := "streams"
		if streamID != "" {
			stream, what = streamID, "stream identifiers"
		}
		return nil, 0, noRowsOf(table, stream, what, held)
	}
	return rows, skipped, nil
}

// kclSelect selects the rows of stream, as kclRows.
func kclSelect(items []map[string]types.AttributeValue, stream, streamID string) ([]sourceRow, int, error) {
	var rows []sourceRow
	ids := map[string]bool{}
	skipped := 0
	for _, it := range items {
		key := attrS(it, "leaseKey")
		shard := key
		if parts := strings.Split(key, ":"); len(parts) == 4 {
			id := strings.Join(parts[:3], ":")
			if (streamID != "" && id != streamID) || (streamID == "" && parts[1] != stream) {
				skipped++
				continue
			}
			ids[id] = true
			shard = parts[3]
		} else if !strings.HasPrefix(key, "shardId-") {
			skipped++ // not a shard lease (the KCL 3 keeps other rows in other tables)
			continue
		}
		r := sourceRow{shard: shard, checkpoint: attrS(it, "checkpoint")}
		if s := attrN(it, "checkpointSubSequenceNumber"); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, 0, fmt.Errorf("lease %s: checkpointSubSequenceNumber %q: %w", key, s, err)
			}
			r.sub, r.hasSub = n, true
		}
		pending, err := kclPending(it, shard)
		if err != nil {
			return nil, 0, err
		}
		r.pending = pending
		rows = append(rows, r)
	}
	if len(ids) > 1 {
		var names []string
		for id := range ids {
			names = append(names, id)
		}
		sort.Strings(names)
		return nil, 0, fmt.Errorf("the table holds stream %s under several identifiers (%s): name one with WithKCLStreamIdentifier",
			stream, strings.Join(names, ", "))
	}
	return rows, skipped, nil
}

// kclPending reads a KCL lease row's prepared and uncommitted checkpoint, if it has one.
func kclPending(it map[string]types.AttributeValue, shard string) (*PendingCheckpoint, error) {
	p := PendingCheckpoint{Shard: shard, Sequence: attrS(it, "pendingCheckpoint")}
	if v, ok := it["pendingCheckpointState"]; ok {
		_, null := v.(*types.AttributeValueMemberNULL)
		p.State = !null
	}
	if p.Sequence == "" && !p.State {
		return nil, nil
	}
	if s := attrN(it, "pendingCheckpointSubSequenceNumber"); s != "" && p.Sequence != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("lease %s: pendingCheckpointSubSequenceNumber %q: %w", attrS(it, "leaseKey"), s, err)
		}
		p.SubSequence = n
	}
	return &p, nil
}

// Harlow imports the checkpoints that harlow/kinesis-consumer's DynamoDB store keeps in table
// for the application appName (its rows: "namespace" = "<appName>-<stream>", "shard_id",
// "sequence_number", the last handled record) into dst, as free leases.
func (i *Importer) Harlow(ctx context.Context, client *dynamodb.Client, table, appName, stream string, dst Store) (ImportReport, error) {
	rep := ImportReport{Source: "harlow", Stream: stream, DryRun: i.dryRun}
	if err := i.validate(); err != nil {
		return rep, err
	}
	if err := i.checkImportArgs(ctx, client, table, stream, dst); err != nil {
		return rep, err
	}
	items, err := scanAll(ctx, client, table)
	if err != nil {
		return rep, err
	}
	ns := appName + "-" + stream
	var rows []sourceRow
	held := map[string]bool{}
	for _, it := range items {
		if n := attrS(it, "namespace"); n != ns {
			held[n] = true
			rep.Skipped++
			continue
		}
		rows = append(rows, sourceRow{shard: attrS(it, "shard_id"), checkpoint: attrS(it, "sequence_number")})
	}
	if len(rows) == 0 {
		return rep, noRowsOf(table, stream, "namespaces (<app>-<stream>; here "+ns+")", held)
	}
	rep.Rows = len(items)
	return i.apply(ctx, rep, rows, dst)
}

// Crate imports the checkpoints that the Rust crate ruststream-kinesis keeps in its DynamoDB
// lease table (DynamoLeaseStore) into dst, as free leases. Its rows hold "lease_key",
// "lease_owner", "lease_expiry" (milliseconds since the Unix epoch), "lease_counter" and
// "checkpoint": the sequence number of the last handled record, or SHARD_END. The key is
// "<stream>:<shard id>" from 0.7 on, the bare shard id in 0.6, whose rows are read only when
// legacy is true (they do not say which stream they belong to); as the crate itself does, a
// shard whose 0.7 row holds no checkpoint takes its 0.6 row's.
//
// The crate stores no sub-sequence number: it does not deaggregate, refuses every KPL
// aggregate as an error and never checkpoints on one, so its checkpoint always names a whole
// record, and it resumes after that record. The import writes it as such (SubSequence 0). A row
// holding a sub-sequence attribute, or a checkpoint the crate does not write (TRIM_HORIZON,
// LATEST…), was not written by the crate: the import is refused. So is an import while a
// crate instance holds a lease (an owner whose lease_expiry is still ahead), unless WithForce.
func (i *Importer) Crate(ctx context.Context, client *dynamodb.Client, table, stream string, legacy bool, dst Store) (ImportReport, error) {
	rep := ImportReport{Source: "crate", Stream: stream, DryRun: i.dryRun}
	if err := i.validate(); err != nil {
		return rep, err
	}
	if err := i.checkImportArgs(ctx, client, table, stream, dst); err != nil {
		return rep, err
	}
	items, err := scanAll(ctx, client, table)
	if err != nil {
		return rep, err
	}
	rows, skipped, live, err := crateRows(items, stream, legacy, i.now())
	if err != nil {
		return rep, fmt.Errorf("%w: %w", ErrImportRefused, err)
	}
	if len(rows) == 0 {
		held := map[string]bool{}
		for _, it := range items {
			if st, _, ok := strings.Cut(attrS(it, "lease_key"), ":"); ok {
				held[st] = true
			} else if strings.HasPrefix(attrS(it, "lease_key"), "shardId-") {
				held["(rows keyed by the bare shard id, of crate 0.6, which name no stream)"] = true
			}
		}
		return rep, noRowsOf(table, stream, "streams", held)
	}
	if len(live) > 0 && !i.force {
		return rep, fmt.Errorf("%w: crate instances still hold leases of table %s: %s (stop them and wait for their leases to expire, or use WithForce)",
			ErrImportRefused, table, strings.Join(live, ", "))
	}
	rep.Rows, rep.Skipped = len(items), skipped
	return i.apply(ctx, rep, rows, dst)
}

// crateRows selects the rows of stream from a ruststream-kinesis lease table (0.7 keys, and
// 0.6 keys when legacy) and reads their checkpoints; skipped counts the other rows, live names
// the owners of the selected rows whose lease had not expired at now.
func crateRows(items []map[string]types.AttributeValue, stream string, legacy bool, now time.Time) (rows []sourceRow, skipped int, live []string, err error) {
	current, bare := map[string]sourceRow{}, map[string]sourceRow{}
	owners := map[string]bool{}
	var bad []string
	for _, it := range items {
		key := attrS(it, "lease_key")
		var shard string
		switch {
		case strings.HasPrefix(key, stream+":"):
			shard = key[len(stream)+1:]
		case legacy && strings.HasPrefix(key, "shardId-"):
			shard = key
		default:
			skipped++
			continue
		}
		for name := range it {
			if n := strings.ToLower(strings.ReplaceAll(name, "_", "")); strings.Contains(n, "subseq") {
				bad = append(bad, fmt.Sprintf("lease %s: attribute %s: the crate stores no sub-sequence, so this row was written by another consumer", key, name))
			}
		}
		cp := attrS(it, "checkpoint")
		if cp != "" && cp != ShardEnd && !isSequenceNumber(cp) {
			bad = append(bad, fmt.Sprintf("lease %s: checkpoint %q is neither a sequence number nor SHARD_END, the only values the crate writes", key, cp))
		}
		if owner := attrS(it, "lease_owner"); owner != "" {
			if ms, perr := strconv.ParseInt(attrN(it, "lease_expiry"), 10, 64); perr != nil || ms > now.UnixMilli() {
				owners[owner] = true
			}
		}
		r := sourceRow{shard: shard, checkpoint: cp}
		if key == shard {
			bare[shard] = r
		} else {
			current[shard] = r
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return nil, 0, nil, errors.New(strings.Join(bad, "; "))
	}
	for shard, r := range bare {
		// The crate reads a bare row only for a shard with no checkpoint under its own key.
		if c, ok := current[shard]; ok && c.checkpoint != "" {
			skipped++
			continue
		}
		if _, ok := current[shard]; ok {
			skipped++ // the 0.7 row without a checkpoint gives way to the 0.6 row
		}
		current[shard] = r
	}
	for _, r := range current {
		rows = append(rows, r)
	}
	sort.Slice(rows, func(a, b int) bool { return rows[a].shard < rows[b].shard })
	for o := range owners {
		live = append(live, o)
	}
	sort.Strings(live)
	return rows, skipped, live, nil
}

func (i *Importer) checkImportArgs(ctx context.Context, client *dynamodb.Client, table, stream string, dst Store) error {
	if err := checkContext(ctx, "Import"); err != nil {
		return err
	}
	switch {
	case client == nil:
		return fmt.Errorf("%w: nil DynamoDB client", ErrInvalidArgument)
	case table == "":
		return fmt.Errorf("%w: empty source table name", ErrInvalidArgument)
	case stream == "":
		return fmt.Errorf("%w: empty stream name", ErrInvalidArgument)
	case dst == nil:
		return fmt.Errorf("%w: nil destination store", ErrInvalidArgument)
	}
	return i.checkTarget(ctx, stream, dst)
}

// scanAll reads every item of table, strongly consistent.
func scanAll(ctx context.Context, client *dynamodb.Client, table string) ([]map[string]types.AttributeValue, error) {
	var out []map[string]types.AttributeValue
	p := dynamodb.NewScanPaginator(client, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("lease: import: scan %s: %w", table, err)
		}
		out = append(out, page.Items...)
	}
	return out, nil
}

func attrS(it map[string]types.AttributeValue, name string) string {
	if v, ok := it[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func attrN(it map[string]types.AttributeValue, name string) string {
	switch v := it[name].(type) {
	case *types.AttributeValueMemberN:
		return v.Value
	case *types.AttributeValueMemberS:
		return v.Value
	}
	return ""
}
