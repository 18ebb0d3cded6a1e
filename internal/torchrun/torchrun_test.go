package torchrun

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arpatch/arpatch/internal/testbin"
)

// A fake interpreter stands in for torchrun: it prints its environment's
// two additions and the script it was given, and writes a record to --out.
func TestRun(t *testing.T) {
	py := filepath.Join(t.TempDir(), "python3")
	fake := "#!/bin/sh\nprev=\nfor a in \"$@\"; do [ \"$prev\" = --out ] && echo '{\"event\": \"done\"}' > \"$a\"; case $a in *.py) cat \"$a\";; esac; prev=$a; done\n" +
		"echo \"unbuffered=$PYTHONUNBUFFERED omp=$OMP_NUM_THREADS mine=$MINE\"\nexit $EXIT\n"
	if err := testbin.Write(py, []byte(fake)); err != nil {
		t.Fatal(err)
	}
	spec := Spec{Script: []byte("print('the script')\n"), Name: "s.py", Env: []string{"MINE=1", "EXIT=0"}, Timeout: time.Minute,
		Argv: func(script, out string) []string {
			return []string{py, "-m", "torch.distributed.run", "--nproc-per-node", "2", script, "--out", out}
		}}
	res, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Exit != ExitOK || string(res.Records) != "{\"event\": \"done\"}\n" ||
		!slices.Contains(res.Output, "print('the script')") || !slices.Contains(res.Output, "unbuffered=1 omp=1 mine=1") {
		t.Errorf("run: exit %q, records %q, output %q", res.Exit, res.Records, res.Output)
	}
	spec.Env = []string{"EXIT=3"}
	if res, err := Run(context.Background(), spec); err != nil || res.Exit != "exit status 3" {
		t.Errorf("a failed rank: %+v, %v", res, err)
	}
	spec.Argv = func(script, out string) []string { return []string{filepath.Join(t.TempDir(), "no-python")} }
	if _, err := Run(context.Background(), spec); err == nil || !strings.Contains(err.Error(), "is torch installed for --python") {
		t.Errorf("a missing interpreter: %v", err)
	}
}

// Watch sees the --out file grow while the ranks run, each time it grew,
// and is not called after Run returns.
func TestWatch(t *testing.T) {
	py := filepath.Join(t.TempDir(), "python3")
	fake := "#!/bin/sh\nprev=\nfor a in \"$@\"; do [ \"$prev\" = --out ] && out=$a; prev=$a; done\n" +
		"echo one >> \"$out\"; sleep 1; echo two >> \"$out\"; sleep 1\n"
	if err := testbin.Write(py, []byte(fake)); err != nil {
		t.Fatal(err)
	}
	var seen []string
	returned := false
	spec := Spec{Script: []byte(""), Name: "s.py", Timeout: time.Minute,
		Argv: func(script, out string) []string { return []string{py, script, "--out", out} },
		Watch: func(b []byte) {
			if returned {
				t.Error("Watch called after Run returned")
			}
			seen = append(seen, string(b))
		}}
	res, err := Run(context.Background(), spec)
	returned = true
	if err != nil || string(res.Records) != "one\ntwo\n" {
		t.Fatalf("run: %v, records %q", err, res.Records)
	}
	if !slices.Equal(seen, []string{"one\n", "one\ntwo\n"}) {
		t.Errorf("Watch saw %q, want the file after each write", seen)
	}
}
