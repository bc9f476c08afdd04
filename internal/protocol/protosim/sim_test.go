package protosim

import (
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var (
	simSeeds  = flag.Int("protosim.seeds", 100, "TestSimulator*: seeds to run (each twice for the hash check)")
	simFirst  = flag.Uint64("protosim.first", 1, "TestSimulator*: the first seed")
	simLog    = flag.Bool("protosim.log", false, "log the whole event log of a failing run")
	simLogDir = flag.String("protosim.logdir", "", "write each run's event log and its hash to this directory (seed-N.log)")
)

// seedRuns is what runSeeds saw.
type seedRuns struct {
	results []*Result
	// hash is FNV-64a over every seed's log hash, in seed order: one figure for the whole set.
	hash uint64
}

// runSeeds runs seeds [first, first+n) of cfg twice each, and fails on a broken promise or on
// two runs of one seed that differ.
func runSeeds(t *testing.T, cfg Config, first uint64, n int) seedRuns {
	t.Helper()
	if *simLog || *simLogDir != "" {
		cfg.LogAll = true
	}
	var out seedRuns
	all := fnv.New64a()
	for seed := first; seed < first+uint64(n); seed++ {
		a, b := Run(cfg, seed), Run(cfg, seed)
		if a.Hash != b.Hash || a.Lines != b.Lines {
			t.Fatalf("seed %d: two runs differ: hash %016x (%d lines) then %016x (%d lines)", seed, a.Hash, a.Lines, b.Hash, b.Lines)
		}
		fmt.Fprintf(all, "%d %016x\n", seed, a.Hash)
		if *simLogDir != "" {
			writeLog(t, a)
		}
		if a.Failed() {
			t.Errorf("%v\nevent log's tail:\n%s", a, a.Tail)
			return out
		}
		out.results = append(out.results, a)
	}
	out.hash = all.Sum64()
	return out
}

// writeLog writes a run's event log, ending with its hash.
func writeLog(t *testing.T, r *Result) {
	t.Helper()
	if err := os.MkdirAll(*simLogDir, 0o755); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf("%s\nhash %016x (%d lines)\n", r.Tail, r.Hash, r.Lines)
	if err := os.WriteFile(filepath.Join(*simLogDir, fmt.Sprintf("seed-%d.log", r.Seed)), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSimulatorToy runs the seeds on the toy machine: no promise broken, every seed the same
// run twice.
func TestSimulatorToy(t *testing.T) {
	cfg := DefaultConfig(newToy(toySafe, "s", 3e9))
	runs := runSeeds(t, cfg, *simFirst, *simSeeds)
	steps, outs, misses := 0, 0, 0
	for _, r := range runs.results {
		steps += r.Steps
		outs += r.HandOuts
		misses += len(r.Misses)
	}
	t.Logf("%d seeds twice: %d steps, %d hand-outs, %d goals missed (the toy never takes a crashed owner's leases)", len(runs.results), steps, outs, misses)
	if outs == 0 {
		t.Fatal("nothing was handed out")
	}
}

// TestSimulatorCatchesBrokenMachines: the checks catch a machine that reads with no deadline,
// one that hands out past its deadline after a pause, and one that checkpoints records not
// acknowledged.
func TestSimulatorCatchesBrokenMachines(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode toyMode
		want string // in the violation
	}{{"no deadline", toyNoDeadline, "two readers"}, {"hand-out past deadline", toyLateHandOut, "two readers"},
		{"checkpoint ahead", toyCheckpointAhead, "records skipped"}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig(newToy(tc.mode, "s", 3e9))
			caught := 0
			var first *Result
			for seed := uint64(1); seed <= 20; seed++ {
				if r := Run(cfg, seed); r.Failed() {
					if !strings.Contains(r.Violations[0], tc.want) {
						t.Fatalf("seed %d: want a violation saying %q, got %v", seed, tc.want, r)
					}
					caught++
					if first == nil {
						first = r
					}
				}
			}
			if caught == 0 {
				t.Fatalf("no seed of 20 caught the %s machine", tc.name)
			}
			t.Logf("%d seeds of 20 caught it; first: %v", caught, first)
		})
	}
}
