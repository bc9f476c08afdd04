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

// TestChaosEffects kill -9s consumers whose Process handlers add one to a DynamoDB counter per
// record, through dynamosink: records redelivered after the kills and lease moves change
// nothing, so every record's effect is applied exactly once. The same run with a plain
// UpdateItem applies again what a killed process applied and did not checkpoint; its figure is
// logged beside. Only the effects are checked here: the delivery and lease checks are
// TestChaosProcess's.
func TestChaosEffects(t *testing.T) {
	for _, mode := range []string{EffectsSink, EffectsPlain} {
		t.Run(mode, func(t *testing.T) {
			rep := runEffects(t, mode)
			e := rep.Effects
			t.Logf("\n%s%s", rep, e)
			require.NotNil(t, e)
			assert.Zero(t, rep.Lost, "records never delivered")
			assert.Zero(t, e.Lost, "effects never applied")
			assert.Equal(t, rep.Published, e.Applied)
			require.Positive(t, rep.Duplicated, "no record was delivered twice: the run tested nothing")
			if mode == EffectsSink {
				assert.Zero(t, e.Twice, "effects applied twice through dynamosink")
			}
		})
	}
}

func runEffects(t *testing.T, mode string) *Report {
	kc, dc := testenv.Kinesis(t), testenv.DynamoDB(t)
	dir, err := os.MkdirTemp("", "kinesub-chaos-")
	require.NoError(t, err)
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(dir)
		}
	})
	cfg := DefaultConfig()
	cfg.Effects = mode
	// The local DynamoDB server is slow at transactions: a few thousand records.
	cfg.Records, cfg.Keys, cfg.Shards, cfg.Kills, cfg.Rate = 5000, 200, 4, 3, 500
	cfg.Dir = dir
	cfg.Race = raceEnabled
	cfg.Logf = t.Logf
	cfg.Slack = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg, kc, dc)
	require.NoError(t, err)
	return rep
}

func TestEffectViolations(t *testing.T) {
	assert.Empty(t, (&EffectFigures{Mode: EffectsSink, Applied: 10}).violations())
	assert.Empty(t, (&EffectFigures{Mode: EffectsPlain, Applied: 10, Twice: 3, Extra: 4}).violations(), "a plain write may apply twice")
	assert.Len(t, (&EffectFigures{Mode: EffectsSink, Applied: 10, Twice: 1, Extra: 1}).violations(), 1)
	assert.Len(t, (&EffectFigures{Mode: EffectsPlain, Applied: 9, Lost: 1}).violations(), 1)

	cfg := DefaultConfig()
	cfg.Effects = "twice"
	assert.ErrorContains(t, cfg.check(), `effects must be "sink" or "plain"`)
	cfg = DefaultDeployConfig()
	cfg.Effects, cfg.Deploys = EffectsSink, 1
	assert.ErrorContains(t, cfg.check(), "not of deploys")
}
