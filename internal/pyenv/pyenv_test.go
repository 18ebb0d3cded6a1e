package pyenv

import (
	"path/filepath"
	"testing"

	"github.com/arpatch/arpatch/internal/testbin"
)

func TestOr(t *testing.T) {
	for in, want := range map[string]string{"": "python3", "/venv/bin/python": "/venv/bin/python"} {
		if got := Or(in); got != want {
			t.Errorf("Or(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestExecutable: a python3 on PATH that fails, or names no interpreter,
// is run itself, not skipped; none on PATH is LookPath's error.
func TestExecutable(t *testing.T) {
	dir := t.TempDir()
	py := filepath.Join(dir, "python3")
	t.Setenv("PATH", dir)
	for _, script := range []string{
		"#!/bin/sh\necho 'pyenv: python3: command not found' >&2\nexit 127\n",
		"#!/bin/sh\nexit 0\n", // prints no sys.executable
	} {
		if err := testbin.Write(py, []byte(script)); err != nil {
			t.Fatal(err)
		}
		if got, version, err := Executable("python3"); got != py || version != "" || err != nil {
			t.Errorf("python3 on PATH is %q: Executable() = %q, %q, %v; want %q, \"\", nil", script, got, version, err, py)
		}
	}
	if err := testbin.Write(py, []byte("#!/bin/sh\necho /opt/py/bin/python3.11; echo '3.11.7 (main)'\n")); err != nil {
		t.Fatal(err)
	}
	if got, version, err := Executable("python3"); got != "/opt/py/bin/python3.11" || version != "3.11.7 (main)" || err != nil {
		t.Errorf("a shim naming its interpreter: Executable() = %q, %q, %v", got, version, err)
	}
	t.Setenv("PATH", t.TempDir())
	if got, _, err := Executable("python3"); got != "" || err == nil {
		t.Errorf("no python3 on PATH: Executable() = %q, %v; want LookPath's error", got, err)
	}
}
