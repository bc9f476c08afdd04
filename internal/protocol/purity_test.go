package protocol

import (
	"encoding/json"
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

// forbiddenTime are the time package's functions that read the clock or start a timer.
var forbiddenTime = map[string]bool{
	"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true, "AfterFunc": true,
	"NewTimer": true, "NewTicker": true, "Tick": true,
}

// TestPurity: the package's non-test files start no goroutine, call none of time's clock or
// timer functions, and import only allowedImports.
func TestPurity(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		timeName := "" // the name the file imports time under
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !allowedImports[path] {
				t.Errorf("%s imports %q, outside the core's allow-list", fset.Position(imp.Pos()), path)
			}
			if path == "time" {
				timeName = "time"
				if imp.Name != nil {
					timeName = imp.Name.Name
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: a go statement", fset.Position(n.Pos()))
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && timeName != "" && x.Name == timeName && forbiddenTime[n.Sel.Name] {
					t.Errorf("%s: time.%s reads the clock or starts a timer", fset.Position(n.Pos()), n.Sel.Name)
				}
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no source file checked")
	}
}

// TestPurityDeps: what the package links, transitively, is the standard library alone: not the
// root package, not lease (which links the AWS SDK), nothing of a third party.
func TestPurityDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath,Standard", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
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
		if !p.Standard && p.ImportPath != "github.com/gostream/kinesub/internal/protocol" {
			t.Errorf("the core links %s", p.ImportPath)
		}
	}
	if n < 2 {
		t.Fatalf("go list found %d packages", n)
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
