// Package pyenv names the Python interpreter of the serving environment
// (the one with torch, SGLang and sgl_kernel) when the user names none:
// the one place that default lives, for the wheel build, doctor, the
// allreduce micro-benchmark, bench's arms, nightly's build.python and the
// --python flags' --help defaults.
package pyenv

// Default is the interpreter run when none is named, looked up in PATH.
const Default = "python3"

// Or returns python, or Default when it is empty.
func Or(python string) string {
	if python == "" {
		return Default
	}
	return python
}
