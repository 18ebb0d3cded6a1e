package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// CI (.ci/run) runs the README's test command, which includes the static
// checks of .ci/lint: errcheck and staticcheck at the versions go.mod's
// tool directive pins.

// TestREADMETestCommandIsWhatCIRuns: the README's "Run the tests" block
// and the last command of .ci/run are the same line, so that what a reader
// runs is what CI checks.
func TestREADMETestCommandIsWhatCIRuns(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)Run the tests[^\n]*\n+```sh\n([^\n]+)\n```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no \"Run the tests\" block with one sh line")
	}
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(ci)), "\n")
	last := lines[len(lines)-1]
	if string(m[1]) != last {
		t.Errorf("README.md's test command is\n\t%s\nbut .ci/run runs\n\t%s", m[1], last)
	}
	if !strings.Contains(last, ".ci/lint") {
		t.Errorf(".ci/run's test command %q runs no static checks (.ci/lint)", last)
	}
}

// TestLintFailsOnDroppedError plants a dropped error (os.Remove's, as the
// cleanups here would drop it) in a one-file module that has this
// repository's go.mod and go.sum, so the same pinned tools, and runs
// .ci/lint on it: it must fail and name the call. The same module with the
// error checked passes, so the failure is the planted error's.
func TestLintFailsOnDroppedError(t *testing.T) {
	t.Parallel() // two runs of the checkers: seconds, spent beside the scripts
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash to run .ci/lint")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	gomod = regexp.MustCompile(`(?m)^module .*$`).ReplaceAll(gomod, []byte("module example.com/planted"))
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"go.mod": gomod, "go.sum": gosum} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lint := func(body string) (string, error) {
		src := "package main\n\nimport \"os\"\n\nfunc main() {\n\t" + body + "\n}\n"
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(filepath.Join(root, ".ci", "lint"), dir)
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := lint(`os.Remove("x")`)
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf(".ci/lint on a dropped error: %v, want a failed check; output:\n%s", err, out)
	}
	if !regexp.MustCompile(`main\.go:6:\d+:\s+os\.Remove\("x"\)`).MatchString(out) {
		t.Errorf(".ci/lint failed without naming the dropped error (main.go:6, os.Remove):\n%s", out)
	}

	if out, err := lint(`if err := os.Remove("x"); err != nil {
		panic(err)
	}`); err != nil {
		t.Fatalf(".ci/lint on the checked error: %v\n%s", err, out)
	}
}
