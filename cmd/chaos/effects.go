package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gostream/kinesub/dynamosink"
)

// Effects modes (Config.Effects): every record's effect is to add one to a counter item of its
// own in a DynamoDB table, written through dynamosink (EffectsSink) or with a plain UpdateItem
// (EffectsPlain). The run then counts, per measured record, how often its effect was applied.
const (
	EffectsSink  = "sink"
	EffectsPlain = "plain"
)

// EffectFigures is what an effects run counts in the effects table once the consumers stopped.
type EffectFigures struct {
	Mode    string // EffectsSink or EffectsPlain
	Applied int    // measured records whose effect was applied at least once
	Twice   int    // measured records whose effect was applied more than once
	Extra   int    // applications beyond the first, over all measured records
	Lost    int    // measured records whose effect was never applied
}

func (e *EffectFigures) String() string {
	return fmt.Sprintf("effects:     %s: %d applied, %d applied twice or more (%d extra applications), %d lost\n",
		e.Mode, e.Applied, e.Twice, e.Extra, e.Lost)
}

// violations lists what the figures break: an effect never applied, and, through dynamosink,
// one applied twice (a plain write is expected to apply some twice).
func (e *EffectFigures) violations() []string {
	var v []string
	if e.Lost > 0 {
		v = append(v, fmt.Sprintf("%d records' effects never applied", e.Lost))
	}
	if e.Mode == EffectsSink && e.Twice > 0 {
		v = append(v, fmt.Sprintf("%d records' effects applied more than once through dynamosink", e.Twice))
	}
	return v
}

// effectTables creates the run's effects table and, for the sink, its mark table.
func (r *run) effectTables(ctx context.Context) error {
	r.effects, r.marks = "chaos-effects-"+r.suffix, "chaos-marks-"+r.suffix
	if err := dynamosink.CreateTable(ctx, r.dc, r.marks); err != nil {
		return err
	}
	_, err := r.dc.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(r.effects),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		return fmt.Errorf("effects table: %w", err)
	}
	return dynamodb.NewTableExistsWaiter(r.dc, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 100*time.Millisecond, 2*time.Second // the SDK's default waits 20s at first
	}).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(r.effects)}, 30*time.Second)
}

// countEffects reads the effects table: how many times each measured record's effect was
// applied, by record index.
func (r *run) countEffects(ctx context.Context) ([]int, error) {
	counts := make([]int, r.cfg.Records)
	p := dynamodb.NewScanPaginator(r.dc, &dynamodb.ScanInput{TableName: aws.String(r.effects), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("scan effects: %w", err)
		}
		for _, it := range page.Items {
			id, _ := it["id"].(*types.AttributeValueMemberS)
			n, _ := it["n"].(*types.AttributeValueMemberN)
			if id == nil || n == nil {
				continue
			}
			key, _, _ := strings.Cut(id.Value, "/")
			i, ok := recordID(key, id.Value, r.cfg.Keys, r.cfg.Records)
			if !ok {
				continue // a warm-up record
			}
			c, err := strconv.Atoi(n.Value)
			if err != nil {
				return nil, fmt.Errorf("effects item %s: n %q", id.Value, n.Value)
			}
			counts[i] = c
		}
	}
	return counts, nil
}

// awaitEffects waits until every measured record's effect was applied, or until deadline: a
// record logged by a process killed before it applied the effect is applied by the shard's
// next holder, which may come after the last record was first logged.
func (r *run) awaitEffects(ctx context.Context, deadline time.Time) error {
	for {
		counts, err := r.countEffects(ctx)
		if err != nil {
			return err
		}
		missing := 0
		for _, c := range counts {
			if c == 0 {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			return nil
		}
		if err := sleepUntil(ctx, time.Now().Add(500*time.Millisecond)); err != nil {
			return err
		}
	}
}

// effectFigures counts the effects once the consumers stopped.
func (r *run) effectFigures(ctx context.Context) (*EffectFigures, error) {
	counts, err := r.countEffects(ctx)
	if err != nil {
		return nil, err
	}
	f := &EffectFigures{Mode: r.cfg.Effects}
	for _, c := range counts {
		switch {
		case c == 0:
			f.Lost++
		case c > 1:
			f.Twice++
			f.Extra += c - 1
			fallthrough
		default:
			f.Applied++
		}
	}
	return f, nil
}
