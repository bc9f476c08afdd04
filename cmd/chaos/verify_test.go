package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

var t0 = time.Unix(1_000_000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// fakeLog writes a consumer log by hand, with chosen times.
type fakeLog struct {
	owner  string
	lines  []string
	killed time.Time
}

func (f *fakeLog) event(ms int, msg string, attrs map[string]string) *fakeLog {
	js, _ := json.Marshal(attrs)
	f.lines = append(f.lines, fmt.Sprintf("E\t%d\t%s\t%s\t%s", at(ms).UnixNano(), f.owner, msg, js))
	return f
}

func (f *fakeLog) take(ms int, shard, checkpoint string) *fakeLog {
	return f.event(ms, "lease taken", map[string]string{"shard_id": shard, "checkpoint": checkpoint})
}

func (f *fakeLog) checkpoint(ms int, shard, seq string) *fakeLog {
	return f.event(ms, "checkpoint", map[string]string{"shard_id": shard, "sequence": seq})
}

// deliver logs record id (of testKeys keys) read from shard at seq.
func (f *fakeLog) deliver(ms int, shard, seq string, id int) *fakeLog {
	key := recordKey(id % testKeys)
	payload := strconv.Quote(key + "/" + strconv.Itoa(id/testKeys))
	f.lines = append(f.lines, fmt.Sprintf("D\t%d\t%s\t%s\t%s\t%s\t%s", at(ms).UnixNano(), f.owner, shard, seq, key, payload))
	return f
}

const (
	testKeys    = 2
	testRecords = 4
	testStream  = "s"
	shard0      = "shardId-0"
)

// scenario is one shard read by a, killed at 400ms after checkpointing its first record, then
// taken over by b, which re-reads two records and reads the last one.
type scenario struct {
	a, b    *fakeLog
	final   []lease.Lease
	kills   []killEvent
	deploys []deployWindow
	process bool // the consumers ran Subscriber.Process
}

func baseScenario() *scenario {
	a := &fakeLog{owner: "a", killed: at(400)}
	a.take(0, shard0, "").
		deliver(10, shard0, "10", 0).deliver(20, shard0, "11", 1).
		checkpoint(30, shard0, "10").
		deliver(40, shard0, "12", 2)
	b := &fakeLog{owner: "b"}
	b.take(2000, shard0, "10").
		deliver(2010, shard0, "11", 1).deliver(2020, shard0, "12", 2).deliver(2030, shard0, "13", 3).
		checkpoint(2100, shard0, "13").
		event(3000, "lease released", map[string]string{"shard_id": shard0})
	return &scenario{
		a: a, b: b,
		final: []lease.Lease{
			{Key: testStream + "/" + shard0, Checkpoint: lease.Checkpoint{Sequence: "13"}},
			// The killed process's heartbeat row, not yet deleted as stale: not a shard.
			{Key: testStream + "/~v2/owner/a", Owner: "a", Expiry: at(1400), Counter: 4},
			// The lease protocol's mark and the change row: not shards.
			{Key: testStream + "/kinesub-lease-protocol-2", Owner: "kinesub lease protocol 2", Counter: 1},
			{Key: testStream + "/~table/changes", Owner: "b", Counter: 9},
		},
		kills: []killEvent{{owner: "a", at: at(400)}},
	}
}

func (sc *scenario) verify(t *testing.T) *Report {
	t.Helper()
	dir := t.TempDir()
	in := verifyInput{
		records: testRecords, keys: testKeys, shards: 1, stream: testStream,
		maxTakeover: 2 * time.Second,
		final:       sc.final, kills: sc.kills, deploys: sc.deploys, process: sc.process,
	}
	for _, f := range []*fakeLog{sc.a, sc.b} {
		path := filepath.Join(dir, f.owner+".log")
		require.NoError(t, os.WriteFile(path, []byte(strings.Join(f.lines, "\n")+"\n"), 0o644))
		in.logs = append(in.logs, incarnation{owner: f.owner, path: path, killed: f.killed})
	}
	rep, err := verify(in)
	require.NoError(t, err)
	return rep
}

func TestVerifyAcceptsRedeliveryAfterKill(t *testing.T) {
	rep := baseScenario().verify(t)
	assert.Empty(t, rep.Violations)
	assert.Equal(t, 0, rep.Lost)
	assert.Equal(t, 6, rep.Delivered)
	assert.Equal(t, 2, rep.Duplicated)
	assert.Equal(t, 2, rep.DupAfterKill)
	assert.Equal(t, []time.Duration{1600 * time.Millisecond}, rep.Takeovers)
	assert.Zero(t, rep.MaxOverlap)
}

// A lease stolen for balance: the new owner delivers again what its previous owner delivered
// and did not checkpoint, after the previous owner's last delivery. Any delivery of the previous
// owner after the new owner's first would be two readers at once (TestVerifyFindsViolations).
func TestVerifyAcceptsRedeliveryAfterSteal(t *testing.T) {
	sc := baseScenario()
	sc.a.killed = time.Time{}
	sc.a.deliver(1900, shard0, "13", 3).event(2100, "lease lost", map[string]string{"shard_id": shard0})
	sc.b.event(2000, "lease taken over for balance", map[string]string{"shard_id": shard0, "from": "a"})
	sc.kills = nil
	rep := sc.verify(t)
	assert.Empty(t, rep.Violations)
	assert.Equal(t, 3, rep.Duplicated)
	assert.Equal(t, 3, rep.DupAfterLoss)
	assert.Equal(t, 1, rep.Steals)
	assert.Zero(t, rep.MaxOverlap)
}

// A process killed just after its lease was stolen, before it noticed, still seems to hold
// the shard in its own log: that is no takeover after a kill.
func TestVerifyIgnoresTakeoverBeforeKill(t *testing.T) {
	sc := baseScenario()
	sc.kills[0].at = at(2005)
	sc.a.killed = at(2005)
	rep := sc.verify(t)
	assert.Empty(t, rep.Violations)
	assert.Empty(t, rep.Takeovers)
}

func TestVerifyFindsViolations(t *testing.T) {
	tests := []struct {
		name   string
		change func(sc *scenario)
		want   string
	}{
		{"resume skips a record", func(sc *scenario) {
			sc.b = (&fakeLog{owner: "b"}).take(2000, shard0, "10").
				deliver(2020, shard0, "12", 2).deliver(2030, shard0, "13", 3).
				event(3000, "lease released", map[string]string{"shard_id": shard0})
		}, "resumed at 12, not after its checkpoint 10"},
		{"gap within a tenure", func(sc *scenario) {
			sc.b = (&fakeLog{owner: "b"}).take(2000, shard0, "10").
				deliver(2010, shard0, "11", 1).deliver(2030, shard0, "13", 3).
				event(3000, "lease released", map[string]string{"shard_id": shard0})
		}, "skipped forward 1 records at 13"},
		{"record lost", func(sc *scenario) {
			sc.b = (&fakeLog{owner: "b"}).take(2000, shard0, "10").
				deliver(2010, shard0, "11", 1).deliver(2020, shard0, "12", 2).
				event(3000, "lease released", map[string]string{"shard_id": shard0})
			sc.final[0].Checkpoint.Sequence = "12"
		}, "lost: k00001/1 was never delivered"},
		{"redelivered after a clean release", func(sc *scenario) {
			sc.a.killed = time.Time{}
			sc.a.event(50, "lease released", map[string]string{"shard_id": shard0})
			sc.kills = nil
		}, "though a's tenure ended \"released\""},
		{"two readers at once", func(sc *scenario) {
			sc.a.killed = time.Time{}
			sc.a.deliver(2500, shard0, "13", 3).event(2600, "lease lost", map[string]string{"shard_id": shard0})
			sc.b = (&fakeLog{owner: "b"}).take(2000, shard0, "10").
				deliver(2010, shard0, "11", 1).deliver(2020, shard0, "12", 2).deliver(2800, shard0, "13", 3).
				event(3000, "lease released", map[string]string{"shard_id": shard0})
			sc.kills = nil
		}, "a and b both delivered from shardId-0 for 490ms"},
		{"stale reader after a steal, for a moment", func(sc *scenario) {
			sc.a.killed = time.Time{}
			sc.a.deliver(2011, shard0, "13", 3).event(2100, "lease lost", map[string]string{"shard_id": shard0})
			sc.b.event(2000, "lease taken over for balance", map[string]string{"shard_id": shard0, "from": "a"})
			sc.kills = nil
		}, "a and b both delivered from shardId-0 for 1ms"},
		{"takeover behind a written checkpoint", func(sc *scenario) {
			sc.a.checkpoint(45, shard0, "12")
		}, "b took shardId-0 at checkpoint \"10\", but a had written 12"},
		{"lease kept after close", func(sc *scenario) {
			sc.final[0].Owner = "b"
		}, "lease of shardId-0 still held by b"},
		{"final checkpoint behind", func(sc *scenario) {
			sc.final[0].Checkpoint.Sequence = "12"
		}, "final checkpoint of shardId-0 is \"12\", not its newest record 13"},
		{"slow takeover", func(sc *scenario) {
			sc.kills[0].at = at(-100)
		}, "taken over by b 2.1s after the kill"},
		{"delivery without a lease", func(sc *scenario) {
			sc.b.deliver(3100, "shardId-1", "99", 3)
		}, "b delivered shardId-1/99 without ever taking its lease"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := baseScenario()
			tt.change(sc)
			rep := sc.verify(t)
			require.NotEmpty(t, rep.Violations)
			assert.Contains(t, strings.Join(rep.Violations, "\n"), tt.want)
		})
	}
}

// With Process, a tenure logs its shard's records out of sequence order across keys; that is
// no violation, while a key's record handled before the one before it is.
func TestVerifyProcessKeyOrder(t *testing.T) {
	outOfShardOrder := func(sc *scenario) {
		sc.a = &fakeLog{owner: "a", killed: at(400)}
		sc.a.take(0, shard0, "").
			deliver(10, shard0, "11", 1).deliver(20, shard0, "10", 0).
			checkpoint(30, shard0, "10").
			deliver(40, shard0, "12", 2)
	}
	sc := baseScenario()
	outOfShardOrder(sc)
	require.Contains(t, strings.Join(sc.verify(t).Violations, "\n"), "went back", "a Messages consumer must read in order")
	sc.process = true
	assert.Empty(t, sc.verify(t).Violations)

	sc = baseScenario()
	sc.process = true
	sc.a = &fakeLog{owner: "a", killed: at(400)}
	sc.a.take(0, shard0, "").
		deliver(10, shard0, "12", 2).deliver(20, shard0, "10", 0).deliver(25, shard0, "11", 1).
		checkpoint(30, shard0, "10")
	assert.Contains(t, strings.Join(sc.verify(t).Violations, "\n"), "key k00000: record 1 first handled at")
}

func (f *fakeLog) ack(ms int, shard, seq string) *fakeLog {
	f.lines = append(f.lines, fmt.Sprintf("A\t%d\t%s\t%s\t%s", at(ms).UnixNano(), f.owner, shard, seq))
	return f
}

// deployScenario is one shard read by a, which acks and checkpoints record 10, acks 11, gets
// SIGTERM at 500ms and releases the shard after writing 11 as its final checkpoint; b takes it
// at that checkpoint and reads 12 and 13. One deploy window covers the handoff.
func deployScenario() *scenario {
	a := &fakeLog{owner: "a"}
	a.take(0, shard0, "").
		deliver(10, shard0, "10", 0).ack(11, shard0, "10").
		checkpoint(30, shard0, "10").
		deliver(40, shard0, "11", 1).ack(41, shard0, "11").
		event(500, "closing", nil).
		checkpoint(520, shard0, "11").
		event(530, "lease released", map[string]string{"shard_id": shard0})
	b := &fakeLog{owner: "b"}
	b.take(800, shard0, "11").
		deliver(900, shard0, "12", 2).deliver(910, shard0, "13", 3).
		checkpoint(950, shard0, "13").
		event(3000, "lease released", map[string]string{"shard_id": shard0})
	return &scenario{
		a: a, b: b,
		final: []lease.Lease{{Key: testStream + "/" + shard0, Checkpoint: lease.Checkpoint{Sequence: "13"}}},
		deploys: []deployWindow{{from: at(450), to: at(1000), restarts: []restartEvent{{
			old: "a", new: "c", term: at(490), exited: at(560), started: at(560), ready: at(1000),
		}}}},
	}
}

func TestVerifyDeployFigures(t *testing.T) {
	rep := deployScenario().verify(t)
	assert.Empty(t, rep.Violations)
	require.NotNil(t, rep.Deploy)
	d := rep.Deploy
	assert.Equal(t, []time.Duration{860 * time.Millisecond}, d.Gaps, "from a's last read (40ms) to b's first (900ms)")
	assert.Equal(t, 1, d.Handoffs)
	assert.Zero(t, d.Unmoved)
	assert.Equal(t, []time.Duration{70 * time.Millisecond}, d.Stops)
	assert.Equal(t, []time.Duration{440 * time.Millisecond}, d.Readies)
	assert.Zero(t, d.AckedRedelivered)
	assert.Zero(t, d.UnackedRedelivered)
	assert.Contains(t, rep.String(), "deploy gap:  p50 860ms, p99 860ms, max 860ms over 1 shard-deploys")
}

// A record acked before the handoff and delivered again is counted (and is a violation after a
// clean release), apart by whether its checkpoint was written before the owner began to stop.
func TestVerifyDeployRedelivered(t *testing.T) {
	tests := []struct {
		name                         string
		resumeAt                     string // b's checkpoint at take
		acked, checkpointed, unacked int
		unackedLast                  bool // a never acked 11
	}{
		{name: "behind a checkpoint written before Close", resumeAt: "", acked: 2, checkpointed: 1},
		{name: "behind Close's final checkpoint", resumeAt: "10", acked: 1, checkpointed: 0},
		{name: "never acked", resumeAt: "10", unacked: 1, unackedLast: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := deployScenario()
			if tt.unackedLast {
				var kept []string
				for _, l := range sc.a.lines {
					if !strings.HasPrefix(l, "A\t") || !strings.HasSuffix(l, "\t11") {
						kept = append(kept, l)
					}
				}
				sc.a.lines = kept
			}
			b := &fakeLog{owner: "b"}
			b.take(800, shard0, tt.resumeAt)
			if tt.resumeAt == "" {
				b.deliver(900, shard0, "10", 0)
			}
			b.deliver(905, shard0, "11", 1).deliver(910, shard0, "12", 2).deliver(915, shard0, "13", 3).
				checkpoint(950, shard0, "13").
				event(3000, "lease released", map[string]string{"shard_id": shard0})
			sc.b = b
			rep := sc.verify(t)
			d := rep.Deploy
			assert.Equal(t, tt.acked, d.AckedRedelivered, "acked")
			assert.Equal(t, tt.checkpointed, d.AckedCheckpointed, "checkpointed before Close")
			assert.Equal(t, tt.unacked, d.UnackedRedelivered, "unacked")
			assert.Contains(t, strings.Join(rep.Violations, "\n"), "though a's tenure ended \"released\"")
		})
	}
}

// With Process, a release checkpoints at the first record not handled, so records handled past
// it are replayed by the next reader: no violation then, but one for a record at or before the
// checkpoint the next reader resumed from.
func TestVerifyProcessReplayAfterRelease(t *testing.T) {
	released := func(resumeAt string) *scenario {
		sc := baseScenario()
		sc.process, sc.kills = true, nil
		// a handles 10 and 12 but has not started 11 when it hands the shard back.
		sc.a = &fakeLog{owner: "a"}
		sc.a.take(0, shard0, "").
			deliver(10, shard0, "10", 0).deliver(20, shard0, "12", 2).
			checkpoint(30, shard0, "10").
			event(40, "lease released", map[string]string{"shard_id": shard0})
		sc.b = &fakeLog{owner: "b"}
		sc.b.take(100, shard0, resumeAt).
			deliver(110, shard0, "11", 1).deliver(120, shard0, "12", 2).deliver(130, shard0, "13", 3).
			checkpoint(140, shard0, "13").
			event(3000, "lease released", map[string]string{"shard_id": shard0})
		return sc
	}
	rep := released("10").verify(t)
	assert.Empty(t, rep.Violations)
	assert.Equal(t, 1, rep.DupAfterRelease)

	sc := released("10")
	sc.b.lines = nil
	sc.b.take(100, shard0, "12").
		deliver(110, shard0, "11", 1).deliver(120, shard0, "12", 2).deliver(130, shard0, "13", 3).
		event(3000, "lease released", map[string]string{"shard_id": shard0})
	assert.Contains(t, strings.Join(sc.verify(t).Violations, "\n"), "12 delivered by a again by b")

	sc = released("10")
	sc.process = false
	assert.Contains(t, strings.Join(sc.verify(t).Violations, "\n"), "12 delivered by a again by b", "a Messages consumer's release covers what it handled")
}
