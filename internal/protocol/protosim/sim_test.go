package protosim

import (
	"flag"
	"testing"
)

var (
	simSeeds = flag.Int("protosim.seeds", 100, "TestSimulator: seeds to run (each twice for the hash check)")
	simFirst = flag.Uint64("protosim.first", 1, "TestSimulator: the first seed")
	simLog   = flag.Bool("protosim.log", false, "log the whole event log of a failing run")
)

// runSeeds runs seeds [first, first+n) of cfg twice each, and fails on a broken promise or on
// two runs of one seed that differ.
func runSeeds(t *testing.T, cfg Config, first uint64, n int) (results []*Result) {
	t.Helper()
	if *simLog {
		cfg.LogAll = true
	}
	for seed := first; seed < first+uint64(n); seed++ {
		a, b := Run(cfg, seed), Run(cfg, seed)
		if a.Hash != b.Hash || a.Lines != b.Lines {
			t.Fatalf("seed %d: two runs differ: hash %016x (%d lines) then %016x (%d lines)", seed, a.Hash, a.Lines, b.Hash, b.Lines)
		}
		if a.Failed() {
			t.Errorf("%v\nevent log's tail:\n%s", a, a.Tail)
			return
		}
		results = append(results, a)
	}
	return results
}

// TestSimulatorToy runs the seeds on the toy machine: no promise broken, every seed the same
// run twice.
func TestSimulatorToy(t *testing.T) {
	cfg := DefaultConfig(newToy(toySafe, "s", 3e9))
	res := runSeeds(t, cfg, *simFirst, *simSeeds)
	steps, outs, misses := 0, 0, 0
	for _, r := range res {
		steps += r.Steps
		outs += r.HandOuts
		misses += len(r.Misses)
	}
	t.Logf("%d seeds twice: %d steps, %d hand-outs, %d goals missed (the toy never takes a crashed owner's leases)", len(res), steps, outs, misses)
	if outs == 0 {
		t.Fatal("nothing was handed out")
	}
}

// TestSimulatorCatchesBrokenMachines: the checks catch a machine that reads with no deadline,
// and one that hands out past its deadline after a pause.
func TestSimulatorCatchesBrokenMachines(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode toyMode
	}{{"no deadline", toyNoDeadline}, {"hand-out past deadline", toyLateHandOut}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig(newToy(tc.mode, "s", 3e9))
			caught := 0
			var first *Result
			for seed := uint64(1); seed <= 20; seed++ {
				if r := Run(cfg, seed); r.Failed() {
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
