package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

var tracingFigs = flag.Bool("tracing", true, "measure delivery with tracing left off against the library built without tracing's hooks")

// ---- Tracing left off ----

// tracingFigures runs the in-process delivery benchmarks on two builds of the root package's
// tests: as shipped, tracing off (no WithTracerProvider), and built with the tag
// kinesub_notrace, which compiles tracing's hooks on the delivery path out. Runs alternate,
// and each ratio is the median of the pairs' ratios, so both sides of a pair ran under the same
// load. Off should cost nothing measurable: about 1.00×, and no allocation more.
func tracingFigures() error {
	fmt.Println("\n== Tracing left off: delivery with tracing's hooks ÷ built without them (go test -bench) ==")
	dir, err := os.MkdirTemp("", "kinesub-bench-tracing")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	bins := map[string]string{"off": filepath.Join(dir, "off.test"), "none": filepath.Join(dir, "none.test")}
	for name, tags := range map[string]string{"off": "", "none": "kinesub_notrace"} {
		build := exec.Command("go", "test", "-c", "-tags", tags, "-o", bins[name], ".")
		build.Dir, build.Stderr = root, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build the benchmarks (%s): %w", name, err)
		}
	}
	patterns := []string{"^BenchmarkDeliverAck$/^coalesced$", "^BenchmarkPull$", "^BenchmarkProcess$/^concurrency=16$"}
	names := []struct{ label, name string }{
		{"Messages(), ack each ", "BenchmarkDeliverAck/coalesced"},
		{"All, ack each        ", "BenchmarkPull/all"},
		{"Batches, Batch.Ack   ", "BenchmarkPull/batches"},
		{"Process, 16 at once  ", "BenchmarkProcess/concurrency=16"},
	}
	count := fmt.Sprintf("%dx", *benchCount)
	results := map[string]map[string][]benchResult{"off": {}, "none": {}}
	for pair := range *benchPairs {
		order := []string{"none", "off"}
		if pair%2 == 1 {
			order = []string{"off", "none"} // either side first as often: no bias from going second
		}
		for _, pattern := range patterns {
			for _, side := range order {
				if err := runBench(bins[side], pattern, count, results[side]); err != nil {
					return err
				}
			}
		}
	}
	ratio := func(name, unit string) float64 {
		off, none := results["off"][name], results["none"][name]
		var xs []float64
		for i := range min(len(off), len(none)) {
			xs = append(xs, off[i][unit]/none[i][unit])
		}
		return median(xs)
	}
	allocs := func(side, name string) float64 {
		var xs []float64
		for _, r := range results[side][name] {
			xs = append(xs, r["allocs/record"])
		}
		return median(xs)
	}
	fmt.Printf("%d records per run, %d alternating pairs, medians of the pairs' ratios\n", *benchCount, *benchPairs)
	// The goal is judged on CPU time per record, which other work on the machine disturbs less
	// than wall time.
	for _, row := range names {
		c := ratio(row.name, "cpu-ns/record")
		fmt.Printf("  %s off ÷ without hooks: CPU %5.2f× (wall %5.2f×); allocs/record %.4f against %.4f  goal CPU ≤ 1.03×: %s\n",
			row.label, c, ratio(row.name, "ns/record"), allocs("off", row.name), allocs("none", row.name), verdict(c <= 1.03))
	}
	return nil
}
