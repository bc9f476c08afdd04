package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// ---- In process: the root package's benchmarks ----

// benchResult is one line of go test -bench output: metric unit → value.
type benchResult map[string]float64

func inProcessFigures() error {
	fmt.Println("== In process: fake Kinesis client serving pre-built pages from memory (go test -bench) ==")
	dir, err := os.MkdirTemp("", "kinesub-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	bin := filepath.Join(dir, "kinesub.test")
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Dir, build.Stderr = root, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build the benchmarks: %w", err)
	}
	count := fmt.Sprintf("%dx", *benchCount)
	results := map[string][]benchResult{}
	for range *benchPairs {
		for _, pattern := range []string{"^BenchmarkChannelBaseline$", "^BenchmarkDeliverAck$", "^BenchmarkPull$"} {
			if err := runBench(bin, pattern, count, results); err != nil {
				return err
			}
		}
	}
	if err := runBench(bin, "^BenchmarkPeakHeapNeverAck$", "1x", results); err != nil {
		return err
	}

	med := func(name, unit string) float64 {
		var xs []float64
		for _, r := range results[name] {
			xs = append(xs, r[unit])
		}
		return median(xs)
	}
	// Per-pair ratios, so that both sides of each ratio ran under the same load.
	ratio := func(name, base, unit string) float64 {
		var xs []float64
		for i := range min(len(results[name]), len(results[base])) {
			xs = append(xs, results[name][i][unit]/results[base][i][unit])
		}
		return median(xs)
	}
	buf, unbuf := "BenchmarkChannelBaseline/buffered=1000", "BenchmarkChannelBaseline/buffered=0"
	co, ea := "BenchmarkDeliverAck/coalesced", "BenchmarkDeliverAck/every-advance"
	all, batches := "BenchmarkPull/all", "BenchmarkPull/batches"
	fmt.Printf("%d records per run, %d alternating runs each, medians; 4 shards, pages of 10,000, records of 100 bytes\n", *benchCount, *benchPairs)
	for _, row := range []struct{ label, name string }{
		{"baseline: channel send/receive, buffered 1000   ", buf},
		{"baseline: channel send/receive, unbuffered      ", unbuf},
		{"kinesub Messages(), ack each, coalesced        ", co},
		{"kinesub Messages(), ack each, every advance    ", ea},
		{"kinesub All, ack each, coalesced               ", all},
		{"kinesub Batches, one Ack a batch, coalesced    ", batches},
	} {
		fmt.Printf("  %s %7.1f ns/record %7.1f ns CPU/record %8.4f allocs/record\n",
			row.label, med(row.name, "ns/record"), med(row.name, "cpu-ns/record"), med(row.name, "allocs/record"))
	}
	fmt.Println("  deliver + ack ÷ unbuffered channel send/receive (wall time; CPU time in brackets):")
	for _, row := range []struct {
		label, name string
		goal        float64
	}{
		{"Messages()", co, 2}, {"All       ", all, 1}, {"Batches   ", batches, 0.5},
	} {
		r := ratio(row.name, unbuf, "ns/record")
		fmt.Printf("    %s %5.2f× (%5.2f×)  goal ≤ %.1f×: %s\n", row.label, r, ratio(row.name, unbuf, "cpu-ns/record"), row.goal, verdict(r <= row.goal))
	}
	fmt.Printf("  Messages() deliver + ack ÷ buffered channel %5.2f×\n", ratio(co, buf, "ns/record"))
	mo := "BenchmarkDeliverAck/coalesced-metered"
	fmt.Printf("  Messages() deliver + ack with an SDK MeterProvider and reader ÷ without %5.2f×  goal ≤ 1.03: %s\n",
		ratio(mo, co, "ns/record"), verdict(ratio(mo, co, "ns/record") <= 1.03))
	cw, ew := med(co, "writes/10k-acks"), med(ea, "writes/10k-acks")
	fmt.Printf("  checkpoint writes per 10,000 acks: coalesced (5s) %.3f (only Close's final flush, one per shard), every advance %.0f: coalesced ÷ every advance %.1e\n",
		cw, ew, cw/ew)
	fmt.Println("  never-acking consumer, 1,000,000-record backlog on 4 shards (served in process: publishing")
	fmt.Println("  1,000,000 records to kinesalite alone would take over a minute; see the end-to-end pass for a real client):")
	for _, name := range []string{"BenchmarkPeakHeapNeverAck/cap=1000", "BenchmarkPeakHeapNeverAck/cap=10000"} {
		rs := results[name]
		if len(rs) == 0 {
			return fmt.Errorf("no result for %s", name)
		}
		r := rs[0]
		fmt.Printf("    WithMaxInFlight(%s): %.0f delivered (cap × shards %.0f); peak heap %.1f MiB, live %.1f MiB, cap × shards × 100 B = %.2f MiB: peak ÷ that %.1f×, live %.0f B per held record; leases lost %.0f, not held at the end %.0f\n",
			strings.TrimPrefix(name, "BenchmarkPeakHeapNeverAck/cap="), r["delivered"], r["cap-records"],
			r["peak-heap-MiB"], r["live-heap-MiB"], r["bound-MiB"], r["peak-heap-MiB"]/r["bound-MiB"],
			r["live-heap-MiB"]*(1<<20)/max(r["delivered"], 1), r["leases-lost"], r["leases-not-held"])
	}
	fmt.Println()
	return nil
}

// moduleRoot returns the library's directory: the parent of this command's module (bench/).
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the kinesub bench module: run from its directory")
	}
	return filepath.Dir(filepath.Dir(gomod)), nil
}

// runBench runs the benchmarks matching pattern and appends each result line to results.
func runBench(bin, pattern, benchtime string, results map[string][]benchResult) error {
	cmd := exec.Command(bin, "-test.run", "^$", "-test.bench", pattern, "-test.benchtime", benchtime)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("benchmarks %s: %w\n%s%s", pattern, err, out, stderr.Bytes())
	}
	found := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i] // the GOMAXPROCS suffix
		}
		r := benchResult{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return fmt.Errorf("benchmark line %q: %w", sc.Text(), err)
			}
			r[f[i+1]] = v
		}
		results[name] = append(results[name], r)
		found = true
	}
	if !found {
		return fmt.Errorf("benchmarks %s printed no results:\n%s", pattern, out)
	}
	return nil
}
