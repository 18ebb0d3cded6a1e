package traffic_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strings"
	"testing"
)

// label is the word a constant's doc names its source with.
var label = regexp.MustCompile(`\b(Measured here|Published|Fitted|Assumed|Upstream)\b`)

// TestConstantsLabelled: every constant of traffic.Params says where its
// value comes from (measured here, published, fitted, assumed, upstream),
// and docs/pcie-dispatch.md's table of constants has a row for it with
// the same kind, its source and what would change if it were wrong.
// (CustomFixedUS read "Measured here", though no run measures it apart.)
func TestConstantsLabelled(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "params.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{} // field -> label, lower case
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "Params" {
			return true
		}
		prev := ""
		for _, fl := range ts.Type.(*ast.StructType).Fields.List {
			name := fl.Names[0].Name
			if name == "Source" {
				continue
			}
			kind := prev // a field without a doc shares the one above it
			if fl.Doc != nil {
				m := label.FindString(fl.Doc.Text())
				if m == "" {
					t.Errorf("Params.%s: its doc names no source (Measured here, Published, Fitted, Assumed, Upstream)", name)
				}
				kind = strings.ToLower(m)
			}
			for _, n := range fl.Names {
				kinds[n.Name] = kind
			}
			prev = kind
		}
		return false
	})
	if len(kinds) < 15 {
		t.Fatalf("read %d constants from params.go", len(kinds))
	}
	b, err := os.ReadFile("../../docs/pcie-dispatch.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{} // field -> its row's cells
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for _, m := range regexp.MustCompile("`([A-Za-z0-9]+)`").FindAllStringSubmatch(cells[0], -1) {
			rows[m[1]] = cells
		}
	}
	for field, kind := range kinds {
		cells, ok := rows[field]
		switch {
		case !ok:
			t.Errorf("docs/pcie-dispatch.md has no row for %s (%s)", field, kind)
		case len(cells) < 5:
			t.Errorf("%s's row lacks its source or what would change: %q", field, cells)
		case strings.TrimSpace(cells[2]) != kind:
			t.Errorf("docs/pcie-dispatch.md calls %s %q, its doc %q", field, strings.TrimSpace(cells[2]), kind)
		case strings.TrimSpace(cells[3]) == "" || strings.TrimSpace(cells[4]) == "":
			t.Errorf("%s's row names no source or no consequence: %q", field, cells)
		}
	}
}
