package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/testenv"
)

// TestChaos runs the full chaos run against the emulators: three consumer processes, 100,000
// records, five kill -9s. Its logs are kept when it fails.
func TestChaos(t *testing.T) {
	runChaos(t, DefaultConfig())
}

// TestChaosProcess runs it with consumers that handle records with Subscriber.Process, 64 at
// once: nothing is lost, and per partition key no record is handled before the one before it
// was first handled, across kills and takeovers.
func TestChaosProcess(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Process = true
	cfg.Records, cfg.Kills = 50_000, 3
	runChaos(t, cfg)
}

func runChaos(t *testing.T, cfg Config) *Report {
	kc, dc := testenv.Kinesis(t), testenv.DynamoDB(t)
	dir, err := os.MkdirTemp("", "kinesub-chaos-")
	require.NoError(t, err)
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(dir)
		}
	})
	cfg.Dir = dir
	cfg.Race = raceEnabled
	cfg.Logf = t.Logf
	// The suite runs on machines as busy as make stress keeps them, where a process is not
	// scheduled for a while now and then: allow for that in the takeover bound (two processes
	// delivering one shard at once is never allowed).
	// make chaos measures with the default slack.
	cfg.Slack = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg, kc, dc)
	require.NoError(t, err)
	t.Logf("\n%s", rep)
	assert.Empty(t, rep.Violations)
	assert.Zero(t, rep.Lost)
	assert.Equal(t, cfg.Consumers+cfg.Kills+cfg.Deploys*cfg.Consumers, rep.Incarnations)
	assert.GreaterOrEqual(t, rep.Delivered, rep.Published)
	if cfg.Kills > 0 {
		assert.Equal(t, cfg.Records, rep.Published)
		assert.NotEmpty(t, rep.Takeovers, "no kill hit a process holding leases")
	}
	return rep
}

// TestRollingDeploy runs two rolling deploys of three consumer processes under a steady
// producer: each consumer in turn gets SIGTERM (its handler calls Close and exits) and a new
// process starts once it has exited. Nothing may be lost, and no record acknowledged before a
// handoff may be delivered again: Close settles what was handed out and writes the final
// checkpoints before it releases the leases. The gap from the last record an old owner read to
// the first the new owner read is a timing figure: logged, not asserted.
func TestRollingDeploy(t *testing.T) {
	cfg := DefaultDeployConfig()
	cfg.Deploys = 2
	cfg.Rate = 200 // a few thousand records over the deploys
	rep := runChaos(t, cfg)
	require.NotNil(t, rep.Deploy)
	d := rep.Deploy
	assert.Zero(t, d.AckedRedelivered, "records acknowledged before a handoff delivered again")
	assert.Equal(t, cfg.Deploys*cfg.Consumers, d.Restarts)
	assert.Len(t, d.Gaps, cfg.Deploys*int(cfg.Shards), "a gap for every shard in every deploy")
	assert.Less(t, rep.Published, 100_000, "publishing stops with the deploys")
}
