package history

import (
	"os"
	"testing"
)

// scratch holds what outlives one test or benchmark in this binary (the
// benchmarks' history), removed when the binary ends.
var scratch string

func TestMain(m *testing.M) {
	code := m.Run()
	if scratch != "" {
		_ = os.RemoveAll(scratch) // scratch space only
	}
	os.Exit(code)
}

// tempDirFor makes a directory under the binary's scratch directory.
func tempDirFor(name string) (string, error) {
	if scratch == "" {
		d, err := os.MkdirTemp("", "arpatch-history-test-")
		if err != nil {
			return "", err
		}
		scratch = d
	}
	return os.MkdirTemp(scratch, name)
}
