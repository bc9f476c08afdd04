package protosim

import (
	"flag"
	"fmt"
	"testing"
	"time"
)

var mutant = flag.String("protosim.mutant", "", "TestCoreMutant: the name of the mutation of protocol.Machine applied to this copy of the package (scripts/mutants-core.sh)")

// TestCoreMutant is the mutation check's run over a copy of the tree with one mutation of
// protocol.Machine applied (testdata/mutants, scripts/mutants-core.sh; it runs only with
// -protosim.mutant): it runs TestSimulatorMachine's 100 seeds and TestSimulatorMachineMixedTTL's
// once each and counts those that broke a promise, then TestExploreMachine's searches until one
// finds a broken promise, prints one line of both, and fails when neither caught the mutation
// (fewer than 2 seeds, no search).
func TestCoreMutant(t *testing.T) {
	if *mutant == "" {
		t.Skip("the mutation check's run: scripts/mutants-core.sh (make mutants-core) runs it over a mutated copy")
	}
	start := time.Now()
	var broke, mixed []uint64
	first := ""
	for _, fleet := range []struct {
		cfg   Config
		broke *[]uint64
		name  string
	}{{DefaultConfig(Machines("s", 3*time.Second)), &broke, ""}, {DefaultConfig(MachinesMixed("s", 3*time.Second)), &mixed, " mixed"}} {
		for seed := uint64(1); seed <= 100; seed++ {
			if r := Run(fleet.cfg, seed); r.Failed() {
				*fleet.broke = append(*fleet.broke, seed)
				if first == "" {
					first = fmt.Sprintf("seed %d%s: %s", seed, fleet.name, r.Violations[0])
				}
			}
		}
	}
	sim := fmt.Sprintf("simulator: %d of 100 seeds broke a promise, %d of 100 with mixed TTLs (%v)", len(broke), len(mixed),
		time.Since(start).Round(time.Millisecond))
	if len(broke) > 0 {
		sim += fmt.Sprintf(", seeds %v", brief(broke))
	}
	if len(mixed) > 0 {
		sim += fmt.Sprintf(", mixed %v", brief(mixed))
	}
	if first != "" {
		sim += "; first: " + first
	}
	exp := "explorer: no search of " + fmt.Sprint(len(machineSearches)) + " found one"
	caught := len(broke) >= 2 || len(mixed) >= 2
	for i, tc := range machineSearches {
		start := time.Now()
		r := Explore(machineSearch(tc))
		if r.Violation != "" {
			exp = fmt.Sprintf("explorer: search %d of %d (%d instances, %d shards, depth %d, %d faults, prefix %d, records %d) after %d states (%v): %s",
				i+1, len(machineSearches), tc.instances, tc.shards, tc.depth, tc.faults, tc.prefix, max(tc.records, 1), r.States,
				time.Since(start).Round(time.Millisecond), r.Violation)
			caught = true
			break
		}
	}
	// The lines scripts/mutants-core.sh prints.
	fmt.Printf("mutant %s: %s\nmutant %s: %s\n", *mutant, sim, *mutant, exp)
	if !caught {
		t.Errorf("mutant %s survived: fewer than 2 of 100 seeds and no search caught it", *mutant)
	}
}

// brief lists at most ten seeds.
func brief(seeds []uint64) string {
	if len(seeds) <= 10 {
		return fmt.Sprint(seeds)
	}
	return fmt.Sprintf("%v…", seeds[:10])
}
