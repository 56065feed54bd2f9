package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadme_BuildCommands checks that the commands the README gives to
// run, build and install natsdelay name this package and the Makefile's
// targets, so that they keep working when either moves.
func TestReadme_BuildCommands(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(readme), "\n")
	// The first commands are how to start and test it.
	var first []string
	for _, l := range lines {
		if strings.HasPrefix(l, "    ") {
			first = append(first, strings.Fields(l)[0]+" "+strings.Fields(l)[1])
		} else if len(first) > 0 {
			break
		}
	}
	if len(first) != 2 || first[0] != "go run" || first[1] != "make test" {
		t.Errorf("README's first commands are %q, want go run and make test", first)
	}
	for _, cmd := range []string{"go run ./cmd/natsdelay", "go install ./cmd/natsdelay", "make build", "make test"} {
		if !strings.Contains(string(readme), "    "+cmd) {
			t.Errorf("README does not give %q", cmd)
		}
	}
	for _, target := range []string{"build", "test"} {
		if !regexp.MustCompile(`(?m)^` + target + `:`).Match(makefile) {
			t.Errorf("Makefile has no %s target, which the README gives", target)
		}
	}
	if !regexp.MustCompile(`(?m)^build:\n\t\$\(GO\) build -o bin/natsdelay \./cmd/natsdelay$`).Match(makefile) {
		t.Errorf("make build does not build ./cmd/natsdelay into bin/natsdelay, as the README says")
	}
	if _, err := os.Stat("main.go"); err != nil {
		t.Errorf("./cmd/natsdelay has no main.go: %v", err)
	}
}

// TestDocs_NatsReply_DashAnswers checks that every nats reply in the docs
// whose answer starts with - has -- before it: the nats CLI takes '-NAK 5s'
// for a flag and fails with unknown short flag '-N'.
func TestDocs_NatsReply_DashAnswers(t *testing.T) {
	files := []string{"../../README.md"}
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, docs...)
	reply := regexp.MustCompile(`nats reply \S+ (--\s+)?'(-[^']*)'`)
	seen := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range reply.FindAllStringSubmatch(string(b), -1) {
			seen++
			if m[1] == "" {
				t.Errorf("%s: %q: the nats CLI takes %q for a flag; put -- before it", f, m[0], m[2])
			}
		}
	}
	if seen == 0 {
		t.Errorf("no nats reply with a - answer in the docs: the example of -- is gone")
	}
}
