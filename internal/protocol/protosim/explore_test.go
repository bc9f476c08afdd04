package protosim

import (
	"flag"
	"strings"
	"testing"
	"time"
)

var (
	exploreDepth  = flag.Int("protosim.depth", 0, "TestExplore: search to this depth (0: the test's own, small)")
	exploreFaults = flag.Int("protosim.faults", 0, "TestExplore: faults per path (0: the test's own)")
	exploreStates = flag.Int("protosim.states", 0, "TestExplore: stop a search after this many states (0: the test's own)")
)

func exploreConfig(newCore NewCore, instances, shards, depth, faults int) ExploreConfig {
	cfg := ExploreConfig{Config: DefaultConfig(newCore), Depth: depth, Faults: faults, Offset: 10 * time.Second, PPM: 40000}
	cfg.Instances, cfg.Shards, cfg.Splits = instances, shards, 0
	if *exploreDepth > 0 {
		cfg.Depth = *exploreDepth
	}
	if *exploreFaults > 0 {
		cfg.Faults = *exploreFaults
	}
	if *exploreStates > 0 {
		cfg.MaxStates = *exploreStates
	}
	return cfg
}

func explore(t *testing.T, cfg ExploreConfig) *ExploreResult {
	t.Helper()
	start := time.Now()
	r := Explore(cfg)
	t.Logf("%d instances, %d shards, depth %d, %d faults, prefix %d: %v (%v)", cfg.Instances, cfg.Shards, cfg.Depth, cfg.Faults, cfg.Prefix, r, time.Since(start).Round(time.Millisecond))
	return r
}

func TestExploreToy(t *testing.T) {
	for _, tc := range []struct {
		instances, shards, depth, faults, prefix int
	}{
		{2, 1, 10, 1, 0},
		{2, 1, 8, 1, 30},
		{3, 2, 6, 1, 40},
	} {
		cfg := exploreConfig(newToy(toySafe, "s", 3e9), tc.instances, tc.shards, tc.depth, tc.faults)
		cfg.Prefix = tc.prefix
		if r := explore(t, cfg); r.Violation != "" {
			t.Fatalf("%v\ntrace:\n%s\nlog:\n%s", r, strings.Join(r.Trace, "\n"), r.Log)
		}
	}
}

func TestExploreCatchesBrokenMachines(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode toyMode
	}{{"no deadline", toyNoDeadline}, {"hand-out past deadline", toyLateHandOut}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := exploreConfig(newToy(tc.mode, "s", 3e9), 2, 1, 14, 0)
			r := explore(t, cfg)
			if r.Violation == "" {
				t.Fatalf("the search did not catch the %s machine", tc.name)
			}
			t.Logf("trace:\n%s", strings.Join(r.Trace, "\n"))
		})
	}
}
