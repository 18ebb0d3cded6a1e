package bench

import (
	"bytes"
	"strings"
	"testing"
)

// TestShowProgress: away from a terminal, a level's requests show as a
// line when it starts and one when it is done, named by trial, arm and
// concurrency.
func TestShowProgress(t *testing.T) {
	var b bytes.Buffer
	show := ShowProgress(&b)
	for done := 1; done <= 3; done++ {
		show(Progress{Trial: 2, Trials: 5, Arm: "pcie", Concurrency: 4, Done: done, Total: 3})
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || lines[0] != "trial 2/5 pcie concurrency 4 [1/3] requests  33%" || !strings.HasPrefix(lines[1], "trial 2/5 pcie concurrency 4 [3/3] requests 100% eta 0s") {
		t.Errorf("lines = %q", lines)
	}
}
