package nightly

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/checkout"
)

// With arms.commit = "head", a night after upstream moved builds the new
// head: the A/B checkouts of the last night are cloned afresh.
func TestHeadModeFollowsUpstream(t *testing.T) {
	w := newWorldOwn(t) // commits to its upstream
	w.cfg.Arms.Commit = "head"
	rep := w.runSkipBench(false)
	if rep.ExitCode != ExitOK || rep.BuildCommit != w.commit {
		t.Fatalf("first night: exit %d build commit %s %v", rep.ExitCode, rep.BuildCommit, rep.Errors)
	}
	moved := w.commitUpstream("upstream moves", map[string]string{"README.md": "moved on\n"})
	// A file of the user's in the old checkout: kept, and the night fails
	// naming it; moved away, the checkout is cloned afresh.
	mine := filepath.Join(w.cfg.Build.WorkDir, "b", "NOTES.txt")
	must(t, os.WriteFile(mine, []byte("mine\n"), 0o644))
	rep = w.runSkipBench(false)
	if _, err := os.Stat(mine); rep.ExitCode != ExitInfra || err != nil || !strings.Contains(strings.Join(rep.Errors, " "), "files arpatch did not make") {
		t.Fatalf("untracked file in an arm: exit %d, kept %v, errors %v", rep.ExitCode, err == nil, rep.Errors)
	}
	must(t, os.Remove(mine))
	rep = w.runSkipBench(false)
	if rep.ExitCode != ExitOK || rep.BuildCommit != moved || len(rep.Builds) != 2 {
		t.Fatalf("after upstream moved: exit %d build commit %s builds %+v errors %v", rep.ExitCode, rep.BuildCommit, rep.Builds, rep.Errors)
	}
	st, err := checkout.Status(filepath.Join(w.cfg.Build.WorkDir, "b"), nil)
	if err != nil || st.State.Commit != moved {
		t.Errorf("arm b checkout: %+v %v", st, err)
	}
}
