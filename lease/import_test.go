package lease

import (
	"context"
	"errors"
	"strconv"
	"strings"
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
	rows, skipped, err := kclRows(items, "orders", "", "kcl")
	require.NoError(t, err)
	require.Equal(t, 1, skipped)
	require.Equal(t, []sourceRow{
		{shard: "shardId-000000000001", checkpoint: "TRIM_HORIZON", hasSub: true},
		{shard: "shardId-000000000002", checkpoint: "SHARD_END", hasSub: true},
	}, rows)

	// A stream recreated under the same name: the identifier must be named.
	items = append(items, kclItem("123:orders:1800:shardId-000000000000", "LATEST", 0, 1, ""))
	_, _, err = kclRows(items, "orders", "", "kcl")
	require.ErrorContains(t, err, "WithKCLStreamIdentifier")
	rows, skipped, err = kclRows(items, "orders", "123:orders:1800", "kcl")
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

	// A held kinesub lease refuses the whole import, unless overwriting; the refusal names each
	// holder once, with its shards.
	for _, key := range []string{"st/s1", "st/s2"} {
		ok, err := m.Acquire(ctx, key, "sub-1", 0)
		require.True(t, ok)
		require.NoError(t, err)
	}
	moved := []sourceRow{{shard: "s1", checkpoint: "200"}, {shard: "s2", checkpoint: "300"}, {shard: "s3", checkpoint: "400"}}
	_, err = i.apply(ctx, ImportReport{Stream: "st"}, moved, m)
	require.True(t, errors.Is(err, ErrImportRefused), "%v", err)
	require.ErrorContains(t, err, "kinesub leases held by sub-1 (shards s1): stop those subscribers, or use WithOverwrite")
	require.Equal(t, 1, strings.Count(err.Error(), "WithOverwrite"), "%v", err)
	l, _ = m.Read(ctx, "st/s1")
	require.Equal(t, "100", l.Checkpoint.Sequence, "nothing imported when one shard refuses")
	rep, err = NewImporter(WithOverwrite()).apply(ctx, ImportReport{Stream: "st"}, moved, m)
	require.NoError(t, err)
	require.Equal(t, []any{2, 1}, []any{rep.Imported, rep.Kept}, "s2's SHARD_END is ahead of 300: kept")
	l, _ = m.Read(ctx, "st/s1")
	require.Equal(t, Lease{Key: "st/s1", Counter: l.Counter, Checkpoint: Checkpoint{Sequence: "200"}}, l)
	l, _ = m.Read(ctx, "st/s2")
	require.Equal(t, Checkpoint{Sequence: ShardEnd}, l.Checkpoint)
	require.Equal(t, "sub-1", l.Owner, "a shard kept is not written")

	// One untranslatable row: nothing imported.
	_, err = i.apply(ctx, ImportReport{Stream: "st"}, []sourceRow{{shard: "s1", checkpoint: "400"}, {shard: "s9", checkpoint: "AT_TIMESTAMP"}}, m)
	require.ErrorIs(t, err, ErrImportRefused)
	l, _ = m.Read(ctx, "st/s1")
	require.Equal(t, "200", l.Checkpoint.Sequence)
}

// TestImportNeverMovesBack: importing again after kinesub read on leaves kinesub's checkpoints
// as they are, and shows them beside the imported ones; WithMoveBack moves them back.
func TestImportNeverMovesBack(t *testing.T) {
	ctx := context.Background()
	m := NewMemory()
	importer := func(ms int64, opts ...ImportOption) *Importer { // LATEST is the tip as of now
		i := NewImporter(opts...)
		i.now = func() time.Time { return time.UnixMilli(ms) }
		return i
	}
	rows := []sourceRow{
		{shard: "s1", checkpoint: "100", hasSub: true}, // kinesub read on: kept
		{shard: "s2", checkpoint: "200", hasSub: true}, // the old consumer read on: imported
		{shard: "s3", checkpoint: "300", sub: 1, hasSub: true},
		{shard: "s4", checkpoint: "LATEST"},
	}
	rep, err := importer(1000).apply(ctx, ImportReport{Stream: "st"}, rows, m)
	require.NoError(t, err)
	require.Equal(t, 4, rep.Imported)
	first := map[string]Checkpoint{}
	for _, sh := range rep.Shards {
		first[sh.Shard] = sh.Checkpoint
	}
	require.Equal(t, "0", rep.Shards[0].FromSubSequence)
	require.Equal(t, "", rep.Shards[3].FromSubSequence)

	// kinesub reads on: s1 past 100, s3 to the end of the aggregate 300.
	for key, cp := range map[string]Checkpoint{"st/s1": {Sequence: "150"}, "st/s3": {Sequence: "300"}} {
		ok, err := m.Acquire(ctx, key, "sub", 0)
		require.True(t, ok)
		require.NoError(t, err)
		l, _ := m.Read(ctx, key)
		ok, err = m.Checkpoint(ctx, key, l.Tenure(), cp)
		require.True(t, ok)
		require.NoError(t, err)
		ok, err = m.Release(ctx, key, l.Tenure())
		require.True(t, ok)
		require.NoError(t, err)
	}
	rows[1].checkpoint = "250"
	before, _ := m.List(ctx)
	rep, err = importer(2000, WithDryRun()).apply(ctx, ImportReport{Stream: "st"}, rows, m)
	require.NoError(t, err)
	got := map[string]ImportedShard{}
	for _, sh := range rep.Shards {
		got[sh.Shard] = sh
	}
	require.Equal(t, ImportedShard{Shard: "s1", From: "100", FromSubSequence: "0", Current: Checkpoint{Sequence: "150"}, Checkpoint: Checkpoint{Sequence: "100", SubSequence: 1}, Action: "keep"}, got["s1"])
	require.Equal(t, ImportedShard{Shard: "s2", From: "250", FromSubSequence: "0", Current: Checkpoint{Sequence: "200", SubSequence: 1}, Checkpoint: Checkpoint{Sequence: "250", SubSequence: 1}, Action: "import"}, got["s2"])
	require.Equal(t, "keep", got["s3"].Action, "the whole aggregate handled is past its user record 1")
	require.Equal(t, "keep", got["s4"].Action, "the tip as of an import is no progress: the first import's marker stays")
	require.Equal(t, []int{1, 3}, []int{rep.Imported, rep.Kept})

	rep, err = importer(3000).apply(ctx, ImportReport{Stream: "st"}, rows, m)
	require.NoError(t, err)
	l, _ := m.Read(ctx, "st/s1")
	require.Equal(t, Checkpoint{Sequence: "150"}, l.Checkpoint, "never moved back")
	l, _ = m.Read(ctx, "st/s4")
	require.Equal(t, first["s4"], l.Checkpoint)
	after, _ := m.List(ctx)
	require.Len(t, after, len(before))

	_, err = importer(4000, WithMoveBack()).apply(ctx, ImportReport{Stream: "st"}, rows, m)
	require.NoError(t, err)
	l, _ = m.Read(ctx, "st/s1")
	require.Equal(t, Checkpoint{Sequence: "100", SubSequence: 1}, l.Checkpoint, "WithMoveBack moves it back")
}

func TestBehind(t *testing.T) {
	seq := func(s string, sub int64) Checkpoint { return Checkpoint{Sequence: s, SubSequence: sub} }
	for _, c := range []struct {
		cur, cp Checkpoint
		want    bool
	}{
		{Checkpoint{}, seq("5", 0), true},
		{seq("5", 0), seq("6", 0), true},
		{seq("6", 0), seq("5", 0), false},
		{seq("99", 0), seq("100", 0), true}, // numbers, not strings
		{seq("5", 2), seq("5", 3), true},
		{seq("5", 3), seq("5", 2), false},
		{seq("5", 2), seq("5", 0), true}, // the whole record is past its user records
		{seq("5", 0), seq("5", 2), false},
		{seq("5", 0), seq(ShardEnd, 0), true},
		{seq(ShardEnd, 0), seq("5", 0), false},
		{seq(TrimHorizon, 0), seq("5", 0), false}, // markers compare with nothing
		{seq("5", 0), seq(TrimHorizon, 0), false},
	} {
		require.Equal(t, c.want, behind(c.cur, c.cp), "%+v behind %+v", c.cur, c.cp)
	}
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
	rows, _, err := kclRows([]map[string]types.AttributeValue{withPending, stateOnly, nullState}, "orders", "", "kcl")
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
	_, _, err = kclRows([]map[string]types.AttributeValue{withPending}, "orders", "", "kcl")
	require.ErrorContains(t, err, "pendingCheckpointSubSequenceNumber")
}
