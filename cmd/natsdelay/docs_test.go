package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestDocs_Operations_AdminCommands checks section 3 of docs/operations.md
// against the API: every endpoint the service registers as a micro
// service is named, and every admin command has a line.
func TestDocs_Operations_AdminCommands(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, _ := strings.Cut(string(b), "\n## 3. Admin commands\n")
	sec, _, _ = strings.Cut(sec, "\n## 4.")
	for _, verb := range []string{wire.VerbInfo, wire.VerbGet, wire.VerbList, wire.VerbCancel, wire.VerbSubjects, wire.VerbSchedules} {
		if name := strings.ToLower(verb); !strings.Contains(sec, "`"+name+"`") {
			t.Errorf("docs/operations.md section 3 does not name the endpoint `%s`", name)
		}
	}
	for _, cmd := range []string{"info", "subjects", "ls", "get", "cancel", "schedules"} {
		if !strings.Contains(sec, "    natsdelay "+cmd) {
			t.Errorf("docs/operations.md section 3 has no line for natsdelay %s", cmd)
		}
	}
}

// TestArchitecture_NamedFunctionsExist checks docs/architecture.md: every
// function it names as `file.go` `(*Type).Method` or `file.go` `Func`
// exists in that file, so that the page's message path and goroutine
// owners cannot name code that moved or was renamed.
func TestArchitecture_NamedFunctionsExist(t *testing.T) {
	doc, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	ref := regexp.MustCompile("`([a-z0-9_/]+\\.go)`\\s+`(?:\\(\\*?(\\w+)\\)\\.)?(\\w+)`")
	refs := ref.FindAllStringSubmatch(string(doc), -1)
	if len(refs) < 25 {
		t.Fatalf("docs/architecture.md names %d functions, want the path's and the owners' (25 or more)", len(refs))
	}
	files := map[string]map[string]bool{}
	for _, r := range refs {
		file, recv, name := r[1], r[2], r[3]
		funcs, ok := files[file]
		if !ok {
			funcs = map[string]bool{}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("../..", file), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Errorf("docs/architecture.md names %s: %v", file, err)
				continue
			}
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok {
					continue
				}
				key := fd.Name.Name
				if fd.Recv != nil && len(fd.Recv.List) == 1 {
					typ := fd.Recv.List[0].Type
					if star, ok := typ.(*ast.StarExpr); ok {
						typ = star.X
					}
					if id, ok := typ.(*ast.Ident); ok {
						key = id.Name + "." + key
					}
				}
				funcs[key] = true
			}
			files[file] = funcs
		}
		key := name
		if recv != "" {
			key = recv + "." + name
		}
		if !funcs[key] {
			t.Errorf("docs/architecture.md names %s in %s, which has no such function", key, file)
		}
	}
}

// TestDocs_ClusterCerts_SampleIsTheOutput checks docs/cluster.md's run of
// cluster certs against the command: its lines are what it prints for
// the sample's --dir under the sample's working directory.
func TestDocs_ClusterCerts_SampleIsTheOutput(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/cluster.md")
	if err != nil {
		t.Fatal(err)
	}
	const cwd = "/srv/natsdelay"
	_, sample, ok := strings.Cut(string(doc), "$ cd "+cwd+"\n$ natsdelay cluster certs --dir certs --hosts 127.0.0.1 a b c\n")
	sample, _, ok2 := strings.Cut(sample, "\n\n")
	if !ok || !ok2 {
		t.Fatal("docs/cluster.md has no run of natsdelay cluster certs --dir certs in " + cwd)
	}
	dir := filepath.Join(t.TempDir(), "certs")
	var out, errOut bytes.Buffer
	if code := run([]string{"cluster", "certs", "--dir", dir, "--hosts", "127.0.0.1", "a", "b", "c"}, strings.NewReader(""), &out, &errOut); code != exitOK {
		t.Fatalf("cluster certs: exit %d, %s", code, errOut.String())
	}
	if got := strings.ReplaceAll(strings.TrimSuffix(out.String(), "\n"), dir, cwd+"/certs"); got != sample {
		t.Errorf("docs/cluster.md shows\n%s\nthe command prints (its dir as the sample's)\n%s", sample, got)
	}
}

// TestDocs_Operations_EveryServeFlag checks docs/operations.md's table of
// serve flags against serve's flags: each flag serve takes has a row, and
// each row names a flag serve takes, so that neither can drift.
func TestDocs_Operations_EveryServeFlag(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(doc), "\n### serve flags\n")
	table, _, _ = strings.Cut(table, "\n### ")
	rows := map[string]bool{}
	for line := range strings.SplitSeq(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range regexp.MustCompile("`--([a-z0-9-]+)").FindAllStringSubmatch(cells[1], -1) {
			rows[m[1]] = true
		}
	}
	_, kctx, err := parse([]string{"serve"}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]bool{}
	for _, group := range kctx.Flags() {
		if group.Hidden || group.Name == "help" || group.Name == "version" {
			continue
		}
		flags[group.Name] = true
		if !rows[group.Name] {
			t.Errorf("docs/operations.md's serve flags have no row for --%s", group.Name)
		}
	}
	for name := range rows {
		if !flags[name] {
			t.Errorf("docs/operations.md's serve flags have a row for --%s, which serve does not take", name)
		}
	}
}
