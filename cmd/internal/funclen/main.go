// Command funclen reports every function longer than a limit (80 lines by
// default) in the Go files under the directories it is given, other than
// tests and generated files, and exits 1 if there is one. make lint runs
// it over the module.
//
// A function's length counts its lines from the line of its func keyword
// to the line of its closing brace, both included: its doc comment is not
// counted.
//
// Usage:
//
//	funclen [-max 80] [dir | dir/...]...
//
// A directory ending in /... is walked with its subdirectories, except
// testdata, vendor and those whose names start with "." or "_", as the go
// command does; with no argument, funclen walks ./....
package main

import (
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	limit := flag.Int("max", 80, "the most lines a function may have")
	flag.Parse()
	n, err := run(os.Stdout, *limit, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "funclen:", err)
		os.Exit(2)
	}
	if n > 0 {
		fmt.Fprintf(os.Stderr, "funclen: %d functions over %d lines: split them\n", n, *limit)
		os.Exit(1)
	}
}

// run writes to w a line "file:line name length" for each function over
// limit lines in the directories patterns name, and returns their number.
func run(w io.Writer, limit int, patterns []string) (int, error) {
	if len(patterns) == 0 {
		patterns = []string{"./..."}
	}
	var files []string
	for _, p := range patterns {
		found, err := goFiles(p)
		if err != nil {
			return 0, err
		}
		files = append(files, found...)
	}
	n := 0
	fset := token.NewFileSet()
	for _, name := range files {
		long, err := longFuncs(fset, name, limit)
		if err != nil {
			return n, err
		}
		for _, f := range long {
			fmt.Fprintf(w, "%s:%d %s %d\n", name, f.line, f.name, f.lines)
		}
		n += len(long)
	}
	return n, nil
}

// goFiles lists the non-test Go files of the directory pattern names: dir,
// or dir/... for dir and its subdirectories.
func goFiles(pattern string) ([]string, error) {
	dir, recursive := strings.CutSuffix(pattern, "/...")
	if pattern == "..." {
		dir, recursive = ".", true
	}
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == dir {
				return nil
			}
			if !recursive || skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			files = append(files, path)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: no such directory", dir)
	}
	return files, err
}

// skipDir reports whether the go command ignores a directory of this name.
func skipDir(name string) bool {
	return name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

// longFunc is a function over the limit.
type longFunc struct {
	name  string // Name, or Type.Name for a method
	line  int    // of its func keyword
	lines int
}

// longFuncs parses the file name and returns its functions over limit
// lines; none if the file is generated.
func longFuncs(fset *token.FileSet, name string, limit int) ([]longFunc, error) {
	f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	if ast.IsGenerated(f) {
		return nil, nil
	}
	var long []longFunc
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		start, end := fset.Position(fd.Pos()).Line, fset.Position(fd.End()).Line
		if n := end - start + 1; n > limit {
			long = append(long, longFunc{name: funcName(fd), line: start, lines: n})
		}
	}
	return long, nil
}

// funcName is fd's name, with its receiver's type for a method:
// Service.Close.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr: // a generic type's method
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}
