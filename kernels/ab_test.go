package kernels

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/testbin"
	"github.com/arpatch/arpatch/internal/testrepo"
	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/recipes"
)

// abFixture adds a one-patch series to the build fixture (one line added
// to the allreduce translation unit) and returns a catalog with it plus
// recipes A (no patches) and B (the series), and the directory the A/B
// runs use (ABOptions.Dir): one per test binary and fixture commit
// (upstreams.Scratch), so that the first A/B run clones and applies the two
// arms there and the others find them applied, as a second run in one
// directory does (TestABBuild checks that run). Each test builds into its
// own cache; ABBuild's manifest there is the last run's.
func abFixture(t *testing.T, e *env) (*patches.Catalog, *recipes.Recipe, *recipes.Recipe, string) {
	t.Helper()
	patch := "Description: d\nAuthor: t\nUpstream-Status: Pending\nApplies-To: fixture\n\n" +
		"--- a/sgl-kernel/csrc/allreduce/custom_all_reduce.cu\n+++ b/sgl-kernel/csrc/allreduce/custom_all_reduce.cu\n@@ -1 +1,2 @@\n // fixture translation unit\n+// patched\n"
	toml := "name = \"fx\"\nfamily = \"fx\"\ntested_on = [\"" + e.commit + "\"]\n\n[[patch]]\nfile = \"0001-x.patch\"\nsha256 = \"" + digest.SHA256Hex([]byte(patch)) + "\"\n"
	// Written once per test binary and commit, read only (LoadDir).
	dir, err := upstreams.Dir("ab series "+e.commit, func(dir string) error {
		return testrepo.WriteFiles(filepath.Join(dir, "fx"), map[string]string{"series.toml": toml, "0001-x.patch": patch})
	})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := patches.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	pin := "[upstream]\ncommit = \"" + e.commit + "\"\n"
	a, _ := recipes.Parse("a.toml", []byte("name = \"base\"\n"+pin))
	b, _ := recipes.Parse("b.toml", []byte("name = \"pcie\"\nseries = \"fx\"\n"+pin))
	arms, err := upstreams.Scratch("ab arms "+e.up+" "+e.commit, func(dir string) error { return os.Mkdir(dir, 0o755) })
	if err != nil {
		t.Fatal(err)
	}
	return cat, a, b, arms
}

func TestABBuild(t *testing.T) {
	e := newEnv(t)
	cat, a, b, dir := abFixture(t, e)
	o := e.opts()
	ab, results, err := ABBuild(context.Background(), ABOptions{A: a, B: b, Catalog: cat, Dir: dir, Repo: e.up, Build: o}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 || results[0].Hit || results[1].Hit || ab.A.Key == ab.B.Key {
		t.Fatalf("results %+v", results)
	}
	var m ABManifest
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, "ab-manifest.json"))), &m); err != nil {
		t.Fatal(err)
	}
	if m.Commit != e.commit || m.A.Series != "" || m.B.Series != "fx" || len(m.B.Patches) != 1 || len(m.A.Patches) != 0 ||
		strings.Join(m.DifferOnlyIn, ",") != "series,patches" || m.Common.Toolchain.Torch != "2.11.0+cu130" || m.A.Output.SHA256 == "" {
		t.Errorf("manifest = %+v", m)
	}
	// Again: both are cache hits, and the checkouts are reused as applied.
	_, results, err = ABBuild(context.Background(), ABOptions{A: a, B: b, Catalog: cat, Dir: dir, Repo: e.up, Build: o}, nil)
	if err != nil || !results[0].Hit || !results[1].Hit {
		t.Fatalf("second A/B: %v %+v", err, results)
	}
}

func TestABRefusesToolchainMismatch(t *testing.T) {
	e := newEnv(t)
	cat, a, b, dir := abFixture(t, e)
	// Arm B's interpreter reports another torch.
	old := filepath.Join(t.TempDir(), "python3-old")
	if err := testbin.Write(old, []byte("#!/bin/sh\nFAKE_TORCH_VERSION=2.10.0+cu130 exec "+filepath.Join(e.fake, "python3")+" \"$@\"\n")); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, "ab-manifest.json")
	before := fileState(manifest) // an earlier test's A/B may have left one
	_, _, err := ABBuild(context.Background(), ABOptions{A: a, B: b, Catalog: cat, Dir: dir, Repo: e.up, PythonB: old, Build: e.opts()}, nil)
	var me *ABMismatchError
	if !errors.As(err, &me) {
		t.Fatalf("err = %v, want ABMismatchError", err)
	}
	if len(me.Fields) != 1 || me.Fields[0] != `toolchain.torch: "2.11.0+cu130" vs "2.10.0+cu130"` {
		t.Errorf("fields = %q", me.Fields)
	}
	if after := fileState(manifest); after != before {
		t.Errorf("a refused A/B wrote its manifest: %s, was %s", after, before)
	}
	if ents, _ := e.cache.List(); len(ents) != 0 {
		t.Error("a refused A/B built something")
	}
	// Different pins without --commit are refused too.
	b2 := *b
	b2.Upstream.Commit = strings.Repeat("0", 40)
	if _, _, err := ABBuild(context.Background(), ABOptions{A: a, B: &b2, Catalog: cat, Dir: dir, Repo: e.up, Build: e.opts()}, nil); err == nil || !strings.Contains(err.Error(), "needs one commit: pass --commit") {
		t.Errorf("different pins: %v", err)
	}
}

// TestABBuildListsDifferingFiles: a patch of one translation unit makes
// its object, the shared object linking it, RECORD and the wheel differ,
// all explained; a nondeterminism planted in another unit is reported
// as unexplained.
func TestABBuildListsDifferingFiles(t *testing.T) {
	e := newEnv(t)
	cat, a, b, dir := abFixture(t, e)
	whl := "sglang_kernel-0.4.1-cp310-abi3-linux_x86_64.whl"
	run := func(e *env) *ABManifest {
		t.Helper()
		ab, _, err := ABBuild(context.Background(), ABOptions{A: a, B: b, Catalog: cat, Dir: dir, Repo: e.up, Build: e.withLauncher(e.opts())}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ab.Manifest
	}
	m := run(e)
	var got []string
	for _, f := range m.DifferingFiles {
		got = append(got, fmt.Sprintf("%s: %v, %s", f.File, f.Explained, f.Why))
	}
	want := []string{
		"object CMakeFiles/common_ops.dir/csrc/allreduce/custom_all_reduce.cu.o: true, built from sgl-kernel/csrc/allreduce/custom_all_reduce.cu",
		whl + "!sgl_kernel/common_ops.abi3.so: true, a shared object, and 1 object built from patched files differs (above)",
		whl + "!sglang_kernel-0.4.1.dist-info/RECORD: true, holds the sha256 of the other files that differ",
		whl + ": true, holds the files above",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || m.Unexplained != 0 {
		t.Errorf("differing files (%d unexplained):\n%s\nwant\n%s", m.Unexplained, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	m = run(e.with("FAKE_NONDET_TU=common_extension.cc"))
	var unexplained []string
	for _, f := range m.DifferingFiles {
		if !f.Explained {
			unexplained = append(unexplained, f.File+": "+f.Why)
		}
	}
	if m.Unexplained != 1 || len(unexplained) != 1 || unexplained[0] != "object CMakeFiles/common_ops.dir/csrc/common_extension.cc.o: built from sgl-kernel/csrc/common_extension.cc, which no patch changes and which includes no patched file" {
		t.Errorf("planted nondeterminism: %d unexplained: %q", m.Unexplained, unexplained)
	}
}

func TestExplainingSourceFollowsIncludes(t *testing.T) {
	src := t.TempDir()
	if err := testrepo.WriteFiles(src, map[string]string{
		"k/csrc/allreduce/x.cu":  "#include \"allreduce/x.cuh\"\n#include <torch/all.h>\n",
		"k/csrc/allreduce/x.cuh": "  #  include \"utils.h\"\n",
		"k/include/utils.h":      "// changed\n",
		"k/csrc/other.cu":        "#include \"missing.h\"\n",
	}); err != nil {
		t.Fatal(err)
	}
	changed := map[string]bool{"k/include/utils.h": true}
	if s, ok := explainingSource(src, []string{"k"}, "csrc/allreduce/x.cu", changed); !ok || s != "k/include/utils.h" {
		t.Errorf("x.cu: %q %v", s, ok)
	}
	if s, ok := explainingSource(src, []string{"k"}, "csrc/other.cu", changed); ok {
		t.Errorf("other.cu explained by %q", s)
	}
	if objectSource("CMakeFiles/common_ops.dir/csrc/allreduce/x.cu.o") != "csrc/allreduce/x.cu" || objectSource("binding.o") != "binding" {
		t.Error("objectSource")
	}
}

// fileState is p's entry as testrepo.SnapshotEntry formats it (mode,
// size, modification time, sha256), or "none" when it does not exist:
// what a file that must not be written has to keep.
func fileState(p string) string {
	fi, err := os.Lstat(p)
	if err != nil {
		return "none (" + err.Error() + ")"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "unreadable (" + err.Error() + ")"
	}
	return testrepo.SnapshotEntry(fi.Mode(), b, fi.ModTime().UnixNano())
}
