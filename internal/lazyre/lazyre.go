// Package lazyre compiles a package-level regular expression on its first
// use instead of at program start.
//
// A `var re = regexp.MustCompile(...)` is compiled by the package's
// initialiser in every run of the binary, whether or not the run uses
// it: arpatch's kernels, doctor, allreduce and bench expressions cost
// about 0.3 ms of each `arpatch status` or `apply` that never reads a
// build log, an nvidia-smi table or an NCCL trace. It is not for an
// expression every run uses (a patch's hunk header): that one stays a
// plain regexp.MustCompile.
package lazyre

import (
	"regexp"
	"sync"
)

// New returns a function that compiles expr on its first call and
// returns that *regexp.Regexp on every call; it is safe for concurrent
// use. Like regexp.MustCompile it panics when expr does not compile, on
// that first call.
func New(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
