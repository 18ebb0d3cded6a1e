package main

import (
	"bytes"
	"context"
	"github.com/arpatch/arpatch/internal/testrepo"
	"testing"
)

// TestExitCodes checks the documented exit codes: 0 ok, 1 failure, 2 usage.
func TestExitCodes(t *testing.T) {
	repo := t.TempDir()
	testrepo.WriteFiles(repo, map[string]string{"README": "x\n"})
	if _, err := testrepo.Init(repo); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"arpatch", "--help"}, exitOK},
		{[]string{"arpatch", "help"}, exitOK},
		{[]string{"arpatch", "help", "apply"}, exitOK},
		{[]string{"arpatch", "help", "nosuch"}, exitUsage},
		{[]string{"arpatch", "history", "show", "1", "--bogus"}, exitUsage},
		{[]string{"arpatch", "patches", "check", "--repo", repo, "--commit", "84118acf"}, exitUsage}, // abbreviated hash
		{[]string{"arpatch", "bench", "--arm", "x:launch-cmd="}, exitUsage},
		{[]string{"arpatch", "recipes"}, exitOK},
		{[]string{"arpatch", "apply", "--no-such-flag"}, exitUsage},
		{[]string{"arpatch", "apply", "positional"}, exitUsage},
		{[]string{"arpatch", "patches", "check", "--commit", "abc"}, exitUsage}, // --repo is required
		{[]string{"arpatch", "recipes", "show"}, exitUsage},
		{[]string{"arpatch", "apply", "--recipe", "pcie", "--recipe-file", "x.toml"}, exitUsage},
		{[]string{"arpatch", "apply", "--recipe", "nosuch"}, exitUsage},
		{[]string{"arpatch", "patches", "check", "--repo", ".", "--commit", "main", "--series", "nosuch"}, exitUsage},
		{[]string{"arpatch", "bogus"}, exitUsage},
		{[]string{"arpatch", "patches", "bogus"}, exitUsage},
		{[]string{"arpatch", "apply", "--dry-run=maybe"}, exitUsage},
		{[]string{"arpatch", "apply", "--series", ""}, exitUsage},
		{[]string{"arpatch", "apply", "--commit", " "}, exitUsage},
		{[]string{"arpatch", "patches", "seal", "dir", "--dry-run"}, exitUsage},
		{[]string{"arpatch", "status", "--src", t.TempDir()}, exitFailure}, // not a git checkout
	} {
		var out, errb bytes.Buffer
		if got := run(context.Background(), tc.args, &out, &errb); got != tc.want {
			t.Errorf("%v: exit %d, want %d (stderr: %s)", tc.args, got, tc.want, errb.String())
		}
	}
}
