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

func runChaos(t *testing.T, cfg Config) {
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
	// scheduled for a while now and then: allow for that in the takeover and overlap bounds.
	// make chaos measures with the default slack.
	cfg.Slack = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg, kc, dc)
	require.NoError(t, err)
	t.Logf("\n%s", rep)
	assert.Empty(t, rep.Violations)
	assert.Zero(t, rep.Lost)
	assert.Equal(t, cfg.Consumers+cfg.Kills, rep.Incarnations)
	assert.GreaterOrEqual(t, rep.Delivered, cfg.Records)
	assert.NotEmpty(t, rep.Takeovers, "no kill hit a process holding leases")
}
