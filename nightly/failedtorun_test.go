package nightly

import (
	"errors"
	"strings"
	"testing"
)

// Issue 14 tester, I: a nightly that could not start has no run number and
// names the config's hardware_key; it said "Run 0 on" and an empty key.
func TestFailedToRunSummary(t *testing.T) {
	cfg := &Config{History: History{HardwareKey: "rtx5090x4"}}
	rep := FailedToRun(cfg, errors.New("the history's lock is held"))
	var b strings.Builder
	if err := Summary(&b, rep); err != nil {
		t.Fatal(err)
	}
	head := strings.SplitN(b.String(), "\n", 4)[2]
	if !strings.HasPrefix(head, "Not recorded on `rtx5090x4`, ") || !strings.HasSuffix(head, "exit code 4: infrastructure failure: the history's lock is held.") {
		t.Errorf("summary line: %q", head)
	}
	if rep := FailedToRun(nil, errors.New("x")); rep.HardwareKey != "" {
		t.Errorf("no config: hardware key %q", rep.HardwareKey)
	}
}
