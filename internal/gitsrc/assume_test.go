package gitsrc

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestAssumeUnchanged reads the assume-unchanged bit from indexes git
// itself wrote, in versions 2, 3 (an intent-to-add entry makes git write
// extended flags) and 4 (prefix-compressed names; with and without the
// extended flags), beside skip-worktree entries and long names. It needs
// git (not CI's requirement: skipped without it).
func TestAssumeUnchanged(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	// 88 bytes in two levels: a long name needs no deep tree.
	long := strings.Repeat("d", 79) + "/long.txt"
	// One repository, its index rewritten by git in each version in turn:
	// 2, 4, then with an intent-to-add entry 3 and 4 again.
	dir := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q", "--template=")
	for _, f := range []string{"a.txt", "b/c.txt", "b/d.txt", "e.txt", long} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("add", "a.txt", "b", "e.txt", long)
	git("commit", "-q", "-m", "x")
	git("update-index", "--assume-unchanged", "b/c.txt", long)
	git("update-index", "--skip-worktree", "b/d.txt")
	ita := false
	for _, version := range []string{"2", "4", "3", "4"} {
		if version == "3" {
			if err := os.WriteFile(filepath.Join(dir, "new.txt"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			git("add", "-N", "new.txt")
			ita = true
		}
		git("update-index", "--index-version", version)
		r, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.AssumeUnchanged()
		if want := []string{"b/c.txt", long}; err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("index v%s (intent-to-add entry: %v): %q, %v; want %q", version, ita, got, err, want)
		}
	}
	if _, err := assumeValid([]byte("DIRC\x00\x00\x00\x02\x00\x00\x00\x01")); err == nil {
		t.Error("a truncated index read without error")
	}
}
