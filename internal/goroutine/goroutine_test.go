package goroutine

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arpatch/arpatch/internal/gosource"
)

// TestGoHandsPanicToHandler: a panic on a goroutine Go started reaches
// the handler with its value and a stack that names the panicking
// function; a goroutine that returns calls nothing.
func TestGoHandsPanicToHandler(t *testing.T) {
	type got struct {
		value any
		stack string
	}
	ch := make(chan got, 2)
	SetPanicHandler(func(v any, stack []byte) { ch <- got{v, string(stack)} })
	defer SetPanicHandler(nil)
	done := make(chan struct{})
	Go(func() { close(done) })
	<-done
	Go(func() { panicsOnNilMap(nil) })
	g := <-ch
	if err, ok := g.value.(error); !ok || err.Error() != "assignment to entry in nil map" {
		t.Errorf("handed %v (%T), want the runtime error assignment to entry in nil map", g.value, g.value)
	}
	if !strings.Contains(g.stack, "goroutine.panicsOnNilMap") || !strings.Contains(g.stack, "goroutine.go") {
		t.Errorf("the stack does not name the panicking function:\n%s", g.stack)
	}
	select {
	case g := <-ch:
		t.Errorf("a second hand-over %v: the goroutine that returned handed something", g.value)
	default:
	}
}

// panicsOnNilMap panics with a runtime error, given a nil m.
func panicsOnNilMap(m map[string]int) {
	m["x"]++
}

// TestNoBareGoStatements reads every non-test Go file of the module
// (skipping testdata and folders Go skips) and fails on a go statement
// outside this package's goroutine.go: every other goroutine starts with
// Go, so that its panic exits 5, not the Go runtime's 2.
func TestNoBareGoStatements(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bad, files, err := bareGoStatements(root)
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d non-test Go files under %s: not the module's root", files, root)
	}
	for _, b := range bad {
		t.Errorf("%s: a bare go statement: start it with goroutine.Go (internal/goroutine), so that a panic on it exits 5, internal error", b)
	}
}

// TestBareGoStatementFound: the check sees a go statement of any form (a
// call of a named function, a method value, a literal) in a non-test file
// and none in a test file or testdata.
func TestBareGoStatementFound(t *testing.T) {
	root := t.TempDir()
	for name, src := range map[string]string{
		"a/a.go":               "package a\n\nfunc f() {}\n\nfunc g() {\n\tgo f()\n\tgo func() {}()\n}\n",
		"a/a_test.go":          "package a\n\nfunc h() { go f() }\n",
		"a/testdata/t.go":      "package t\n\nfunc f() { go f() }\n",
		"internal/goroutine/x": "not Go",
	} {
		p := filepath.Join(root, name)
		if err := mkfile(p, src); err != nil {
			t.Fatal(err)
		}
	}
	bad, files, err := bareGoStatements(root)
	if err != nil || files != 1 || fmt.Sprint(bad) != "[a/a.go:6 a/a.go:7]" {
		t.Errorf("bareGoStatements = %v, %d files, %v; want [a/a.go:6 a/a.go:7], 1 file", bad, files, err)
	}
}

// bareGoStatements returns each go statement (as FILE:LINE, FILE
// relative to root) in the non-test Go files under root but
// internal/goroutine/goroutine.go, and how many files it read.
func bareGoStatements(root string) (bad []string, files int, err error) {
	fset := token.NewFileSet()
	err = gosource.Walk(root, func(path, rel string) error {
		if rel == "internal/goroutine/goroutine.go" {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			if g, ok := n.(*ast.GoStmt); ok {
				bad = append(bad, fmt.Sprintf("%s:%d", rel, fset.Position(g.Go).Line))
			}
			return true
		})
		return nil
	})
	return bad, files, err
}

func mkfile(path, src string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(src), 0o644)
}

// TestEndingWaitsForAPanicsHandler: a worker whose deferred close(done)
// lets the command go on while it still unwinds its panic has its
// handler run to the end before Ending's last step: the process's one
// message is the panic's (cmd/arpatch's TestGoroutinePanicExitsInternal
// through the real binary).
func TestEndingWaitsForAPanicsHandler(t *testing.T) {
	var handled atomic.Bool
	SetPanicHandler(func(any, []byte) {
		time.Sleep(30 * time.Millisecond) // a slow print of the stack
		handled.Store(true)
	})
	defer SetPanicHandler(nil)
	for i := 0; i < 20; i++ {
		handled.Store(false)
		done := make(chan struct{})
		Go(func() {
			defer close(done)
			bump(nil)
		})
		<-done
		var order []string
		Ending(func() {
			if handled.Load() {
				order = append(order, "handler")
			}
			order = append(order, "last")
		})
		if len(order) != 2 {
			t.Fatalf("round %d: Ending's last step ran before the panic's handler had ended: %v", i, order)
		}
	}
	if n := live.Load(); n != 0 {
		t.Errorf("%d goroutines counted live after every one ended", n)
	}
}

// bump panics as a real bug does, with a runtime error, given a nil m.
func bump(m map[string]int) { m["x"]++ }
