package gaterule

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// An executable rewritten at the same path (same size, its mtime put
// back) gets a new stamp, and its kept answer is not reused; a script's
// answer is never kept (a version manager's shim answers by its
// environment, not its bytes).
func TestChangedExecutableGetsANewIdentity(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("LD_LIBRARY_PATH", "")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(t.TempDir(), "clang++")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(exe, old, old); err != nil {
		t.Fatal(err)
	}
	asked := 0
	ask := func(v string) func() (string, error) {
		return func() (string, error) { asked++; return v, nil }
	}
	if s := exeStamp(exe); s != "" {
		t.Fatalf("a file changed just now has a stamp %q; want none (its times cannot tell a change within the tick)", s)
	}
	time.Sleep(2100 * time.Millisecond)
	s1 := exeStamp(exe)
	if s1 == "" {
		t.Fatal("no stamp for an ELF executable")
	}
	for i, want := range []int{1, 1} {
		if got, err := exeAnswer(exe, "cc", ask("v1")); got != "v1" || err != nil || asked != want {
			t.Fatalf("answer %d: %q, %v, asked %d times; want v1, asked %d", i, got, err, asked, want)
		}
	}
	b[len(b)/3] ^= 0xff // same size, new content (in the code, not the headers)
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(exe, old, old); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond)
	s2 := exeStamp(exe)
	if s2 == "" || s2 == s1 {
		t.Fatalf("rewritten at the same path: stamp %q, was %q; want a new one", s2, s1)
	}
	if got, err := exeAnswer(exe, "cc", ask("v2")); got != "v2" || err != nil || asked != 2 {
		t.Errorf("after the rewrite: %q, %v, asked %d times; want v2 asked again", got, err, asked)
	}
	script := filepath.Join(t.TempDir(), "python3")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec python3 \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(script, old, old); err != nil {
		t.Fatal(err)
	}
	if s := exeStamp(script); s != "" {
		t.Errorf("a script has a stamp %q; want none", s)
	}
}
