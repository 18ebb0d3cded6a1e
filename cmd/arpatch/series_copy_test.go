package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/internal/testrepo"
)

// An edited copy of a built-in series (the README's `arpatch patches seal
// patches/sglang/<name>` in a checkout of arpatch) is not what apply
// runs: seal says so, naming the --patches-dir that runs the copy and
// the build that builds it in; an unedited copy draws no note, and an
// edit that is not sealed yet is found too (apply's note, from the same
// function).
func TestEditedBuiltInSeriesIsNamed(t *testing.T) {
	src, err := filepath.Abs(filepath.Join("..", "..", "patches", "sglang", "pcie-2026-04"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Chdir(dir)
	copyDir(t, src, filepath.Join(dir, shippedDir, "pcie-2026-04"))
	if n := builtInCopyNote(shippedDir, "pcie-2026-04"); n != "" {
		t.Errorf("an unedited copy: %s", n)
	}
	p := filepath.Join(shippedDir, "pcie-2026-04", "0002-pcie-gate-bypass.patch")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, bytes.Replace(b, []byte("Description: python:"), []byte("Description: python (edited):"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	want := "note: patches/sglang/pcie-2026-04 differs from the series pcie-2026-04 built into this arpatch, which is the one apply, patches check and nightly use: pass `--patches-dir patches/sglang` to use the copy on disk, or rebuild arpatch (`go build -o bin/arpatch ./cmd/arpatch`) to build it in"
	if n := builtInCopyNote(shippedDir, "pcie-2026-04"); n != want {
		t.Errorf("an edit not sealed yet:\n%s\nwant\n%s", n, want)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"arpatch", "patches", "seal", "patches/sglang/pcie-2026-04"}, &out, &errb); code != 0 {
		t.Fatalf("seal: exit %d: %s", code, &errb)
	}
	if !strings.Contains(out.String(), "sealed 0002-pcie-gate-bypass.patch") || strings.TrimSpace(errb.String()) != want {
		t.Errorf("seal said\n%s%s", &out, &errb)
	}
	// patches check runs the built-in copy too, and says so.
	repo := filepath.Join(dir, "up")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "README.md"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := testrepo.Init(repo); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--series", "pcie-2026-04"}, nil} {
		out.Reset()
		errb.Reset()
		run(context.Background(), append([]string{"arpatch", "patches", "check", "--repo", "up", "--commit", "HEAD"}, args...), &out, &errb)
		if got := strings.Count(errb.String(), want+"\n"); got != 1 {
			t.Errorf("patches check %v: the note %d times in stderr:\n%s", args, got, &errb)
		}
		if !strings.Contains(out.String(), "pcie-2026-04 ") {
			t.Errorf("patches check %v: no row for pcie-2026-04:\n%s", args, &out)
		}
	}
	if n := builtInCopyNote(shippedDir, "no-such-series"); n != "" {
		t.Errorf("a series not built in: %s", n)
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
}
