package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Attribute names of a lease item.
const (
	attrKey        = "lease_key"              // S, partition key
	attrOwner      = "lease_owner"            // S, absent while nobody holds the lease
	attrExpiry     = "lease_expiry"           // N, milliseconds since the Unix epoch; absent when released or taken without a TTL
	attrCounter    = "lease_counter"          // N, bumped by every write: the fencing token
	attrCheckpoint = "checkpoint"             // S
	attrSubSeq     = "checkpoint_subsequence" // N, absent in items written before it existed: 0
	attrStream     = "lease_stream"           // S, the key before its first '/': the index's partition key (dynamodb_list.go)
	attrOrder      = "checkpoint_order"       // N, the order of the last CheckpointOrdered write; absent after a Checkpoint
	attrNote       = "lease_note"             // S, the last StealNote's note; absent until one
)

// Every expression goes through these placeholders, so no attribute name can collide with a
// DynamoDB reserved word.
var attrNames = map[string]string{
	"#owner":   attrOwner,
	"#expiry":  attrExpiry,
	"#counter": attrCounter,
	"#cp":      attrCheckpoint,
	"#sub":     attrSubSeq,
	"#stream":  attrStream,
	"#ord":     attrOrder,
	"#note":    attrNote,
}

// dynamoAPI is the subset of *dynamodb.Client the store calls; the signatures are the SDK's,
// so a test can put a fake in its place.
type dynamoAPI interface {
	CreateTable(ctx context.Context, params *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, params *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateItem(ctx context.Context, params *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(ctx context.Context, params *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Scan(ctx context.Context, params *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	DeleteItem(ctx context.Context, params *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	UpdateTable(ctx context.Context, params *dynamodb.UpdateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTableOutput, error)
	Query(ctx context.Context, params *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	BatchGetItem(ctx context.Context, params *dynamodb.BatchGetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
}

var (
	_ dynamoAPI = (*dynamodb.Client)(nil)
	_ Store     = (*DynamoDB)(nil)
)

// DynamoDB is a Store kept in a DynamoDB table, one item per lease, for several processes
// sharing a stream. It is safe for concurrent use.
//
// The table has a string partition key named lease_key and a global secondary index
// lease_stream-index (see ListPrefix); EnsureTable creates both. Each item holds lease_owner
// (absent while nobody holds the lease), lease_expiry (milliseconds since the Unix epoch; absent
// for a lease taken without a TTL),
// lease_counter (the fencing token, bumped by every write that changes the holder), checkpoint,
// checkpoint_subsequence (a number, Lease.SubSequence; an item without it reads as 0) and
// lease_stream (the key up to its first '/', absent in keys without one and in items written
// before it existed). Every write is a single conditional UpdateItem (DeleteItem for Delete),
// so the store needs no transactions; reads are strongly consistent, except ReadWeak. List
// Scans the table. Under a context from WithConsumedCapacity, every call reports the capacity
// it consumed.
//
// Expiry is computed from the local clock of the process that writes it and compared with
// the local clock of the process that tries to take the lease over. The store therefore
// assumes the clocks of all processes sharing the table differ by much less than the lease
// TTL; choose a TTL of several seconds at least (clock skew between NTP-synchronised hosts is
// usually milliseconds).
//
// Calls go through the client's retryer. Should a Steal be applied but its answer be lost,
// the retry meets the bumped counter and reports false, though the caller now holds the
// lease (a Read shows it). Likewise a Release or Delete whose answer was lost reports false,
// the lease being released or gone all the same. Renew and Checkpoint are safe to repeat.
type DynamoDB struct {
	api   dynamoAPI
	table string
	now   func() time.Time
	list  listing // how ListPrefix reads: dynamodb_list.go
}

// NewDynamoDB returns a store on the named table, reached through client. It does no I/O:
// call EnsureTable to create the table, or create it beforehand (string partition key
// lease_key, and the index that ListPrefix describes: global secondary index
// lease_stream-index, string partition key lease_stream, string sort key lease_key, keys
// only). An empty table name is reported, wrapping ErrInvalidArgument, by EnsureTable
// and by every Store method.
func NewDynamoDB(client *dynamodb.Client, table string) *DynamoDB {
	d := &DynamoDB{table: table, now: time.Now, list: listing{migrated: map[string]bool{}, rows: map[string]int{}}}
	if client != nil { // a nil *dynamodb.Client inside the interface would not compare nil
		d.api = client
	}
	return d
}

// Table returns the name of the table the store uses.
func (d *DynamoDB) Table() string { return d.table }

func (d *DynamoDB) checkTable() error {
	if d.table == "" {
		return fmt.Errorf("%w: empty DynamoDB table name", ErrInvalidArgument)
	}
	if d.api == nil {
		return fmt.Errorf("%w: nil DynamoDB client for table %q", ErrInvalidArgument, d.table)
	}
	return nil
}

// Acquire implements Store. It succeeds when the lease item is absent, has no owner, is
// already owner's, or has expired by the local clock (an item without an expiry, taken with a
// zero TTL, never expires).
func (d *DynamoDB) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := d.check(ctx, "DynamoDB.Acquire", key, owner, ttl, true, ttlOrZero); err != nil {
		return false, err
	}
	now := d.now()
	values := map[string]types.AttributeValue{":owner": str(owner), ":now": millis(now)}
	// A comparison with a missing attribute is false in DynamoDB: an item without an expiry
	// is never taken as expired.
	return d.update(ctx, "acquire", key, setHolder(values, now, ttl)+" ADD #counter :one",
		"attribute_not_exists(#owner) OR #owner = :owner OR #expiry < :now", values)
}

// setHolder is the part of an update expression that makes values[":owner"] the holder until
// now+ttl, or without an expiry for a zero ttl.
func setHolder(values map[string]types.AttributeValue, now time.Time, ttl time.Duration) string {
	if ttl == 0 {
		return "SET #owner = :owner REMOVE #expiry"
	}
	values[":expiry"] = millis(now.Add(ttl))
	return "SET #owner = :owner, #expiry = :expiry"
}

// Steal implements Store. The lease item must exist and its counter equal counter.
func (d *DynamoDB) Steal(ctx context.Context, key, owner string, counter int64, ttl time.Duration) (bool, error) {
	if err := d.check(ctx, "DynamoDB.Steal", key, owner, ttl, true, ttlOrZero); err != nil {
		return false, err
	}
	values := map[string]types.AttributeValue{":owner": str(owner), ":counter": num(counter)}
	return d.update(ctx, "steal", key, setHolder(values, d.now(), ttl)+" ADD #counter :one",
		"#counter = :counter", values)
}

// StealNote implements Store: Steal, setting lease_note in the same write.
func (d *DynamoDB) StealNote(ctx context.Context, key, owner string, counter int64, ttl time.Duration, note string) (bool, error) {
	if err := d.check(ctx, "DynamoDB.StealNote", key, owner, ttl, true, ttlOrZero); err != nil {
		return false, err
	}
	if err := checkNote(key, &note); err != nil {
		return false, err
	}
	values := map[string]types.AttributeValue{":owner": str(owner), ":counter": num(counter), ":note": str(note)}
	set, _ := strings.CutPrefix(setHolder(values, d.now(), ttl), "SET ")
	return d.update(ctx, "steal", key, "SET #note = :note, "+set+" ADD #counter :one",
		"#counter = :counter", values)
}

// Renew implements Store. The write is conditional on the expiry not moving back as well as
// on the holding; when that condition fails, a strongly consistent read tells a current
// holding (a later expiry stands: true) from one that is over (false).
func (d *DynamoDB) Renew(ctx context.Context, key string, t Tenure, ttl time.Duration) (bool, error) {
	if err := d.check(ctx, "DynamoDB.Renew", key, t.Owner, ttl, true, positiveTTL); err != nil {
		return false, err
	}
	ok, err := d.update(ctx, "renew", key,
		"SET #expiry = :expiry",
		"#owner = :owner AND #counter = :counter AND (attribute_not_exists(#expiry) OR #expiry <= :expiry)",
		map[string]types.AttributeValue{
			":owner":   str(t.Owner),
			":counter": num(t.Counter),
			":expiry":  millis(d.now().Add(ttl)),
		})
	if err != nil || ok {
		return ok, err
	}
	return d.stillHeld(ctx, key, t)
}

// stillHeld reports whether t is the lease's current holding: what a write whose condition
// also compared an order (an expiry, a checkpoint's write number) reports when the order
// failed it.
func (d *DynamoDB) stillHeld(ctx context.Context, key string, t Tenure) (bool, error) {
	l, err := d.Read(ctx, key)
	if err != nil {
		return false, err
	}
	return l.Tenure() == t, nil
}

// Checkpoint implements Store. An empty sequence is an error wrapping ErrInvalidArgument.
func (d *DynamoDB) Checkpoint(ctx context.Context, key string, t Tenure, cp Checkpoint) (bool, error) {
	if err := d.check(ctx, "DynamoDB.Checkpoint", key, t.Owner, 0, true, noTTL); err != nil {
		return false, err
	}
	if err := checkCheckpoint(key, cp); err != nil {
		return false, err
	}
	return d.update(ctx, "checkpoint", key,
		"SET #cp = :cp, #sub = :sub REMOVE #ord",
		"#owner = :owner AND #counter = :counter",
		map[string]types.AttributeValue{
			":owner":   str(t.Owner),
			":counter": num(t.Counter),
			":cp":      str(cp.Sequence),
			":sub":     num(cp.SubSequence),
		})
}

// CheckpointOrdered implements Store: one UpdateItem conditional on the holding
// and on checkpoint_order (the holding's counter and n, in one number) not being above this
// write's; when that fails, a strongly consistent read tells a newer write of the holding
// (true) from a holding that is over (false).
func (d *DynamoDB) CheckpointOrdered(ctx context.Context, key string, t Tenure, cp Checkpoint, n int64) (bool, error) {
	if err := d.check(ctx, "DynamoDB.CheckpointOrdered", key, t.Owner, 0, true, noTTL); err != nil {
		return false, err
	}
	if err := checkOrdered(key, cp, n); err != nil {
		return false, err
	}
	ok, err := d.update(ctx, "checkpoint", key,
		"SET #cp = :cp, #sub = :sub, #ord = :ord",
		"#owner = :owner AND #counter = :counter AND (attribute_not_exists(#ord) OR #ord <= :ord)",
		map[string]types.AttributeValue{
			":owner":   str(t.Owner),
			":counter": num(t.Counter),
			":cp":      str(cp.Sequence),
			":sub":     num(cp.SubSequence),
			":ord":     num(checkpointOrder(t, n)),
		})
	if err != nil || ok {
		return ok, err
	}
	return d.stillHeld(ctx, key, t)
}

// Release implements Store. It removes the owner and the expiry and keeps the checkpoint.
func (d *DynamoDB) Release(ctx context.Context, key string, t Tenure) (bool, error) {
	if err := d.check(ctx, "DynamoDB.Release", key, t.Owner, 0, true, noTTL); err != nil {
		return false, err
	}
	return d.update(ctx, "release", key,
		"REMOVE #owner, #expiry ADD #counter :one",
		"#owner = :owner AND #counter = :counter",
		map[string]types.AttributeValue{":owner": str(t.Owner), ":counter": num(t.Counter)})
}

// Delete implements Store, with one DeleteItem conditional on the counter and on nobody
// holding the lease (which an absent item fails).
func (d *DynamoDB) Delete(ctx context.Context, key string, counter int64) (bool, error) {
	if err := d.check(ctx, "DynamoDB.Delete", key, "", 0, false, noTTL); err != nil {
		return false, err
	}
	report := capacityReport(ctx)
	out, err := d.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:           aws.String(d.table),
		Key:                 map[string]types.AttributeValue{attrKey: str(key)},
		ConditionExpression: aws.String("#counter = :counter AND (attribute_not_exists(#owner) OR #expiry < :now)"),
		ExpressionAttributeNames: map[string]string{
			"#counter": attrCounter, "#owner": attrOwner, "#expiry": attrExpiry,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{":counter": num(counter), ":now": millis(d.now())},
		ReturnConsumedCapacity:    asked(report),
	})
	if err == nil {
		consumed(report, out.ConsumedCapacity)
	}
	return d.answer("delete", key, err)
}

// Read implements Store, with a strongly consistent read.
func (d *DynamoDB) Read(ctx context.Context, key string) (Lease, error) {
	return d.read(ctx, key, true)
}

// ReadWeak reads a lease as Read does, with an eventually consistent read: half the read units of
// Read.
func (d *DynamoDB) ReadWeak(ctx context.Context, key string) (Lease, error) {
	return d.read(ctx, key, false)
}

func (d *DynamoDB) read(ctx context.Context, key string, consistent bool) (Lease, error) {
	method := "DynamoDB.Read"
	if !consistent {
		method = "DynamoDB.ReadWeak"
	}
	if err := d.check(ctx, method, key, "", 0, false, noTTL); err != nil {
		return Lease{}, err
	}
	report := capacityReport(ctx)
	out, err := d.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:              aws.String(d.table),
		Key:                    map[string]types.AttributeValue{attrKey: str(key)},
		ConsistentRead:         aws.Bool(consistent),
		ReturnConsumedCapacity: asked(report),
	})
	if err != nil {
		return Lease{}, d.wrap("read", key, err)
	}
	consumed(report, out.ConsumedCapacity)
	if out.Item == nil {
		return Lease{Key: key}, nil
	}
	l, err := decode(out.Item)
	if err != nil {
		return Lease{}, fmt.Errorf("lease: read %q: %w", key, err)
	}
	return l, nil
}

func (d *DynamoDB) check(ctx context.Context, method, key, owner string, ttl time.Duration, needOwner bool, rule ttlRule) error {
	if err := checkContext(ctx, method); err != nil {
		return err
	}
	if err := d.checkTable(); err != nil {
		return err
	}
	return checkArgs(key, owner, ttl, needOwner, rule)
}

// update applies one conditional UpdateItem that also bumps the counter. A failed condition
// is an answer, not an error: it reports false.
//
// Every write also sets lease_stream when the key has a stream part and the item lacks it, so
// that the item created by an Acquire is in the index, and an item written before the index
// existed joins it at its first write. Setting it to the value it has changes nothing in the
// index: DynamoDB writes to a global secondary index only when an item enters or leaves it or
// one of its projected attributes changes, and the index projects only the keys.
func (d *DynamoDB) update(ctx context.Context, op, key, update, cond string, values map[string]types.AttributeValue) (bool, error) {
	if strings.Contains(update, ":one") {
		values[":one"] = num(1) // DynamoDB rejects unused values
	}
	if stream, ok := streamOf(key); ok {
		values[":stream"] = str(stream)
		const set = "#stream = if_not_exists(#stream, :stream)"
		if rest, ok := strings.CutPrefix(update, "SET "); ok {
			update = "SET " + set + ", " + rest
		} else {
			update = "SET " + set + " " + update
		}
	}
	names := make(map[string]string, len(attrNames))
	for placeholder, name := range attrNames {
		// DynamoDB rejects unused placeholders; none is a prefix of another.
		if strings.Contains(update, placeholder) || strings.Contains(cond, placeholder) {
			names[placeholder] = name
		}
	}
	report := capacityReport(ctx)
	out, err := d.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(d.table),
		Key:                       map[string]types.AttributeValue{attrKey: str(key)},
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		ReturnConsumedCapacity:    asked(report),
	})
	if err == nil {
		consumed(report, out.ConsumedCapacity)
	}
	return d.answer(op, key, err)
}

// answer turns the error of a conditional write into its result: a failed condition reports
// false.
func (d *DynamoDB) answer(op, key string, err error) (bool, error) {
	var failed *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &failed):
		return false, nil
	default:
		return false, d.wrap(op, key, err)
	}
}

// wrap adds the operation and key to err, and ErrTableNotFound when the table is missing.
func (d *DynamoDB) wrap(op, key string, err error) error {
	what := op
	if key != "" {
		what = fmt.Sprintf("%s %q", op, key)
	}
	var notFound *types.ResourceNotFoundException
	if errors.As(err, &notFound) {
		return fmt.Errorf("lease: %s: %w: DynamoDB table %q does not exist (create it or call EnsureTable): %w",
			what, ErrTableNotFound, d.table, err)
	}
	return fmt.Errorf("lease: %s: %w", what, err)
}

func decode(item map[string]types.AttributeValue) (Lease, error) {
	var l Lease
	var err error
	if l.Key, err = getString(item, attrKey); err != nil {
		return Lease{}, err
	}
	if l.Owner, err = getString(item, attrOwner); err != nil {
		return Lease{}, err
	}
	if l.Checkpoint.Sequence, err = getString(item, attrCheckpoint); err != nil {
		return Lease{}, err
	}
	if l.Checkpoint.SubSequence, err = getNumber(item, attrSubSeq); err != nil {
		return Lease{}, err
	}
	if l.Counter, err = getNumber(item, attrCounter); err != nil {
		return Lease{}, err
	}
	if l.Note, err = getString(item, attrNote); err != nil {
		return Lease{}, err
	}
	ms, err := getNumber(item, attrExpiry)
	if err != nil {
		return Lease{}, err
	}
	if ms != 0 {
		l.Expiry = time.UnixMilli(ms)
	}
	return l, nil
}

func getString(item map[string]types.AttributeValue, name string) (string, error) {
	v, ok := item[name]
	if !ok {
		return "", nil
	}
	s, ok := v.(*types.AttributeValueMemberS)
	if !ok {
		return "", fmt.Errorf("attribute %s is %T, want a string", name, v)
	}
	return s.Value, nil
}

func getNumber(item map[string]types.AttributeValue, name string) (int64, error) {
	v, ok := item[name]
	if !ok {
		return 0, nil
	}
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("attribute %s is %T, want a number", name, v)
	}
	i, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("attribute %s: %w", name, err)
	}
	return i, nil
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func num(i int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(i, 10)}
}

func millis(t time.Time) types.AttributeValue { return num(t.UnixMilli()) }
