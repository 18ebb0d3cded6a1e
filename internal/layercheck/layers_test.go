package layercheck

import (
	"fmt"
	"go/parser"
	"go/token"
	"maps"
	"os"
	pathpkg "path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/internal/gosource"
)

const module = "github.com/arpatch/arpatch"

// layer is one row of docs/layers.md: its name and its package patterns
// ("recipes", or "harness/..." for a folder and everything below it).
type layer struct {
	name     string
	patterns []string
}

// edge is one import of one file: from package from (a path below the
// module) to package to.
type edge struct {
	file, from, to string
}

var rowRe = regexp.MustCompile(`^\|\s*([a-z]+)\s*\|([^|]*)\|`)
var codeRe = regexp.MustCompile("`([^`]+)`")

// readLayers reads the table between <!-- layers and <!-- /layers --> of
// doc, lowest layer first.
func readLayers(doc string) ([]layer, error) {
	start := strings.Index(doc, "<!-- layers")
	end := strings.Index(doc, "<!-- /layers -->")
	if start < 0 || end < start {
		return nil, fmt.Errorf("no <!-- layers --> ... <!-- /layers --> table")
	}
	var out []layer
	for _, line := range strings.Split(doc[start:end], "\n") {
		m := rowRe.FindStringSubmatch(line)
		if m == nil || m[1] == "layer" {
			continue
		}
		l := layer{name: m[1]}
		for _, c := range codeRe.FindAllStringSubmatch(m[2], -1) {
			l.patterns = append(l.patterns, c[1])
		}
		if len(l.patterns) == 0 {
			return nil, fmt.Errorf("layer %s names no package", l.name)
		}
		out = append(out, l)
	}
	if len(out) < 2 {
		return nil, fmt.Errorf("the table has %d layers", len(out))
	}
	return out, nil
}

// place returns the index of the layer whose most specific pattern matches
// pkg (an exact path beats a folder's "/..."), -1 for none.
func place(layers []layer, pkg string) int {
	best, bestLen := -1, -1
	for i, l := range layers {
		for _, p := range l.patterns {
			n := -1
			if dir, ok := strings.CutSuffix(p, "/..."); ok {
				if pkg == dir || strings.HasPrefix(pkg, dir+"/") {
					n = len(dir)
				}
			} else if pkg == p {
				n = len(p) + 1 // exact
			}
			if n > bestLen {
				best, bestLen = i, n
			}
		}
	}
	return best
}

// folder is pkg's top-level folder ("harness" for harness/report).
func folder(pkg string) string {
	f, _, _ := strings.Cut(pkg, "/")
	return f
}

// violations returns each import of edges that runs up the layers, each
// package no layer places, and each circle between top-level folders.
func violations(layers []layer, edges []edge) []string {
	var out []string
	unplaced := map[string]bool{}
	at := func(pkg string) int {
		i := place(layers, pkg)
		if i < 0 && !unplaced[pkg] {
			unplaced[pkg] = true
			out = append(out, fmt.Sprintf("%s: no row of docs/layers.md places it; add it to the lowest layer whose packages it needs", pkg))
		}
		return i
	}
	folders := map[string]map[string]string{} // from folder -> to folder -> an edge, as a file:import
	for _, e := range edges {
		i, j := at(e.from), at(e.to)
		if i >= 0 && j > i {
			out = append(out, fmt.Sprintf("%s: %s (layer %s) imports %s (layer %s, above it)", e.file, e.from, layers[i].name, e.to, layers[j].name))
		}
		if a, b := folder(e.from), folder(e.to); a != b {
			if folders[a] == nil {
				folders[a] = map[string]string{}
			}
			if _, ok := folders[a][b]; !ok {
				folders[a][b] = e.file + " imports " + e.to
			}
		}
	}
	return append(out, circles(folders)...)
}

// circles returns one line per circle of the folder graph g, each found
// from its smallest folder name, naming an import on each of its arrows.
func circles(g map[string]map[string]string) []string {
	var out []string
	seen := map[string]bool{}
	var path []string
	var walk func(f string)
	walk = func(f string) {
		if i := slices.Index(path, f); i >= 0 {
			c := append(slices.Clone(path[i:]), f)
			if slices.Min(c) != c[0] {
				return // reported from its smallest folder
			}
			key := strings.Join(c, " -> ")
			if seen[key] {
				return
			}
			seen[key] = true
			var why []string
			for k := 0; k+1 < len(c); k++ {
				why = append(why, g[c[k]][c[k+1]])
			}
			out = append(out, fmt.Sprintf("folders in a circle: %s (%s)", key, strings.Join(why, "; ")))
			return
		}
		path = append(path, f)
		for _, to := range slices.Sorted(maps.Keys(g[f])) {
			walk(to)
		}
		path = path[:len(path)-1]
	}
	for _, f := range slices.Sorted(maps.Keys(g)) {
		walk(f)
	}
	return out
}

// imports returns every import of the module's packages in the non-test
// Go files under root, skipping testdata and folders Go skips ('.', '_').
func imports(root string) ([]edge, error) {
	var out []edge
	fset := token.NewFileSet()
	err := gosource.Walk(root, func(path, rel string) error {
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		from := pathpkg.Dir(rel)
		for _, im := range f.Imports {
			p, err := strconv.Unquote(im.Path.Value)
			if err != nil {
				return err
			}
			if to, ok := strings.CutPrefix(p, module+"/"); ok {
				out = append(out, edge{file: rel, from: from, to: to})
			}
		}
		return nil
	})
	return out, err
}

// TestLayers holds arpatch's imports to docs/layers.md.
func TestLayers(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "layers.md"))
	if err != nil {
		t.Fatal(err)
	}
	layers, err := readLayers(string(doc))
	if err != nil {
		t.Fatalf("docs/layers.md: %v", err)
	}
	edges, err := imports(root)
	if err != nil {
		t.Fatal(err)
	}
	// The walk saw the whole tree: the lowest and the highest layers'
	// packages, and an import between two of them.
	if len(edges) < 100 || !slices.ContainsFunc(edges, func(e edge) bool { return e.from == "cmd/arpatch" && e.to == "checkout" }) {
		t.Fatalf("read %d imports, none of cmd/arpatch to checkout: the walk missed the tree", len(edges))
	}
	for _, v := range violations(layers, edges) {
		t.Error(v)
	}
}

// TestViolations: the check finds an import that runs up, a package no
// row places and a circle between folders, and passes a graph without.
func TestViolations(t *testing.T) {
	layers, err := readLayers("<!-- layers -->\n| layer | packages | what |\n|---|---|---|\n| ground | `internal/...` | x |\n| store | `history` | x |\n| harness | `harness/...` | x |\n| reports | `harness/report` | x |\n<!-- /layers -->\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := place(layers, "harness/report"); got != 3 {
		t.Errorf("harness/report placed in layer %d, want 3 (the exact row beats harness/...)", got)
	}
	ok := []edge{{"history/a.go", "history", "internal/x"}, {"harness/report/r.go", "harness/report", "history"}, {"harness/bench/b.go", "harness/bench", "internal/x"}}
	if v := violations(layers, ok); len(v) != 0 {
		t.Errorf("a graph that holds: %q", v)
	}
	bad := append(slices.Clone(ok), edge{"internal/x/x.go", "internal/x", "history"}, edge{"kernels/k.go", "kernels", "internal/x"})
	want := []string{
		"internal/x/x.go: internal/x (layer ground) imports history (layer store, above it)",
		"kernels: no row of docs/layers.md places it; add it to the lowest layer whose packages it needs",
		"folders in a circle: history -> internal -> history (history/a.go imports internal/x; internal/x/x.go imports history)",
	}
	if v := violations(layers, bad); !slices.Equal(v, want) {
		t.Errorf("violations:\n got %q\nwant %q", v, want)
	}
}
