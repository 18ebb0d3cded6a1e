// Command demo runs arpatch's nightly end to end on this machine, with no
// GPU and no network (package nightly/internal/demo): six nights on
// fixtures, the last with a planted 10% regression; it exits with the
// nightly's exit code (1).
//
// Run it from the repository root:
//
//	go run ./nightly/demo [-dir nightly-demo]
//
// Its servers and bench run on an in-memory network on a fake clock
// (demo.RunVirtual, a testing/synctest bubble), so it prints the same
// figures on every run, however loaded the machine. A bubble needs a
// *testing.T: main gets one from testing.Main, running the demo as the
// one test of a test binary, and exits with the demo's code (2 when the
// bubble itself failed, a deadlock say, which testing reports).
package main

import (
	"os"
	"testing"

	"github.com/arpatch/arpatch/nightly/internal/demo"
)

func main() {
	args := os.Args[1:]
	os.Args = os.Args[:1] // testing.Main parses os.Args as its own -test.* flags
	all := func(pat, str string) (bool, error) { return true, nil }
	testing.Main(all, []testing.InternalTest{{Name: "demo", F: func(t *testing.T) {
		code := 2
		if !t.Run("virtual", func(t *testing.T) { code = demo.RunVirtual(t, args, os.Stdout, os.Stderr) }) {
			code = 2
		}
		os.Exit(code)
	}}}, nil, nil)
}
