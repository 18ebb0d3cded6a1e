package kernels

import (
	"fmt"
	"os"
	"testing"
)

// testLauncherEnv, set to 1 in a build's environment, makes this test
// binary act as `arpatch gencode-filter` (Launch), so the tests' fake
// builds run their compilers through the real launcher.
const testLauncherEnv = "ARPATCH_TEST_LAUNCHER"

func TestMain(m *testing.M) {
	if os.Getenv(testLauncherEnv) == "1" {
		err := Launch(os.Args[1:])
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(upstreams.Run(m))
}

// withLauncher returns build options whose compilers run through the
// real launcher (this test binary).
func (e *env) withLauncher(o BuildOptions) BuildOptions {
	o.Launcher = []string{os.Args[0]}
	o.Env = append(append([]string(nil), o.Env...), testLauncherEnv+"=1")
	return o
}
