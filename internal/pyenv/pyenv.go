// Package pyenv names the Python interpreter of the serving environment
// (the one with torch, SGLang and sgl_kernel) when the user names none:
// the one place that default lives, for the wheel build, doctor, the
// allreduce micro-benchmark, bench's arms, nightly's build.python and the
// --python flags' --help defaults.
package pyenv

import (
	"os/exec"
	"strings"
)

// Default is the interpreter run when none is named, looked up in PATH.
const Default = "python3"

// Or returns python, or Default when it is empty.
func Or(python string) string {
	if python == "" {
		return Default
	}
	return python
}

// Executable looks python up in PATH and returns the interpreter it runs
// (sys.executable) and its sys.version: where python is a version
// manager's shim (pyenv's starts about 15 shell scripts before the
// interpreter), a caller that starts it often then starts the interpreter
// alone. It returns exec.LookPath's error when python is not on PATH, and
// the looked-up path itself, with no version, when asking fails or names
// nothing (a shim with no version set): the caller then runs that path
// and meets its error, rather than skip or exec "".
func Executable(python string) (exe, version string, err error) {
	py, err := exec.LookPath(python)
	if err != nil {
		return "", "", err
	}
	out, err := exec.Command(py, "-c", "import sys; print(sys.executable); print(sys.version)").Output()
	exe, version, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	if err != nil || exe == "" {
		return py, "", nil
	}
	return exe, version, nil
}
