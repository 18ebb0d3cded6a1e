package citecheck

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mention is an upstream file path (python/sglang/..., sglang/...,
// sgl-kernel/..., csrc/...) in comment text, outside quotes and
// backticks (the class before it) and not the tail of a longer path.
var mention = regexp.MustCompile(`(?:^|[\s(,;:])((?:python/sglang|sglang|sgl-kernel|csrc)/[\w./-]*\.(?:py|cuh|cu|h|hpp|cc|cpp|txt|toml))`)

// citedAfter is what must follow a mention ("@commit (function"); what
// must precede it is "Upstream: ".
var citedAfter = regexp.MustCompile(`^@[0-9a-f]{12,40} \(\S`)

// violations returns, for Go source src, each comment mention of an
// upstream file that is not in the form Upstream: path@commit (function).
func violations(fset *token.FileSet, name string, src []byte) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, cg := range f.Comments {
		var lines []string
		for _, c := range cg.List {
			lines = append(lines, strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(c.Text, "//"), "/*")))
		}
		text := strings.Join(lines, " ")
		for _, m := range mention.FindAllStringSubmatchIndex(text, -1) {
			start, end := m[2], m[3]
			if !strings.HasSuffix(text[:start], "Upstream: ") || !citedAfter.MatchString(text[end:]) {
				out = append(out, fset.Position(cg.Pos()).String()+": "+text[start:min(len(text), end+40)])
			}
		}
	}
	return out, nil
}

func TestViolations(t *testing.T) {
	src := `package p

// Upstream: python/sglang/srt/x.py@84118acf50b3 (f), also at 8905cbd42f4a.
// The translation unit is "csrc/allreduce/custom_all_reduce.cu" (a value).
var a int

// b is read from python/sglang/srt/server_args.py at 84118acf.
var b int

// Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh (REDUCE_CASE)
var c int

// Upstream: sgl-kernel/CMakeLists.txt@84118acf50b3a4c74e85e9ff9033792552de1a76
// (SGL_KERNEL_CUDA_FLAGS) wraps.
var d int

// Protocol facts (sglang/srt/entrypoints/http_server.py and
// sglang/bench_serving.py at 84118acf): the form without python/.
var e int
`
	got, err := violations(token.NewFileSet(), "p.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || !strings.Contains(got[0], "p.go:7:1: python/sglang/srt/server_args.py") || !strings.Contains(got[1], "p.go:10:1: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh") ||
		!strings.Contains(got[2], "p.go:17:1: sglang/srt/entrypoints/http_server.py") || !strings.Contains(got[3], "p.go:17:1: sglang/bench_serving.py") {
		t.Errorf("violations = %q", got)
	}
}

// TestTreeCitations checks every Go file of the module.
func TestTreeCitations(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && p != root) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		vs, err := violations(fset, p, src)
		if err != nil {
			return err
		}
		n++
		for _, v := range vs {
			t.Errorf("%s\n\tcite an upstream fact as Upstream: path@commit (function)", v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Fatalf("read %d Go files from %s; the walk is not reading the module", n, root)
	}
}

// outside is a citation of a document outside the repository: a
// workspace's notes (/work/....md) or a name the repository does not
// hold, which a reader of the repository cannot open.
var outside = regexp.MustCompile(`/work/[\w.+-]*\.md|\bALGOS\.md\b|\bHELPERS\.md\b`)

// TestNoCitationOutsideTheRepo: no source, script, doc or test of the
// repository cites a file outside it; what was cited is restated where it
// is used, or cited from the patches or upstream (Upstream: ...).
func TestNoCitationOutsideTheRepo(t *testing.T) {
	root := filepath.Join("..", "..")
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != root && d.Name() != ".ci" {
			return filepath.SkipDir
		}
		switch filepath.Ext(p) {
		case ".go", ".py", ".sh", ".md", ".txtar", ".toml", ".patch", ".cc", ".h":
		default:
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n++
		for i, line := range strings.Split(string(b), "\n") {
			if m := outside.FindString(line); m != "" && !strings.HasSuffix(p, "cite_test.go") {
				t.Errorf("%s:%d cites %s, outside the repository: restate what it says, or cite its source", p, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 200 {
		t.Fatalf("read %d files from %s; the walk is not reading the repository", n, root)
	}
}
