# kinesub: `make test` and `make demo` are all a fresh machine with Go and Node.js needs.
# Both start the local Kinesis and DynamoDB servers (scripts/emulators.sh), point the AWS SDK
# at them through the standard endpoint variables, and stop them again, also on failure.

SHELL := /bin/bash
EMU := scripts/emulators.sh
GO ?= go
# The library needs Go 1.26 (go.mod); its tests run on the go1.27.3 toolchain, which the go
# command fetches from the module proxy on first use. go1.26's race runtime crashes in
# testing/synctest bubbles now and then (SIGSEGV in __tsan::SlotLock or "ThreadSanitizer: CHECK
# failed", golang/go#78156): here 5 of 6 runs of three bubble-heavy tests at -count=10, against
# 0 of 14 on go1.27.3. Override with GOTOOLCHAIN=local to test on the installed Go.
export GOTOOLCHAIN ?= go1.27.3
export KINESUB_KINESIS_PORT ?= 4567
export KINESUB_DYNAMODB_PORT ?= 4568

# with-emulators runs $(1) with both servers up and the SDK pointed at them.
define with-emulators
	@set -euo pipefail; \
	trap '$(EMU) down' EXIT; \
	$(EMU) up; \
	eval "$$($(EMU) env)"; \
	export KINESUB_INTEGRATION=required; \
	$(1)
endef

.PHONY: test sim explore mutants mutants-core stress unit demo chaos bench emulators-up emulators-down fmt vet vet-modules \
	fuzz apicheck api-baseline

# The examples and the benchmark command are modules of their own (examples/go.mod,
# bench/go.mod), so that what they need (the OpenTelemetry SDK, a Prometheus exporter, the peer
# consumer) stays out of the library's go.mod; vet-modules checks that they still build against
# the library in this tree. test runs every package against kinesalite, then the root package's
# integration tests again against kinesistest, the in-process server (KINESUB_KINESIS_BACKEND,
# internal/testenv). The examples' module has its tests too: each example, built and run against
# the servers, exits 0 on SIGINT and on SIGTERM with its leases released. apicheck holds the exported API to
# the last release's (api/).
#
# TestSimulation (sim_test.go) runs the fleet simulation: its default 16 seeds under the race
# detector with the rest, then SIM_SEEDS more without it, where a seed costs a tenth as much;
# -run TestSimulation runs as many of its effect runs through the modelled sink
# (TestSimulationEffects, sim_effects_test.go), each about ten times as costly.
SIM_SEEDS ?= 300
test: vet-modules apicheck
	$(call with-emulators, $(GO) vet ./... && $(GO) test -race -count=1 -timeout 12m ./... && \
	GOGC=400 $(GO) test -count=1 -timeout 10m -run TestSimulation -sim.first=1001 -sim.seeds=$(SIM_SEEDS) . && \
	KINESUB_KINESIS_BACKEND=kinesistest $(GO) test -race -count=1 -timeout 12m -skip TestSimulation . && \
	(cd examples && $(GO) test -count=1 -timeout 5m ./...))

# sim searches the fleet simulation: SIM_SEEDS seeds (10,000 by default) from SIM_FIRST, in
# parallel on every CPU, with no race detector and a lazier collector (GOGC=400: a third less
# CPU; the runs are small and short-lived). A failing seed prints the command that replays
# it; keep it in simRegressionSeeds once fixed, in simOpenSeeds (run here, not by make test)
# until then. SIMFLAGS=-sim.strict fails on missed goals too (crash
# failover within TTL + 2s, no acked record delivered again after a clean hand-back).
sim: SIM_SEEDS = 10000
SIM_FIRST ?= 1
sim:
	GOGC=400 $(GO) test -count=1 -timeout 150m -run TestSimulation -sim.first=$(SIM_FIRST) -sim.seeds=$(SIM_SEEDS) -sim.open $(SIMFLAGS) -v . | \
	grep -v -e '^=== ' -e '^    --- PASS' -e '^--- PASS'; exit $${PIPESTATUS[0]}

# explore searches every order of deliveries, ticks and faults of one small fleet of the lease
# protocol's state machines (internal/protocol/protosim, TestExploreMachine) deeper than the
# bounded searches go test runs: EXPLORE_INSTANCES (2–3), EXPLORE_SHARDS (1–2), EXPLORE_DEPTH
# choices on a path, EXPLORE_FAULTS per path, EXPLORE_PREFIX events run in order first, and
# EXPLORE_STATES to stop after that many states (0: none). Its choices include letting TTL/3
# pass at once and pausing an instance for TTL/2 or a TTL. It prints the states explored; the
# default (about 250,000 states) takes a minute or two, each level or fault more many times as
# long.
EXPLORE_INSTANCES ?= 2
EXPLORE_SHARDS ?= 1
EXPLORE_DEPTH ?= 5
EXPLORE_FAULTS ?= 2
EXPLORE_PREFIX ?= 40
EXPLORE_STATES ?= 0
explore:
	GOGC=400 $(GO) test -count=1 -timeout 0 -run 'TestExploreMachine$$' -v ./internal/protocol/protosim \
		-protosim.instances=$(EXPLORE_INSTANCES) -protosim.shards=$(EXPLORE_SHARDS) -protosim.depth=$(EXPLORE_DEPTH) \
		-protosim.faults=$(EXPLORE_FAULTS) -protosim.prefix=$(EXPLORE_PREFIX) -protosim.states=$(EXPLORE_STATES) | \
	grep -v -e '^=== ' -e '^--- PASS'; exit $${PIPESTATUS[0]}

# mutants checks the checks: it plants each bug of testdata/mutants/*.patch in a copy of the
# tree (never in the checkout) and runs the fleet simulation over MUTANT_SEEDS seeds from
# MUTANT_FIRST (no race detector, GOGC=400 as sim does, no regression seeds). A mutation is
# caught when at least 2% of the seeds run break a promise; the target fails when one is not,
# or when a patch no longer applies (it names the patch). MUTANTS='a b' runs some;
# MUTANT_EARLY=0 runs every seed instead of stopping once a mutation passed the bar;
# MUTANT_BASELINE=1 runs the unmutated tree over the same seeds first (scripts/mutants.sh).
# About 5 min on 2 cores; not part of test.
MUTANT_SEEDS ?= 250
MUTANT_FIRST ?= 1
mutants:
	GO=$(GO) MUTANT_SEEDS=$(MUTANT_SEEDS) MUTANT_FIRST=$(MUTANT_FIRST) scripts/mutants.sh

# mutants-core is the mutation check of the lease protocol's core (scripts/mutants-core.sh):
# each patch in internal/protocol/protosim/testdata/mutants breaks protocol.Machine in one way,
# applied to a scratch copy of the package (the tree is not changed); the simulator's 100 seeds
# and TestExploreMachine's searches run on it, and the target prints per mutation the seeds
# that broke a promise and the states until a search found one, failing if any mutation is
# caught by neither (fewer than 2 seeds, no search). About a minute on 2 CPUs; not part of test.
mutants-core:
	GO=$(GO) scripts/mutants-core.sh

# stress runs the whole suite as test does, on a machine kept busy: STRESS_BURNERS processes
# spin on the CPU beside it (as many as there are CPUs by default), and every test runs twice,
# with GOMAXPROCS 1 and then 2. A test that takes a deadline or a quiet spell for the condition
# it means fails here. The burners are stopped with the servers, also on failure. The root
# package takes about 24 min of it on 2 cores (its tests run twice, at half the CPU): its
# timeout is 40 min.
STRESS_BURNERS ?= $(shell nproc 2>/dev/null || echo 2)
STRESS_CPU := 1,2
stress:
	$(call with-emulators, \
	burners=(); \
	for i in $$(seq $(STRESS_BURNERS)); do (while :; do :; done) & burners+=($$!); done; \
	trap 'kill $${burners[*]} 2>/dev/null; $(EMU) down' EXIT; \
	$(GO) vet ./... && $(GO) test -race -count=1 -cpu $(STRESS_CPU) -timeout 40m ./...)

# unit runs only what needs no emulator (integration tests skip without endpoints).
unit:
	$(GO) test -race -count=1 ./...

demo:
	$(call with-emulators, (cd examples && $(GO) run ./demo))

# chaos kill -9s consumer processes while they read, then checks from their logs that no record
# was lost and every duplicate is explained (cmd/chaos). `make test` runs it too, as TestChaos.
# Pass flags with CHAOSFLAGS, e.g. make chaos CHAOSFLAGS='-kills 10 -race'.
chaos:
	$(call with-emulators, $(GO) run ./cmd/chaos $(CHAOSFLAGS))

# bench prints speed and memory figures as ratios against baselines measured in the same run
# (bench/: in-process go benchmarks, then end to end on the local Kinesis server beside the peer
# Go consumer). bench/ is a module of its own, so the peer stays out of the library's go.mod.
# Pass flags with BENCHFLAGS, e.g. make bench BENCHFLAGS='-pairs 3 -records 50000'. It then
# times crash failover at SCALE_SHARDS shards × SCALE_INSTANCES instances on the simulated
# clock (TestFailoverAtScale: the protocol's own timing, which a 2-CPU machine cannot show on
# the wall clock at that size), about a minute on 2 CPUs.
SCALE_SHARDS ?= 10000
SCALE_INSTANCES ?= 16
bench:
	$(call with-emulators, (cd bench && $(GO) run . $(BENCHFLAGS)))
	$(GO) test -count=1 -timeout 30m -run 'TestFailoverAtScale$$' -scale.shards=$(SCALE_SHARDS) -scale.instances=$(SCALE_INSTANCES) -v . | \
	grep -e 'failover_scale_test' -e '^--- ' -e '^ok' -e '^FAIL'; exit $${PIPESTATUS[0]}

emulators-up:
	$(EMU) up
	@echo 'eval "$$($(EMU) env)"   # to point the SDK at them'

emulators-down:
	$(EMU) down

fmt:
	gofmt -w $$(git ls-files '*.go')

vet: vet-modules
	$(GO) vet ./...

vet-modules:
	cd examples && $(GO) vet ./... && $(GO) build ./...
	cd bench && $(GO) vet ./...

# fuzz runs every fuzz target (each func Fuzz… in a _test.go file, found anew on every run) for
# FUZZTIME, one after another, as go test fuzzes one target of one package at a time; test runs
# their seed corpora as ordinary tests. A failing input is kept in testdata/fuzz/<target>/ beside
# the test: commit it with the fix and it stays a test. Minimizing a new input is kept short
# (FUZZFLAGS) so that a target spends its time fuzzing.
FUZZTIME ?= 30s
FUZZFLAGS ?= -fuzzminimizetime 5s
fuzz:
	@set -uo pipefail; failed=(); \
	for hit in $$(git ls-files --cached --others --exclude-standard '*_test.go' | grep -v testdata/ | \
			xargs grep -oE '^func Fuzz[A-Za-z0-9_]*\(' /dev/null | sed -E 's/:func (.*)\(/:\1/'); do \
		file=$${hit%%:*}; target=$${hit##*:}; dir=$$(dirname "$$file"); mod=$$dir; \
		while [ ! -f "$$mod/go.mod" ]; do mod=$$(dirname "$$mod"); done; \
		pkg=$$(realpath --relative-to="$$mod" "$$dir"); [ "$$pkg" = . ] || pkg=./$$pkg; \
		echo "== $$target ($$dir) for $(FUZZTIME)"; \
		(cd "$$mod" && $(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS) "$$pkg") || \
			failed+=("$$target"); \
	done; \
	if [ $${#failed[@]} -gt 0 ]; then echo "fuzz: failed: $${failed[*]}"; exit 1; fi

# apicheck compares the exported API of the library packages with that of the release whose
# commit api/RELEASE names, kept in api/ as export data; it fails on an incompatible change
# that CHANGELOG.md does not announce (scripts/apicheck.sh says how). api-baseline writes api/
# from that commit, which it needs in the clone: run it when recording a release.
apicheck:
	GO=$(GO) scripts/apicheck.sh

api-baseline:
	GO=$(GO) scripts/apicheck.sh baseline
