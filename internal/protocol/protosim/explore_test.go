package protosim

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"
)

var (
	exploreDepth     = flag.Int("protosim.depth", 0, "TestExplore*: search to this depth (0: the test's own, small)")
	exploreFaults    = flag.Int("protosim.faults", 0, "TestExplore*: faults per path (0: the test's own)")
	exploreStates    = flag.Int("protosim.states", 0, "TestExplore*: stop a search after this many states (0: no bound)")
	exploreInstances = flag.Int("protosim.instances", 0, "TestExploreMachine: one search of this many instances (2–3) instead of the test's own")
	exploreShards    = flag.Int("protosim.shards", 0, "TestExploreMachine: with -protosim.instances, this many shards (default 1)")
	explorePrefix    = flag.Int("protosim.prefix", -1, "TestExploreMachine: with -protosim.instances, events run in order before the search (default 40)")
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

// exploreCase is one bounded search.
type exploreCase struct {
	instances, shards, depth, faults, prefix int
	timed                                    bool // time may pass at once, and instances pause long
	records                                  int  // ExploreConfig.Records (0: one)
	mixed                                    bool // instance 0 at 3 s, the others at 1.5 s (MachinesMixed)
}

// timed lets a search's choices pass TTL/3 at once, and pause an instance for TTL/2 or a TTL
// meanwhile: long enough for a renewal, a reap or a steal to fall in them.
func timed(cfg *ExploreConfig) {
	cfg.Advances, cfg.Pauses = []time.Duration{cfg.TTL / 3}, []time.Duration{cfg.TTL / 2, cfg.TTL}
}

// machineSearches are TestExploreMachine's bounded searches (and the mutation check's).
var machineSearches = []exploreCase{
	{2, 1, 8, 1, 0, false, 0, false},  // the joins and first claims racing
	{2, 1, 5, 1, 40, true, 0, false},  // a fleet reading its one shard
	{2, 2, 4, 1, 80, true, 0, false},  // both shards read
	{3, 2, 4, 1, 110, true, 0, false}, // both shards read, an instance idle
	{2, 1, 6, 0, 40, false, 2, false}, // two checkpoints of one holding on their way together
	{2, 2, 4, 1, 80, true, 0, true},   // both shards read by instances of different TTLs
}

// machineSearch is search tc over protocol.Machine.
func machineSearch(tc exploreCase) ExploreConfig {
	cores := Machines("s", 3*time.Second)
	if tc.mixed {
		cores = MachinesMixed("s", 3*time.Second)
	}
	cfg := exploreConfig(cores, tc.instances, tc.shards, tc.depth, tc.faults)
	cfg.Prefix, cfg.Records = tc.prefix, tc.records
	if tc.timed {
		timed(&cfg)
	}
	return cfg
}

// TestExploreMachine searches every order of deliveries, ticks and faults of small fleets of
// protocol.Machine, from the joins and from a fleet already reading (a prefix of events run in
// order), and fails on the first broken promise with the path that broke it. The searches are
// bounded to well under a minute; make explore runs one deeper (-protosim.instances, .shards,
// .depth, .faults, .prefix, .states).
func TestExploreMachine(t *testing.T) {
	cases := machineSearches
	if *exploreInstances > 0 {
		c := exploreCase{instances: *exploreInstances, shards: max(*exploreShards, 1), depth: 5, faults: 2, prefix: 40, timed: true}
		if *explorePrefix >= 0 {
			c.prefix = *explorePrefix
		}
		cases = []exploreCase{c}
	}
	states, transitions := 0, 0
	for _, tc := range cases {
		if raceDetector && *exploreInstances == 0 {
			tc.depth--
		}
		r := explore(t, machineSearch(tc))
		if r.Violation != "" {
			t.Fatalf("%v\ntrace:\n%s\nlog:\n%s", r, strings.Join(r.Trace, "\n"), r.Log)
		}
		states += r.States
		transitions += r.Transitions
	}
	// The line make explore prints.
	fmt.Printf("explore: %d searches of protocol.Machine fleets: %d states, %d transitions, no promise broken\n", len(cases), states, transitions)
}

func TestExploreToy(t *testing.T) {
	for _, tc := range []exploreCase{
		{2, 1, 8, 1, 0, false, 0, false},
		{3, 2, 5, 1, 40, false, 0, false},
	} {
		if raceDetector {
			tc.depth--
		}
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
