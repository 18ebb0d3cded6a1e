package kernels

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestRunLoggedFailsOnAnUnwritableLog: the build log is kept with the
// build, so one that cannot be written fails the run, naming it, before
// anything runs. /dev/full refuses every write (ENOSPC).
func TestRunLoggedFailsOnAnUnwritableLog(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full on this system")
	}
	marker := t.TempDir() + "/ran"
	err := runLogged(context.Background(), t.TempDir(), []string{"touch", marker}, nil, "/dev/full", nil)
	if err == nil || !strings.Contains(err.Error(), "build log /dev/full") {
		t.Errorf("runLogged with an unwritable log: %v, want an error naming it", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran although its log could not be written")
	}
}
