package sizecheck

import (
	"cmp"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/internal/gosource"
)

// MaxFileLines is the most lines a non-test Go file may have.
const MaxFileLines = 700

// LongFunc is the length in lines (from func to its closing brace, doc
// comment excluded) above which a function counts as long.
const LongFunc = 80

// maxLong is the most long functions the tree may hold: 15, the goal,
// lowered further as functions are split, never raised.
const maxLong = 15

// overSize are the files allowed over MaxFileLines, each with the most
// lines it may have: none today.
var overSize = map[string]int{}

// long is a function of more than LongFunc lines.
type long struct {
	where string // file:line name
	lines int
}

// measure returns each non-test Go file under root with its line count,
// and the long functions, longest first.
func measure(root string) (map[string]int, []long, error) {
	files := map[string]int{}
	var longs []long
	fset := token.NewFileSet()
	err := gosource.Walk(root, func(path, rel string) error {
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files[rel] = strings.Count(string(src), "\n")
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return err
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				start, end := fset.Position(fd.Pos()).Line, fset.Position(fd.End()).Line
				if n := end - start + 1; n > LongFunc {
					longs = append(longs, long{fmt.Sprintf("%s:%d %s", rel, start, fd.Name.Name), n})
				}
			}
		}
		return nil
	})
	slices.SortFunc(longs, func(a, b long) int { return cmp.Or(b.lines-a.lines, strings.Compare(a.where, b.where)) })
	return files, longs, err
}

// TestSizes: no file over MaxFileLines (but those of overSize, each under
// its ceiling), and at most maxLong long functions.
func TestSizes(t *testing.T) {
	files, longs, err := measure(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if files["checkout/apply.go"] == 0 || files["cmd/arpatch/main.go"] == 0 {
		t.Fatalf("measured %d files, not checkout/apply.go and cmd/arpatch/main.go: the walk missed the tree", len(files))
	}
	biggest := 0
	for f, n := range files {
		limit := MaxFileLines
		if c, ok := overSize[f]; ok {
			limit = c
		} else {
			biggest = max(biggest, n)
		}
		if n > limit {
			t.Errorf("%s: %d lines, over %d: split it by concern", f, n, limit)
		}
	}
	t.Logf("%d non-test Go files, the largest (outside overSize) %d lines; %d functions over %d lines (at most %d):", len(files), biggest, len(longs), LongFunc, maxLong)
	for _, l := range longs {
		t.Logf("  %4d %s", l.lines, l.where)
	}
	if len(longs) > maxLong {
		t.Errorf("%d functions over %d lines, more than %d: split the new ones (go test -v lists them)", len(longs), LongFunc, maxLong)
	}
}
