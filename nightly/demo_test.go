package nightly_test

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/arpatch/arpatch/harness/sglangtest"
	"github.com/arpatch/arpatch/nightly/internal/demo"
)

// demoLine matches the documented command line and captures its -dir.
var demoLine = regexp.MustCompile(`(?m)^go run \./nightly/demo -dir (\S+)$`)

// TestDemoAsDocumented runs the demo as the README and docs/nightly.md
// print it (from the repository root, with their -dir moved into the
// test's directory), on an in-memory network in a synctest bubble, so
// that its six nights of benches take no real time: the same servers,
// builds with the fake toolchain, history and reports as `go run` gives,
// only the transport differs (main's httptest servers). It checks the
// printed night lines against the README's, exit code 1 and every report
// file.
func TestDemoAsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../docs/usage.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{"../docs/usage.md", "../docs/nightly.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !demoLine.Match(b) {
			t.Fatalf("%s no longer shows `go run ./nightly/demo -dir DIR`; update this test with it", doc)
		}
	}
	// The README shows the first and the last night's lines of a run.
	var shown []string
	for _, l := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(l, "night ") && strings.Contains(l, "): exit ") {
			shown = append(shown, l)
		}
	}
	if len(shown) != 2 {
		t.Fatalf("docs/usage.md shows %d night lines, want the first and the last: %q", len(shown), shown)
	}

	dir := filepath.Join(t.TempDir(), "nightly-demo")
	t.Chdir("..") // "Run it from the repository root"
	var out, errb bytes.Buffer
	code := -1
	synctest.Test(t, func(t *testing.T) {
		n := sglangtest.NewNetwork()
		defer n.Close()
		code = demo.Run([]string{"-dir", dir}, &out, &errb, n.Serve, n.HTTP())
	})
	if code != 1 || errb.Len() != 0 {
		t.Fatalf("exit %d, want 1 (the planted regression); stderr:\n%s\nstdout:\n%s", code, errb.String(), out.String())
	}
	lines := strings.Split(out.String(), "\n")
	if len(lines) < 6 || lines[0] != shown[0] || lines[5] != shown[1] {
		t.Fatalf("night lines\n%s\nwant first and last as the README shows:\n%s", strings.Join(lines[:min(6, len(lines))], "\n"), strings.Join(shown, "\n"))
	}
	for i, l := range lines[1:5] {
		if !strings.HasSuffix(l, "exit 0, no regression") {
			t.Errorf("night %d: %q, want an ordinary night", i+2, l)
		}
	}
	for _, f := range []string{"nightly.json", "summary.md", "github-benchmark-bigger.json", "github-benchmark-smaller.json", "bencher.json", "junit.xml", "tok_s.svg", "tok_s.png"} {
		if st, err := os.Stat(filepath.Join(dir, "out", f)); err != nil || st.Size() == 0 {
			t.Errorf("report %s: %v", f, err)
		}
	}
}

// TestPrepare: the demo empties a directory it made before (its marker)
// and recreates a missing one; a directory of someone else's files is
// refused, naming -dir, and left as it was.
func TestPrepare(t *testing.T) {
	earlier := t.TempDir()
	for _, f := range []string{demo.Marker, "history.db"} {
		if err := os.WriteFile(filepath.Join(earlier, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := demo.Prepare(earlier); err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(earlier); err != nil || len(ents) != 1 || ents[0].Name() != demo.Marker {
		t.Errorf("an earlier demo's directory after prepare: %v, %v; want only the marker", ents, err)
	}
	fresh := filepath.Join(t.TempDir(), "a", "b")
	if abs, err := demo.Prepare(fresh); err != nil || abs != fresh {
		t.Errorf("demo.Prepare(%s) = %q, %v", fresh, abs, err)
	}
	foreign := t.TempDir()
	keep := filepath.Join(foreign, "notes.txt")
	if err := os.WriteFile(keep, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := demo.Prepare(foreign); err == nil || err.Error() != "-dir "+foreign+" is not empty and was not made by this demo; name a new directory" {
		t.Errorf("a foreign -dir: %v", err)
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "mine\n" {
		t.Errorf("the foreign -dir's file after the refusal: %q, %v", b, err)
	}
}

// TestDemoRefusals: a -dir holding files the demo did not make is refused
// and left as it was; run anywhere but the repository root, the demo says
// where to run it. Both exit 2.
func TestDemoRefusals(t *testing.T) {
	noServe := func(h http.Handler) (string, func()) { t.Fatal("served a server after a refusal"); return "", nil }
	foreign := t.TempDir()
	keep := filepath.Join(foreign, "notes.txt")
	if err := os.WriteFile(keep, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	t.Chdir("..")
	if code := demo.Run([]string{"-dir", foreign}, &out, &errb, noServe, nil); code != 2 || !strings.Contains(errb.String(), "-dir "+foreign+" is not empty and was not made by this demo; name a new directory") {
		t.Errorf("foreign -dir: exit %d, stderr %q", code, errb.String())
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "mine\n" {
		t.Errorf("foreign -dir's file after the refusal: %q, %v", b, err)
	}
	errb.Reset()
	t.Chdir(t.TempDir())
	if code := demo.Run([]string{"-dir", filepath.Join(t.TempDir(), "d")}, &out, &errb, noServe, nil); code != 2 || !strings.Contains(errb.String(), "run the demo from the arpatch repository root") {
		t.Errorf("outside the repository root: exit %d, stderr %q", code, errb.String())
	}
}
