package lease

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"
)

func TestTranslateCheckpoint(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	at := time.UnixMilli(1_600_000_000_000)
	cases := []struct {
		name string
		row  sourceRow
		at   time.Time
		want Checkpoint
		ok   bool
		err  bool
	}{
		{"none yet", sourceRow{shard: "s"}, at, Checkpoint{}, false, false},
		{"horizon", sourceRow{checkpoint: "TRIM_HORIZON"}, at, Checkpoint{Sequence: TrimHorizon}, true, false},
		{"shard end", sourceRow{checkpoint: "SHARD_END"}, at, Checkpoint{Sequence: ShardEnd}, true, false},
		{"latest is the tip as of the import", sourceRow{checkpoint: "LATEST"}, at, Checkpoint{Sequence: "AT_TIMESTAMP:1700000000000"}, true, false},
		{"at timestamp", sourceRow{checkpoint: "AT_TIMESTAMP"}, at, Checkpoint{Sequence: "AT_TIMESTAMP:1600000000000"}, true, false},
		{"at timestamp without the instant", sourceRow{checkpoint: "AT_TIMESTAMP"}, time.Time{}, Checkpoint{}, false, true},
		{"sequence, no sub-sequence", sourceRow{checkpoint: "4960"}, at, Checkpoint{Sequence: "4960"}, true, false},
		{"sequence, sub-sequence 0: the record (or user record 0) handled", sourceRow{checkpoint: "4960", hasSub: true}, at, Checkpoint{Sequence: "4960", SubSequence: 1}, true, false},
		{"user record 3 handled: resume at 4", sourceRow{checkpoint: "4960", sub: 3, hasSub: true}, at, Checkpoint{Sequence: "4960", SubSequence: 4}, true, false},
		{"negative sub-sequence", sourceRow{checkpoint: "4960", sub: -1, hasSub: true}, at, Checkpoint{}, false, true},
		{"garbage", sourceRow{checkpoint: "12ab"}, at, Checkpoint{}, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok, err := translateCheckpoint(c.row, c.at, now)
			require.Equal(t, c.err, err != nil, "%v", err)
			require.Equal(t, c.ok, ok)
			require.Equal(t, c.want, got)
		})
	}
}

func kclItem(key, cp string, sub, counter int, owner string) map[string]types.AttributeValue {
	it := map[string]types.AttributeValue{
		"leaseKey":                    &types.AttributeValueMemberS{Value: key},
		"checkpoint":                  &types.AttributeValueMemberS{Value: cp},
		"checkpointSubSequenceNumber": &types.AttributeValueMemberN{Value: itoa(sub)},
		"leaseCounter":                &types.AttributeValueMemberN{Value: itoa(counter)},
	}
	if owner != "" {
		it["leaseOwner"] = &types.AttributeValueMemberS{Value: owner}
	}
	return it
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestKCLRows(t *testing.T) {
	items := []map[string]types.AttributeValue{
		kclItem("shardId-000000000001", "TRIM_HORIZON", 0, 1, ""),
		kclItem("123:orders:1700:shardId-000000000002", "SHARD_END", 0, 1, ""),
		kclItem("123:other:1700:shardId-000000000002", "SHARD_END", 0, 1, ""),
	}
	rows, skipped, err := kclRows(items, "orders", "")
	require.NoError(t, err)
	require.Equal(t, 1, skipped)
	require.Equal(t, []sourceRow{
		{shard: "shardId-000000000001", checkpoint: "TRIM_HORIZON", hasSub: true},
		{shard: "shardId-000000000002", checkpoint: "SHARD_END", hasSub: true},
	}, rows)

	// A stream recreated under the same name: the identifier must be named.
	items = append(items, kclItem("123:orders:1800:shardId-000000000000", "LATEST", 0, 1, ""))
	_, _, err = kclRows(items, "orders", "")
	require.ErrorContains(t, err, "WithKCLStreamIdentifier")
	rows, skipped, err = kclRows(items, "orders", "123:orders:1800")
	require.NoError(t, err)
	require.Equal(t, 2, skipped, "the other identifier's rows and the other stream's")
	require.Len(t, rows, 2, "the bare shard id row and the selected identifier's")
}

func TestLiveWorkers(t *testing.T) {
	before := []map[string]types.AttributeValue{kclItem("a", "1", 0, 1, "w1"), kclItem("b", "1", 0, 5, "w2")}
	after := []map[string]types.AttributeValue{kclItem("a", "1", 0, 2, "w1"), kclItem("b", "1", 0, 5, "w2"), kclItem("c", "1", 0, 1, "w3")}
	require.Equal(t, []string{"w1", "w3"}, liveWorkers(before, after))
	require.Empty(t, liveWorkers(before, before))
}

func TestImportApply(t *testing.T) {
	ctx := context.Background()
	m := NewMemory()
	i := NewImporter()
	rows := []sourceRow{{shard: "s1", checkpoint: "100", sub: 2, hasSub: true}, {shard: "s2", checkpoint: "SHARD_END"}, {shard: "s3"}}

	rep, err := NewImporter(WithDryRun()).apply(ctx, ImportReport{Stream: "st"}, rows, m)
	require.NoError(t, err)
	require.Equal(t, 2, rep.Imported)
	all, _ := m.List(ctx)
	require.Empty(t, all, "a dry run writes nothing")

	rep, err = i.apply(ctx, ImportReport{Stream: "st"}, rows, m)
	require.NoError(t, err)
	require.Equal(t, 2, rep.Imported)
	require.Equal(t, 1, rep.Skipped)
	l, _ := m.Read(ctx, "st/s1")
	require.Equal(t, Checkpoint{Sequence: "100", SubSequence: 3}, l.Checkpoint)
	require.Empty(t, l.Owner, "imported leases are free")
	require.True(t, l.Expiry.IsZero(), "imported leases carry no expiry")

	before, _ := m.List(ctx)
	rep, err = i.apply(ctx, ImportReport{Stream: "st"}, rows, m)
	require.NoError(t, err)
	require.Equal(t, 0, rep.Imported)
	require.Equal(t, 2, rep.Unchanged)
	after, _ := m.List(ctx)
	require.Equal(t, before, after, "importing twice changes nothing")

	// A held kinesub lease refuses the whole import, unless overwriting.
	ok, err := m.Acquire(ctx, "st/s2", "sub-1", 0)
	require.True(t, ok)
	require.NoError(t, err)
	moved := []sourceRow{{shard: "s1", checkpoint: "200"}, {shard: "s2", checkpoint: "300"}}
	_, err = i.apply(ctx, ImportReport{Stream: "st"}, moved, m)
	require.True(t, errors.Is(err, ErrImportRefused), "%v", err)
	require.ErrorContains(t, err, "sub-1")
	l, _ = m.Read(ctx, "st/s1")
	require.Equal(t, "100", l.Checkpoint.Sequence, "nothing imported when one shard refuses")
	rep, err = NewImporter(WithOverwrite()).apply(ctx, ImportReport{Stream: "st"}, moved, m)
	require.NoError(t, err)
	require.Equal(t, 2, rep.Imported)
	l, _ = m.Read(ctx, "st/s2")
	require.Equal(t, Lease{Key: "st/s2", Counter: l.Counter, Checkpoint: Checkpoint{Sequence: "300"}}, l)

	// One untranslatable row: nothing imported.
	_, err = i.apply(ctx, ImportReport{Stream: "st"}, []sourceRow{{shard: "s1", checkpoint: "400"}, {shard: "s9", checkpoint: "AT_TIMESTAMP"}}, m)
	require.ErrorIs(t, err, ErrImportRefused)
	l, _ = m.Read(ctx, "st/s1")
	require.Equal(t, "200", l.Checkpoint.Sequence)
}

func crateItem(key, cp, owner string, expiry int64, extra ...string) map[string]types.AttributeValue {
	it := map[string]types.AttributeValue{
		"lease_key":     &types.AttributeValueMemberS{Value: key},
		"lease_counter": &types.AttributeValueMemberN{Value: "4"},
	}
	if cp != "" {
		it["checkpoint"] = &types.AttributeValueMemberS{Value: cp}
	}
	if owner != "" {
		it["lease_owner"] = &types.AttributeValueMemberS{Value: owner}
		it["lease_expiry"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(expiry, 10)}
	}
	for _, name := range extra {
		it[name] = &types.AttributeValueMemberN{Value: "2"}
	}
	return it
}

func TestCrateRows(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	items := []map[string]types.AttributeValue{
		crateItem("orders:shardId-000000000000", "100", "", 0),
		crateItem("shardId-000000000000", "50", "", 0),         // 0.6, superseded by the 0.7 row
		crateItem("orders:shardId-000000000001", "", "old", 1), // no checkpoint, an expired lease
		crateItem("shardId-000000000001", "SHARD_END", "", 0),  // 0.6, taken: the 0.7 row has none
		crateItem("shardId-000000000002", "300", "", 0),
		crateItem("refunds:shardId-000000000000", "7", "live-1", now.UnixMilli()+1),
		crateItem("orders/shardId-000000000003", "9", "", 0), // a kinesub key: not the crate's
	}
	rows, skipped, live, err := crateRows(items, "orders", true, now)
	require.NoError(t, err)
	require.Equal(t, []sourceRow{
		{shard: "shardId-000000000000", checkpoint: "100"},
		{shard: "shardId-000000000001", checkpoint: "SHARD_END"},
		{shard: "shardId-000000000002", checkpoint: "300"},
	}, rows, "the crate stores no sub-sequence: each checkpoint is a whole record")
	require.Equal(t, 4, skipped, "another stream's row, the kinesub key, the superseded 0.6 row and the 0.7 row without checkpoint")
	require.Empty(t, live, "an expired lease is no live instance; another stream's lease is not read")

	rows, _, _, err = crateRows(items, "orders", false, now)
	require.NoError(t, err)
	require.Equal(t, []sourceRow{{shard: "shardId-000000000000", checkpoint: "100"}, {shard: "shardId-000000000001"}}, rows,
		"without legacy the 0.6 rows are not read")

	_, _, live, err = crateRows(items, "refunds", false, now)
	require.NoError(t, err)
	require.Equal(t, []string{"live-1"}, live)

	for name, it := range map[string]map[string]types.AttributeValue{
		"a sub-sequence attribute": crateItem("orders:shardId-000000000004", "100", "", 0, "checkpoint_subsequence"),
		"the KCL's sub-sequence":   crateItem("orders:shardId-000000000004", "100", "", 0, "checkpointSubSequenceNumber"),
		"a marker the crate lacks": crateItem("orders:shardId-000000000004", "TRIM_HORIZON", "", 0),
		"not a sequence number":    crateItem("orders:shardId-000000000004", "12ab", "", 0),
	} {
		_, _, _, err := crateRows(append(items[:1:1], it), "orders", false, now)
		require.Error(t, err, name)
		require.ErrorContains(t, err, "shardId-000000000004", name)
	}
}

// TestImportPending: a KCL row's prepared, uncommitted checkpoint is listed in the report, in a
// dry run too, and the committed checkpoint is the one written.
func TestImportPending(t *testing.T) {
	ctx := context.Background()
	withPending := kclItem("shardId-000000000001", "100", 1, 3, "")
	withPending["pendingCheckpoint"] = &types.AttributeValueMemberS{Value: "200"}
	withPending["pendingCheckpointSubSequenceNumber"] = &types.AttributeValueMemberN{Value: "4"}
	withPending["pendingCheckpointState"] = &types.AttributeValueMemberB{Value: []byte("app state")}
	stateOnly := kclItem("shardId-000000000002", "SHARD_END", 0, 3, "")
	stateOnly["pendingCheckpointState"] = &types.AttributeValueMemberN{Value: "0"} // as the KCL's serializer writes it
	nullState := kclItem("shardId-000000000003", "300", 0, 3, "")
	nullState["pendingCheckpointState"] = &types.AttributeValueMemberNULL{Value: true}
	rows, _, err := kclRows([]map[string]types.AttributeValue{withPending, stateOnly, nullState}, "orders", "")
	require.NoError(t, err)
	want := []PendingCheckpoint{
		{Shard: "shardId-000000000001", Sequence: "200", SubSequence: 4, State: true},
		{Shard: "shardId-000000000002", State: true},
	}
	for _, dry := range []bool{true, false} {
		m := NewMemory()
		i := NewImporter()
		if dry {
			i = NewImporter(WithDryRun())
		}
		rep, err := i.apply(ctx, ImportReport{Stream: "orders"}, rows, m)
		require.NoError(t, err)
		require.Equal(t, want, rep.Pending, "dry run %v", dry)
		require.Equal(t, 3, rep.Imported)
		if !dry {
			l, err := m.Read(ctx, "orders/shardId-000000000001")
			require.NoError(t, err)
			require.Equal(t, Checkpoint{Sequence: "100", SubSequence: 2}, l.Checkpoint, "the committed checkpoint, not the pending one")
		}
	}

	withPending["pendingCheckpointSubSequenceNumber"] = &types.AttributeValueMemberS{Value: "x"}
	_, _, err = kclRows([]map[string]types.AttributeValue{withPending}, "orders", "")
	require.ErrorContains(t, err, "pendingCheckpointSubSequenceNumber")
}
