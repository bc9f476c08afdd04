package protocol

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The core decides and does nothing: no goroutine, no clock, no randomness of its own, no
// context, no I/O. These tests hold it to that, by its source and by what it links.

// allowedImports are the packages the core's non-test files may import.
var allowedImports = map[string]bool{
	"cmp": true, "errors": true, "maps": true, "math": true, "slices": true, "sort": true,
	"strconv": true, "strings": true, "time": true,
}

// simImports are the packages protosim's non-test files may import besides the core's: the
// core itself, formatting and hashing for its event log, and math/rand/v2 for its one seeded
// source (whose top-level functions, seeded at random, it may not call: simRand).
var simImports = map[string]bool{
	"github.com/gostream/kinesub/internal/protocol": true, "fmt": true, "hash": true, "hash/fnv": true,
	"math/rand/v2": true,
}

// simRand are math/rand/v2's functions protosim may call: those that make a seeded source.
var simRand = map[string]bool{"New": true, "NewPCG": true, "Rand": true, "PCG": true}

// forbiddenTime are the time package's functions that read the clock or start a timer.
var forbiddenTime = map[string]bool{
	"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true, "AfterFunc": true,
	"NewTimer": true, "NewTicker": true, "Tick": true,
}

// purityRules are what one package's non-test files may do.
type purityRules struct {
	imports map[string]bool // allowed imports
	rand    map[string]bool // math/rand/v2's names they may use (nil: none, and no import)
}

func (r purityRules) allowed(path string) bool {
	return allowedImports[path] || r.imports[path] || path == "math/rand/v2" && r.rand != nil
}

// impure lists what file (parsed) does that rules forbid: an import outside the allow-list, a
// go statement, a clock or timer function of time, a draw from math/rand's unseeded source.
func impure(fset *token.FileSet, f *ast.File, rules purityRules) []string {
	var bad []string
	names := map[string]string{} // the names the file imports time and math/rand/v2 under
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if !rules.allowed(path) {
			bad = append(bad, fmt.Sprintf("%s imports %q, outside the allow-list", fset.Position(imp.Pos()), path))
		}
		if path == "time" || path == "math/rand/v2" {
			name := filepath.Base(strings.TrimSuffix(path, "/v2"))
			if imp.Name != nil {
				name = imp.Name.Name
			}
			names[name] = path
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			bad = append(bad, fmt.Sprintf("%s: a go statement", fset.Position(n.Pos())))
		case *ast.SelectorExpr:
			x, ok := n.X.(*ast.Ident)
			if !ok {
				break
			}
			switch names[x.Name] {
			case "time":
				if forbiddenTime[n.Sel.Name] {
					bad = append(bad, fmt.Sprintf("%s: time.%s reads the clock or starts a timer", fset.Position(n.Pos()), n.Sel.Name))
				}
			case "math/rand/v2":
				if !rules.rand[n.Sel.Name] {
					bad = append(bad, fmt.Sprintf("%s: rand.%s draws from a source not seeded by the run", fset.Position(n.Pos()), n.Sel.Name))
				}
			}
		}
		return true
	})
	return bad
}

// checkPurity holds dir's non-test files to rules and returns the names of those it checked.
func checkPurity(t *testing.T, dir string, rules purityRules) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		checked[filepath.Base(name)] = true
		for _, b := range impure(fset, f, rules) {
			t.Error(b)
		}
	}
	if len(checked) == 0 {
		t.Fatalf("%s: no source file checked", dir)
	}
	return checked
}

// TestPurity: the core's non-test files, the Machine's among them, start no goroutine, call
// none of time's clock or timer functions, and import only allowedImports (no math/rand, no
// context, no sync, no I/O).
func TestPurity(t *testing.T) {
	checked := checkPurity(t, ".", purityRules{})
	for _, name := range []string{"machine.go", "machine_claim.go", "machine_join.go", "machine_ops.go", "machine_peers.go", "machine_shard.go", "io.go"} {
		if !checked[name] {
			t.Errorf("%s was not checked", name)
		}
	}
}

// TestPuritySimulator: protosim, the simulator and explorer, may use math/rand/v2, but only
// through a source it seeds itself, and otherwise does what the core does: no goroutine, no
// clock, no I/O.
func TestPuritySimulator(t *testing.T) {
	checked := checkPurity(t, "protosim", purityRules{imports: simImports, rand: simRand})
	for _, name := range []string{"sim.go", "explore.go", "fleet.go", "machine.go"} {
		if !checked[name] {
			t.Errorf("protosim/%s was not checked", name)
		}
	}
}

// TestPurityCatches: the checks find each kind of impurity in a file.
func TestPurityCatches(t *testing.T) {
	sim := purityRules{imports: simImports, rand: simRand}
	for _, tc := range []struct {
		name, src string
		rules     purityRules
		want      string
	}{
		{"go statement", "func f() { go f() }", purityRules{}, "go statement"},
		{"clock", `import "time"; func f() time.Time { return time.Now() }`, purityRules{}, "time.Now"},
		{"renamed clock", `import tm "time"; func f() { tm.Sleep(1) }`, purityRules{}, "time.Sleep"},
		{"I/O", `import "os"; var _ = os.Stdout`, sim, `"os"`},
		{"context", `import "context"; var _ context.Context`, purityRules{}, `"context"`},
		{"randomness in the core", `import "math/rand/v2"; var _ = rand.New`, purityRules{}, `"math/rand/v2"`},
		{"unseeded draw", `import "math/rand/v2"; func f() int { return rand.IntN(2) }`, sim, "rand.IntN"},
		{"v1 rand", `import "math/rand"; func f() int { return rand.Intn(2) }`, sim, `"math/rand"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "x.go", "package x; "+tc.src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			bad := impure(fset, f, tc.rules)
			if len(bad) == 0 || !strings.Contains(strings.Join(bad, "\n"), tc.want) {
				t.Fatalf("want a finding with %q, got %q", tc.want, bad)
			}
		})
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", `package x; import "math/rand/v2"; var r = rand.New(rand.NewPCG(1, 2))`, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	if bad := impure(fset, f, sim); len(bad) > 0 {
		t.Fatalf("a seeded source is allowed in protosim, got %q", bad)
	}
}

// TestPurityDeps: what the core and protosim link, transitively, is the standard library and
// the core alone: not the root package, not lease (which links the AWS SDK), nothing of a third
// party.
func TestPurityDeps(t *testing.T) {
	for _, pkg := range []string{".", "./protosim"} {
		out, err := exec.Command("go", "list", "-deps", "-json=ImportPath,Standard", pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		dec := json.NewDecoder(strings.NewReader(string(out)))
		n := 0
		for dec.More() {
			var p struct {
				ImportPath string
				Standard   bool
			}
			if err := dec.Decode(&p); err != nil {
				t.Fatal(err)
			}
			n++
			switch p.ImportPath {
			case "github.com/gostream/kinesub/internal/protocol", "github.com/gostream/kinesub/internal/protocol/protosim":
				continue
			}
			if !p.Standard {
				t.Errorf("%s links %s", pkg, p.ImportPath)
			}
		}
		if n < 2 {
			t.Fatalf("go list %s found %d packages", pkg, n)
		}
	}
}

// TestImportRules: nothing under internal/ imports the root package: the root interprets the
// core and uses the other internal packages, never the other way round.
func TestImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", "github.com/gostream/kinesub/internal/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	n := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		n++
		for _, imp := range p.Imports {
			if imp == "github.com/gostream/kinesub" {
				t.Errorf("%s imports the root package", p.ImportPath)
			}
		}
	}
	if n < 2 {
		t.Fatalf("go list found %d packages", n)
	}
}
