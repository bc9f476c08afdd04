package kinesub

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestREADME: the README starts with what a new user needs, and its code is code that builds
// and runs: the smallest consumer is examples/quickstart (built by make test's vet-modules) and
// the test without AWS is kinesistest's Example (run by go test), both copied verbatim, so
// neither can drift from the library. Its links to docs/ lead somewhere.
func TestREADME(t *testing.T) {
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	readme := read("README.md")
	lines := strings.Split(readme, "\n")
	start := strings.Join(lines[:min(len(lines), 160)], "\n")
	for _, src := range []string{"examples/quickstart/main.go", "kinesistest/example_test.go"} {
		block := "```go\n" + read(src) + "```\n"
		i := strings.Index(readme, block)
		if i < 0 {
			t.Errorf("README does not show %s as it is", src)
			continue
		}
		if i+len(block) > len(start) {
			t.Errorf("README shows %s past its first 160 lines", src)
		}
	}
	// The Publisher's snippet is ExamplePublisher_Publish's body from NewPublisher on (compiled
	// by go vet and go test), dedented.
	example := read("example_test.go")
	fn := example[strings.Index(example, "func ExamplePublisher_Publish() {"):]
	fn = fn[:strings.Index(fn, "\n}\n")]
	body := strings.ReplaceAll(fn[strings.Index(fn, "\tpub, err := kinesub.NewPublisher"):], "\n\t", "\n")
	if !strings.Contains(readme, "```go\n"+strings.TrimPrefix(body, "\t")+"\n```\n") {
		t.Error("README does not show ExamplePublisher_Publish's body as it is")
	}
	for _, want := range []string{"go get github.com/gostream/kinesub", "msg.Data()", "msg.Ack(ctx)", "\nmake test ", "\nmake demo ", "### Two commands"} {
		if !strings.Contains(start, want) {
			t.Errorf("the README's first 160 lines lack %q", want)
		}
	}
	// "Two commands" lists two.
	section := readme[strings.Index(readme, "### Two commands"):]
	section = section[:strings.Index(section[1:], "\n#")+1]
	if n := strings.Count(section, "\nmake "); n != 2 {
		t.Errorf("\"Two commands\" lists %d make commands", n)
	}

	link := regexp.MustCompile(`\]\(([^)#]+\.md)(#[^)]*)?\)`)
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range append([]string{"README.md"}, docs...) {
		for _, m := range link.FindAllStringSubmatch(read(doc), -1) {
			target := filepath.Join(filepath.Dir(doc), m[1])
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s links to %s, which is missing", doc, m[1])
			}
		}
	}
}
