package client_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadme_GoExampleIsTheClients checks that the README's Go example is
// the package's Example, which go test runs against a real service: its
// code block, after the connect line, is the Example's code between the
// README markers, word for word, so the two cannot drift.
func TestReadme_GoExampleIsTheClients(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## From Go\n")
	_, block, ok2 := strings.Cut(section, "```go\n")
	block, _, ok3 := strings.Cut(block, "```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal(`README has no Go code block under "## From Go"`)
	}
	connect, code, _ := strings.Cut(block, "\n")
	if connect != "nc, _ := nats.Connect(nats.DefaultURL)" {
		t.Errorf("README's Go example starts with %q, want the connect line", connect)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, example, ok := strings.Cut(string(src), "\t// README begins\n")
	example, _, ok2 = strings.Cut(example, "\t// README ends\n")
	if !ok || !ok2 {
		t.Fatal("example_test.go has no README markers")
	}
	lines := strings.Split(example, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "\t")
	}
	if want := strings.Join(lines, "\n"); code != want {
		t.Errorf("README's Go example, after the connect line:\n%s\nwant the Example's code:\n%s", code, want)
	}
}

// TestReadme_NamesEverySentinelError checks that the README and
// docs/protocol.md name each error value of package wire that an error
// answer matches, so that a new one cannot go unmentioned.
func TestReadme_NamesEverySentinelError(t *testing.T) {
	src, err := os.ReadFile("../wire/errors.go")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`(?m)^\t(Err\w+) += errors\.New`).FindAllStringSubmatch(string(src), -1)
	if len(names) < 4 {
		t.Fatalf("found %d error values in wire/errors.go, want at least 4", len(names))
	}
	for _, doc := range []string{"../../README.md", "../../docs/protocol.md"} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if !strings.Contains(string(text), "`wire."+n[1]+"`") {
				t.Errorf("%s does not name `wire.%s`", doc, n[1])
			}
		}
	}
}
