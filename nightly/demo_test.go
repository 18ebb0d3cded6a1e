package nightly_test

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/arpatch/arpatch/nightly/internal/demo"
)

// demoLine matches the documented command line and captures its -dir.
var demoLine = regexp.MustCompile(`(?m)^go run \./nightly/demo -dir (\S+)$`)

// buildKey is a build's cache key in the demo's output: it hashes the
// build's path, which is under -dir, so a run elsewhere prints others.
var buildKey = regexp.MustCompile(`key [0-9a-f]{12} `)

// TestDemoAsDocumented builds the demo's command and runs it as
// docs/usage.md prints it (from the repository root, its -dir moved into
// the test's directory) while every CPU of the machine is kept busy, and
// holds its whole output to the one docs/usage.md shows, figure for
// figure (the build keys aside, which hash -dir; the "..." line stands
// for nights 2 to 5, each an ordinary night): the demo runs on a fake
// clock, so load must not move a single digit. It checks exit code 1 and
// every report file; and that the package's RunVirtual, the command's
// body, prints the same in this process.
func TestDemoAsDocumented(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the demo (about 15 s)")
	}
	usage, err := os.ReadFile("../docs/usage.md")
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
	docDir := string(demoLine.FindSubmatch(usage)[1])
	want := documentedOutput(t, string(usage))

	t.Chdir("..") // "Run it from the repository root"
	bin := filepath.Join(t.TempDir(), "demo")
	if b, err := exec.Command("go", "build", "-o", bin, "./nightly/demo").CombinedOutput(); err != nil {
		t.Fatalf("go build ./nightly/demo: %v\n%s", err, b)
	}
	dir := filepath.Join(t.TempDir(), "nightly-demo")
	stop := burnCPUs()
	var out, errb bytes.Buffer
	cmd := exec.Command(bin, "-dir", dir)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	stop()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || errb.Len() != 0 {
		t.Fatalf("go run ./nightly/demo under load: %v, want exit 1 (the planted regression); stderr:\n%s\nstdout:\n%s", err, errb.String(), out.String())
	}
	got := normalize(out.String(), dir, docDir)
	if got != want {
		t.Errorf("go run ./nightly/demo under load printed\n%s\nwant, as docs/usage.md shows it:\n%s", got, want)
	}
	for _, f := range []string{"nightly.json", "summary.md", "github-benchmark-bigger.json", "github-benchmark-smaller.json", "bencher.json", "junit.xml", "tok_s.svg", "tok_s.png"} {
		if st, err := os.Stat(filepath.Join(dir, "out", f)); err != nil || st.Size() == 0 {
			t.Errorf("report %s: %v", f, err)
		}
	}

	dir2 := filepath.Join(t.TempDir(), "nightly-demo")
	out.Reset()
	if code := demo.RunVirtual(t, []string{"-dir", dir2}, &out, &errb); code != 1 || errb.Len() != 0 {
		t.Fatalf("RunVirtual: exit %d, stderr %s", code, errb.String())
	}
	if in := normalize(out.String(), dir2, docDir); in != got {
		t.Errorf("RunVirtual in the test printed\n%s\nthe command:\n%s", in, got)
	}
}

// documentedOutput is the demo's output as docs/usage.md shows it, in the
// fenced block after the command, its "..." line expanded to nights 2 to
// 5 and each line's trailing blanks trimmed.
func documentedOutput(t *testing.T, doc string) string {
	t.Helper()
	_, after, ok := strings.Cut(doc, "go run ./nightly/demo -dir ")
	if !ok {
		t.Fatal("docs/usage.md lacks the demo's command")
	}
	_, after, _ = strings.Cut(after, "```\n\n```\n")
	block, _, ok := strings.Cut(after, "```\n")
	if !ok || !strings.HasPrefix(block, "night 1 ") {
		t.Fatalf("docs/usage.md: no output block after the demo's command, starting at night 1: %q", block[:min(80, len(block))])
	}
	var ordinary []string
	for i, day := range []string{"24", "25", "26", "27"} {
		ordinary = append(ordinary, "night "+string(rune('2'+i))+" (2026-11-"+day+"): exit 0, no regression")
	}
	block = strings.Replace(block, "\n...\n", "\n"+strings.Join(ordinary, "\n")+"\n", 1)
	return normalize(block, "", "")
}

// normalize trims each line's trailing blanks, writes docDir for dir and
// masks the build keys (buildKey).
func normalize(s, dir, docDir string) string {
	if dir != "" {
		s = strings.ReplaceAll(s, dir, docDir)
	}
	s = buildKey.ReplaceAllString(s, "key KEY ")
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

// burnCPUs keeps every CPU busy (a spinning goroutine per CPU) until
// the function it returns is called.
func burnCPUs() (stop func()) {
	var quit atomic.Bool
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := 0; !quit.Load(); x++ {
			}
		}()
	}
	return func() { quit.Store(true); wg.Wait() }
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
