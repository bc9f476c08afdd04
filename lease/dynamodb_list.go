package lease

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Listing one stream's rows without reading the others'.
//
// The table's key is the lease key alone, so DynamoDB cannot find one stream's rows by key: a
// Scan reads (and bills) every item of the table, and a filter only drops the others' after
// reading them. So every item whose key has a stream part ("<stream>/...") carries that part in
// lease_stream, and the global secondary index lease_stream-index (partition key lease_stream,
// sort key lease_key) holds one entry per row, projecting only the keys. ListPrefix queries
// the index for the keys of the prefix's rows, then reads those items with BatchGetItem,
// strongly consistent: the other streams' rows are not read at all.
//
// Why keys only: DynamoDB writes to a global secondary index only when an item enters or
// leaves it or changes one of the attributes it holds. Renewals and checkpoints change none of
// them, so the index is written only when a row is created or deleted, and one index partition
// per stream stays far below a partition's 1,000 writes a second even for a stream of 10,000
// shards checkpointing every few seconds (an index projecting the lease fields would take a
// write for every renewal and checkpoint, all on the stream's one partition).
//
// Why it is safe: the index is eventually consistent (a new row appears in it, and a deleted
// one leaves it, usually within a second), but the items are read strongly consistent, so
// what a listing shows of a row is current. A row created just before a listing may be
// missing from it: the subscriber then takes that shard for free, and its Acquire, conditional
// like every take, fails against the live owner, as it would against a peer that took the
// shard just after the listing.
//
// What it costs: BatchGetItem bills each item as a read of its own, rounded up to 4 KB (one
// read unit for a lease row), whereas a Scan bills the bytes it reads, about 4 KB per unit. So
// the index pays off only when a Scan of the table costs more read units than the prefix has
// rows: ListPrefix compares the number of rows the prefix's last listing found with what a Scan of
// the table last cost (or DescribeTable's size of the table, which DynamoDB refreshes every few
// hours) and scans when that is cheaper. Either way a listing costs at most about one read unit
// per row of the stream, whatever other streams share the table.
//
// Tables without the index (created by an earlier version, or elsewhere) keep working: the
// store looks once for the index (DescribeTable, again each minute while it is missing or
// being built) and scans meanwhile. Items written before lease_stream existed lack it and are
// not in the index: the first ListPrefix of a prefix in a process, on a table with the index,
// scans as before and sets lease_stream on the prefix's items that lack it (a conditional write
// that changes nothing else: no counter, owner or expiry), and every lease write sets it too.

const (
	streamIndex  = "lease_stream-index"
	batchKeys    = 100              // the most keys one BatchGetItem takes
	indexRecheck = time.Minute      // how often a store without the index looks for it again
	indexRefresh = 10 * time.Minute // how often a store with it refreshes the table's size
)

// streamIndexSpec is the index as CreateTable and UpdateTable create it.
func streamIndexSpec() types.GlobalSecondaryIndex {
	return types.GlobalSecondaryIndex{
		IndexName: aws.String(streamIndex),
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(attrStream), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(attrKey), KeyType: types.KeyTypeRange},
		},
		Projection: &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly},
	}
}

// streamOf returns the stream part of a key or prefix: the text before its first '/'.
func streamOf(key string) (string, bool) {
	i := strings.IndexByte(key, '/')
	return key[:max(i, 0)], i > 0
}

// listing is what a store knows about listing by stream. It is safe for concurrent use.
type listing struct {
	mu        sync.Mutex
	checked   time.Time       // when DescribeTable last said whether the index is ACTIVE
	indexed   bool            // it did
	migrated  map[string]bool // prefixes whose items lacking lease_stream this store tagged
	scanUnits float64         // what a strongly consistent Scan of the table costs, 0 if unknown
	rows      map[string]int  // how many rows the last listing of each prefix found
}

func (l *listing) setScanUnits(u float64) {
	l.mu.Lock()
	l.scanUnits = u
	l.mu.Unlock()
}

func (l *listing) saw(prefix string, rows int) {
	l.mu.Lock()
	l.rows[prefix] = rows
	l.mu.Unlock()
}

// indexState reports whether t has the index and whether it is ACTIVE. An index of that name
// with another key schema is an error.
func indexState(t *types.TableDescription) (present, active bool, err error) {
	for _, g := range t.GlobalSecondaryIndexes {
		if aws.ToString(g.IndexName) != streamIndex {
			continue
		}
		ks := g.KeySchema
		if len(ks) != 2 || aws.ToString(ks[0].AttributeName) != attrStream || ks[0].KeyType != types.KeyTypeHash ||
			aws.ToString(ks[1].AttributeName) != attrKey || ks[1].KeyType != types.KeyTypeRange {
			return true, false, fmt.Errorf("lease: table %q has an index %q with another key schema: it needs partition key %q and sort key %q",
				aws.ToString(t.TableName), streamIndex, attrStream, attrKey)
		}
		return true, g.IndexStatus == types.IndexStatusActive, nil
	}
	return false, false, nil
}

// ensureIndex asks DynamoDB to add the index to table t unless it has it. It does not wait
// for the index: ListPrefix uses it once it is ACTIVE. A request DynamoDB refuses (a role
// without dynamodb:UpdateTable, or an emulator that cannot add indexes) is no error: the store
// works without the index, scanning as earlier versions did.
func (d *DynamoDB) ensureIndex(ctx context.Context, t *types.TableDescription) error {
	if present, _, err := indexState(t); present || err != nil {
		return err
	}
	spec := streamIndexSpec()
	create := &types.CreateGlobalSecondaryIndexAction{IndexName: spec.IndexName, KeySchema: spec.KeySchema, Projection: spec.Projection}
	if t.BillingModeSummary == nil || t.BillingModeSummary.BillingMode != types.BillingModePayPerRequest {
		// A provisioned table's index needs its own throughput: the table's, which is plenty
		// for an index written only when a row is created or deleted.
		if p := t.ProvisionedThroughput; p != nil && aws.ToInt64(p.ReadCapacityUnits) > 0 {
			create.ProvisionedThroughput = &types.ProvisionedThroughput{ReadCapacityUnits: p.ReadCapacityUnits, WriteCapacityUnits: p.WriteCapacityUnits}
		}
	}
	// Refused when another process asked first (the table is being updated, or has the
	// index), or for want of permission: either way the store goes on, and looks for the index
	// at its next listing.
	_, _ = d.api.UpdateTable(ctx, &dynamodb.UpdateTableInput{
		TableName: aws.String(d.table),
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(attrKey), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(attrStream), AttributeType: types.ScalarAttributeTypeS},
		},
		GlobalSecondaryIndexUpdates: []types.GlobalSecondaryIndexUpdate{{Create: create}},
	})
	d.list.mu.Lock()
	d.list.checked = time.Time{}
	d.list.mu.Unlock()
	return nil
}

// indexed reports whether ListPrefix may query the index, looking with DescribeTable at most
// once per indexRecheck while it is missing and per indexRefresh while it is there. A failed
// look counts as no index: the store scans, as it does without one.
func (d *DynamoDB) indexed(ctx context.Context) bool {
	l := &d.list
	l.mu.Lock()
	every := indexRecheck
	if l.indexed {
		every = indexRefresh
	}
	if !l.checked.IsZero() && d.now().Sub(l.checked) < every {
		defer l.mu.Unlock()
		return l.indexed
	}
	l.checked = d.now() // concurrent listings keep the last answer meanwhile
	was := l.indexed
	l.mu.Unlock()
	out, err := d.api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(d.table)})
	ok := false
	if err == nil && out.Table != nil {
		_, ok, _ = indexState(out.Table)
		if size := aws.ToInt64(out.Table.TableSizeBytes); size > 0 {
			l.setScanUnits(float64(size) / 4096)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil && ctx.Err() != nil {
		l.checked, ok = time.Time{}, was // not an answer: ask again next time
	}
	l.indexed = ok
	return ok
}

// List implements Store, with a strongly consistent scan of the whole table. Leases come
// sorted by key.
func (d *DynamoDB) List(ctx context.Context) ([]Lease, error) {
	if err := checkContext(ctx, "DynamoDB.List"); err != nil {
		return nil, err
	}
	if err := d.checkTable(); err != nil {
		return nil, err
	}
	return d.scan(ctx, &dynamodb.ScanInput{TableName: aws.String(d.table), ConsistentRead: aws.Bool(true)}, false)
}

// ListPrefix implements Store. Leases come sorted by key. With the index ACTIVE and a
// prefix that has a stream part (a '/'), it reads only the prefix's items, unless a Scan of
// the table costs less; otherwise it scans the table with a filter on the key, which DynamoDB
// applies after reading (and billing) every item. See the top of this file.
func (d *DynamoDB) ListPrefix(ctx context.Context, prefix string) ([]Lease, error) {
	if err := checkContext(ctx, "DynamoDB.ListPrefix"); err != nil {
		return nil, err
	}
	if err := d.checkTable(); err != nil {
		return nil, err
	}
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	stream, ok := streamOf(prefix)
	if !ok || !d.indexed(ctx) {
		return d.scanPrefix(ctx, prefix, false)
	}
	d.list.mu.Lock()
	migrated := d.list.migrated[prefix]
	d.list.mu.Unlock()
	if !migrated {
		ls, err := d.scanPrefix(ctx, prefix, true)
		if err == nil {
			d.list.mu.Lock()
			d.list.migrated[prefix] = true
			d.list.mu.Unlock()
		}
		return ls, err
	}
	// Reading the rows one by one costs about one unit each: scan when the table costs less,
	// judged by the rows the last listing of the prefix found, so that a store that scans does
	// not also query.
	d.list.mu.Lock()
	cheaper := d.list.scanUnits > 0 && d.list.scanUnits <= float64(d.list.rows[prefix])
	d.list.mu.Unlock()
	if cheaper {
		return d.scanPrefix(ctx, prefix, false)
	}
	keys, err := d.queryKeys(ctx, stream, prefix)
	if err != nil {
		return nil, err
	}
	d.list.mu.Lock()
	d.list.rows[prefix] = len(keys)
	cheaper = d.list.scanUnits > 0 && d.list.scanUnits <= float64(len(keys))
	d.list.mu.Unlock()
	if cheaper {
		return d.scanPrefix(ctx, prefix, false)
	}
	return d.batchGet(ctx, keys)
}

// scanPrefix scans the table for the prefix's items; with tag, it sets lease_stream on those
// that lack it.
func (d *DynamoDB) scanPrefix(ctx context.Context, prefix string, tag bool) ([]Lease, error) {
	ls, err := d.scan(ctx, &dynamodb.ScanInput{
		TableName:                 aws.String(d.table),
		ConsistentRead:            aws.Bool(true),
		FilterExpression:          aws.String("begins_with(#key, :prefix)"),
		ExpressionAttributeNames:  map[string]string{"#key": attrKey},
		ExpressionAttributeValues: map[string]types.AttributeValue{":prefix": str(prefix)},
	}, tag)
	if err == nil {
		d.list.saw(prefix, len(ls))
	}
	return ls, err
}

// scan reads every page of in and decodes the items, sorted by key. It records what the scan
// consumed: what a listing that scans costs. With tag, it sets lease_stream on the items that
// lack it.
func (d *DynamoDB) scan(ctx context.Context, in *dynamodb.ScanInput, tag bool) ([]Lease, error) {
	var out []Lease
	report := capacityReport(ctx)
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	units := 0.0
	p := dynamodb.NewScanPaginator(d.api, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, d.wrap("list", "", err)
		}
		consumed(report, page.ConsumedCapacity)
		if c := page.ConsumedCapacity; c != nil {
			units += aws.ToFloat64(c.CapacityUnits)
		}
		for _, item := range page.Items {
			l, err := decode(item)
			if err != nil {
				return nil, fmt.Errorf("lease: list table %q: %w", d.table, err)
			}
			if _, has := item[attrStream]; tag && !has {
				if err := d.tagStream(ctx, l.Key); err != nil {
					return nil, err
				}
			}
			out = append(out, l)
		}
	}
	// A Scan costs at least a unit. Recorded as 0 (an empty table, or an emulator that reports
	// no cost), it would read as unknown, and ListPrefix would query the index from then on,
	// about a unit a row, never scanning again to learn that a Scan is cheaper.
	d.list.setScanUnits(max(units, 1))
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// tagStream sets lease_stream on an item written before it existed, and nothing else: the
// counter does not move, so no owner's fencing token or a thief's observed counter changes.
func (d *DynamoDB) tagStream(ctx context.Context, key string) error {
	stream, ok := streamOf(key)
	if !ok {
		return nil
	}
	report := capacityReport(ctx)
	out, err := d.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(d.table),
		Key:                       map[string]types.AttributeValue{attrKey: str(key)},
		UpdateExpression:          aws.String("SET #stream = :stream"),
		ConditionExpression:       aws.String("attribute_exists(#key) AND attribute_not_exists(#stream)"),
		ExpressionAttributeNames:  map[string]string{"#key": attrKey, "#stream": attrStream},
		ExpressionAttributeValues: map[string]types.AttributeValue{":stream": str(stream)},
		ReturnConsumedCapacity:    asked(report),
	})
	if err == nil {
		consumed(report, out.ConsumedCapacity)
	}
	_, err = d.answer("tag", key, err) // deleted or tagged meanwhile: nothing to do
	return err
}

// queryKeys returns the keys of the prefix's items, from the index.
func (d *DynamoDB) queryKeys(ctx context.Context, stream, prefix string) ([]string, error) {
	report := capacityReport(ctx)
	p := dynamodb.NewQueryPaginator(d.api, &dynamodb.QueryInput{
		TableName:                 aws.String(d.table),
		IndexName:                 aws.String(streamIndex),
		KeyConditionExpression:    aws.String("#stream = :stream AND begins_with(#key, :prefix)"),
		ExpressionAttributeNames:  map[string]string{"#stream": attrStream, "#key": attrKey},
		ExpressionAttributeValues: map[string]types.AttributeValue{":stream": str(stream), ":prefix": str(prefix)},
		ReturnConsumedCapacity:    asked(report),
	})
	var keys []string
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			d.list.mu.Lock()
			d.list.checked = time.Time{} // the index may be gone: look again
			d.list.mu.Unlock()
			return nil, d.wrap("list", "", err)
		}
		consumed(report, page.ConsumedCapacity)
		for _, item := range page.Items {
			k, err := getString(item, attrKey)
			if err != nil {
				return nil, fmt.Errorf("lease: list table %q: %w", d.table, err)
			}
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// batchGet reads the items of keys, strongly consistent, batchKeys at a time, and returns
// those that exist, sorted by key. Keys DynamoDB leaves unprocessed (throttled, or past its
// 16 MB answer) are asked again after a backoff.
func (d *DynamoDB) batchGet(ctx context.Context, keys []string) ([]Lease, error) {
	report := capacityReport(ctx)
	out := make([]Lease, 0, len(keys))
	for len(keys) > 0 {
		n := min(len(keys), batchKeys)
		batch := make([]map[string]types.AttributeValue, n)
		for i, k := range keys[:n] {
			batch[i] = map[string]types.AttributeValue{attrKey: str(k)}
		}
		keys = keys[n:]
		delay := 25 * time.Millisecond
		for len(batch) > 0 {
			res, err := d.api.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{
				RequestItems:           map[string]types.KeysAndAttributes{d.table: {Keys: batch, ConsistentRead: aws.Bool(true)}},
				ReturnConsumedCapacity: asked(report),
			})
			if err != nil {
				return nil, d.wrap("list", "", err)
			}
			for _, c := range res.ConsumedCapacity {
				consumed(report, &c)
			}
			for _, item := range res.Responses[d.table] {
				l, err := decode(item)
				if err != nil {
					return nil, fmt.Errorf("lease: list table %q: %w", d.table, err)
				}
				out = append(out, l)
			}
			batch = res.UnprocessedKeys[d.table].Keys
			if len(batch) == 0 {
				break
			}
			if err := sleep(ctx, delay); err != nil {
				return nil, fmt.Errorf("lease: list table %q: %w", d.table, err)
			}
			delay = min(2*delay, time.Second)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
