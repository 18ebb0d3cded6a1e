package kernels

import (
	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/lockfile"
	git "github.com/go-git/go-git/v5"

	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/arpatch/arpatch/internal/testrepo"
)

type recordProgress struct {
	steps []int
	done  bool
	ok    bool
}

func (r *recordProgress) Line(l string) {
	if n, _, _, ok := ParseNinjaStep(l); ok {
		r.steps = append(r.steps, n)
	}
}
func (r *recordProgress) Done(ok bool) { r.done, r.ok = true, ok }

func TestBuildMissThenHit(t *testing.T) {
	e := newEnv(t)
	o := e.opts("120a")
	o.Out = filepath.Join(t.TempDir(), "dist")
	plan := mustPlan(t, o)
	if plan.Builder != "uv" || plan.Problems != nil {
		t.Fatalf("builder %q problems %v", plan.Builder, plan.Problems)
	}
	prog := &recordProgress{}
	res, err := Build(context.Background(), plan, o, prog)
	if err != nil {
		t.Fatal(err)
	}
	if res.Hit || len(prog.steps) != 8 || prog.steps[7] != 8 || !prog.ok {
		t.Errorf("hit %v, progress %v ok %v", res.Hit, prog.steps, prog.ok)
	}
	m := res.Manifest
	if m.Key != plan.Key || m.Inputs.Commit != e.commit || len(m.Outputs) != 1 || m.Outputs[0].File != "sglang_kernel-0.4.1-cp310-abi3-linux_x86_64.whl" {
		t.Fatalf("manifest = %+v", m)
	}
	wheel := readFile(t, res.Wheel)
	contains(t, wheel, "wheel for 120a", "-DENABLE_CCACHE=OFF", "-DCMAKE_CUDA_COMPILER_LAUNCHER=/opt/arpatch;gencode-filter")
	if readFile(t, res.Copied) != wheel {
		t.Error("--out copy differs")
	}
	contains(t, readFile(t, filepath.Join(e.cache.EntryDir(plan.Key), "build.log")), "[8/8] Building CUDA object", "# command: ")
	// Nothing but the entry, the probe cache and its lock-free state remains.
	ents, _ := os.ReadDir(e.cache.Dir)
	for _, x := range ents {
		if strings.HasPrefix(x.Name(), ".tmp-") || strings.HasSuffix(x.Name(), ".lock") {
			t.Errorf("left behind: %s", x.Name())
		}
	}

	// Second build: same key, a hit, no command run.
	plan2 := mustPlan(t, o)
	if plan2.Key != plan.Key {
		t.Fatalf("key changed between identical builds: %s vs %s", plan.Key, plan2.Key)
	}
	prog2 := &recordProgress{}
	res2, err := Build(context.Background(), plan2, o, prog2)
	if err != nil {
		t.Fatal(err)
	}
	if !res2.Hit || len(prog2.steps) != 0 || res2.Wheel != res.Wheel {
		t.Errorf("second build: hit %v steps %v", res2.Hit, prog2.steps)
	}

	// A damaged entry is refused, never used.
	if err := os.WriteFile(res.Wheel, []byte("corrupt"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(context.Background(), plan2, o, nil); err == nil || !strings.Contains(err.Error(), "no longer has sha256") {
		t.Errorf("damaged entry: %v", err)
	}
	ents2, _ := e.cache.List()
	if len(ents2) != 1 || ents2[0].Err == nil {
		t.Errorf("List should show the damaged entry: %+v", ents2)
	}
	removed, err := e.cache.GC(10)
	if err != nil || len(removed) != 1 {
		t.Errorf("GC removed %v, %v", removed, err)
	}
}

func TestBuildFailureShowsTailAndKeepsLog(t *testing.T) {
	e := newEnv(t).with("FAKE_BUILD_FAIL=1")
	o := e.opts()
	_, err := Build(context.Background(), mustPlan(t, o), o, nil)
	var be *BuildError
	if !errors.As(err, &be) {
		t.Fatalf("err = %v, want BuildError", err)
	}
	if len(be.Tail) != 40 || be.Tail[39] != `csrc/allreduce/custom_all_reduce.cuh(471): error: expected a "}"` || be.Tail[0] != "log line 22" {
		t.Errorf("tail = %q ... %q (%d lines)", be.Tail[0], be.Tail[len(be.Tail)-1], len(be.Tail))
	}
	if !strings.HasPrefix(be.Log, filepath.Join(e.cache.Dir, "logs")) {
		t.Errorf("log kept at %s", be.Log)
	}
	contains(t, readFile(t, be.Log), "log line 1\n", "[8/8]")
	if ents, _ := e.cache.List(); len(ents) != 0 {
		t.Errorf("a failed build left a cache entry: %+v", ents)
	}
}

// A tree edited while it builds: the wheel is not cached under the key
// of the tree as it was; a second arpatch cannot apply or revert
// meanwhile (the build holds the checkout's lock).
func TestTreeEditedDuringBuildIsNotCached(t *testing.T) {
	e := newEnvWritable(t, oldLayout)
	utils := filepath.Join(e.src, "sgl-kernel/include/utils.h")
	// The probe's verdict goes to a file of its own: the log holds the
	// environment (and so this command line) too.
	locked := filepath.Join(filepath.Dir(e.src), "locked")
	e = e.with("FAKE_BUILD_DURING=echo '// edited mid-build' >> " + utils + "; test -f " + filepath.Join(e.src, ".git/arpatch/lock") + " && echo LOCKED > " + locked)
	o := e.opts()
	_, err := Build(context.Background(), mustPlan(t, o), o, nil)
	var be *BuildError
	if err == nil || errors.As(err, &be) || !strings.Contains(err.Error(), "the tree changed during the build") || !strings.Contains(err.Error(), "the build finished but was not cached") {
		t.Fatalf("err = %v", err)
	}
	if ents, _ := e.cache.List(); len(ents) != 0 {
		t.Errorf("a wheel of a changed tree was cached: %+v", ents)
	}
	logs, _ := filepath.Glob(filepath.Join(e.cache.Dir, "logs", "*.log"))
	if len(logs) != 1 {
		t.Fatalf("kept logs %v", logs)
	}
	if got, err := os.ReadFile(locked); string(got) != "LOCKED\n" {
		t.Errorf("the checkout lock was not held mid-build: the probe wrote %q (%v), want LOCKED", got, err)
	}
	if _, err := os.Stat(filepath.Join(e.src, ".git/arpatch/lock")); !os.IsNotExist(err) {
		t.Errorf("the checkout lock outlived the build: %v", err)
	}
}

func TestBuildInterruptKillsProcessGroup(t *testing.T) {
	pids := filepath.Join(t.TempDir(), "pids")
	e := newEnv(t).with("FAKE_BUILD_HANG=1", "FAKE_PIDS="+pids)
	o := e.opts()
	plan := mustPlan(t, o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Build(ctx, plan, o, nil)
		done <- err
	}()
	// Wait until the build and its child are running.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, _ := os.ReadFile(pids); len(strings.Fields(string(b))) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("fake build did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, ErrInterrupted) {
			t.Fatalf("err = %v, want ErrInterrupted", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Build did not return after cancel")
	}
	for _, f := range strings.Fields(readFile(t, pids)) {
		pid, _ := strconv.Atoi(f)
		for i := 0; i < 100 && lockfile.Alive(pid); i++ { // SIGKILL lands asynchronously
			time.Sleep(20 * time.Millisecond)
		}
		if lockfile.Alive(pid) {
			t.Errorf("process %d survived the interrupt", pid)
		}
	}
	ents, _ := os.ReadDir(e.cache.Dir)
	for _, x := range ents {
		if x.Name() != probeCacheName {
			t.Errorf("interrupted build left %s", x.Name())
		}
	}
}

func TestPlanRefusals(t *testing.T) {
	e := newEnv(t)
	// sm_120a with nvcc 12.4.
	p := mustPlan(t, e.with("FAKE_NVCC_VERSION=12.4.131").opts("120a", "90a"))
	contains(t, errString(p.Problems), "sm_120a needs nvcc >= 12.8, but", "is 12.4.131")
	if strings.Contains(errString(p.Problems), "sm_90a") {
		t.Errorf("sm_90a works with 12.4 but was refused: %v", p.Problems)
	}
	if _, err := Build(context.Background(), p, e.opts("120a", "90a"), nil); err == nil {
		t.Error("Build ran despite toolchain problems")
	}
	// torch built for CUDA 12 with nvcc 13.
	p = mustPlan(t, e.with("FAKE_TORCH_VERSION=2.9.1+cu128", "FAKE_TORCH_CUDA=12.8").opts())
	contains(t, errString(p.Problems), "torch 2.9.1+cu128 is built for CUDA 12.8 but nvcc is 13.0.88")
	// no torch
	p = mustPlan(t, e.with("FAKE_NO_TORCH=1").opts())
	contains(t, errString(p.Problems), "cannot import torch (ModuleNotFoundError")
	// no apply state: the fixture's upstream itself, a work tree with the
	// same files committed, never applied (read only here)
	plain := e.up
	o := e.opts()
	o.Src = plain
	if _, err := PlanBuild(context.Background(), o); err == nil || !strings.Contains(err.Error(), "has no apply state") || !strings.Contains(err.Error(), "arpatch apply --src "+plain) {
		t.Errorf("no state: %v", err)
	}
}

// TestTreeGuards refuses, in both layouts, what would reach the build
// unrecorded: edits, edits hidden by skip-worktree, untracked files under
// the sgl-kernel project, ignored files in its wheel package.
func TestTreeGuards(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) { testTreeGuards(t, newEnvWritable(t, l)) })
	}
}

func testTreeGuards(t *testing.T, e *env) {
	kd := e.kdir + "/"
	utils := e.k("include/utils.h")
	// a tree edited since apply
	if err := os.WriteFile(utils, []byte("// edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := PlanBuild(context.Background(), e.opts()); err == nil || !strings.Contains(err.Error(), "uncommitted changes to files the series did not touch") {
		t.Errorf("edited tree: %v", err)
	}
	// The same edit hidden from git status by skip-worktree.
	r, err := git.PlainOpen(e.src)
	if err != nil {
		t.Fatal(err)
	}
	idx, _ := r.Storer.Index()
	for _, x := range idx.Entries {
		if x.Name == kd+"include/utils.h" {
			x.SkipWorktree = true
		}
	}
	if err := r.Storer.SetIndex(idx); err != nil {
		t.Fatal(err)
	}
	if _, err := PlanBuild(context.Background(), e.opts()); err == nil || !strings.Contains(err.Error(), "skip-worktree entries under "+kd+" ("+kd+"include/utils.h)") || !strings.Contains(err.Error(), "update-index --no-skip-worktree") {
		t.Errorf("skip-worktree: %v", err)
	}
	for _, x := range idx.Entries {
		x.SkipWorktree = false
	}
	if err := r.Storer.SetIndex(idx); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(utils, []byte("// fixture header\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// An untracked file under the project could go into the wheel; one
	// elsewhere cannot.
	if err := os.WriteFile(filepath.Join(e.src, "notes.txt"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustPlan(t, e.opts())
	if err := os.WriteFile(e.k("extra.py"), []byte("x = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := PlanBuild(context.Background(), e.opts()); err == nil || !strings.Contains(err.Error(), "untracked files under "+kd+" ("+kd+"extra.py)") {
		t.Errorf("untracked: %v", err)
	}
	if err := os.Remove(e.k("extra.py")); err != nil {
		t.Fatal(err)
	}
	// An ignored file in the package directory would be packaged too.
	if err := os.WriteFile(filepath.Join(e.src, ".gitignore"), []byte("*.so\n__pycache__/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(e.k("python/sgl_kernel/__pycache__"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.k("python/sgl_kernel/__pycache__/x.pyc"), []byte("pyc"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustPlan(t, e.opts())
	if err := os.WriteFile(e.k("python/sgl_kernel/stale_ops.so"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := PlanBuild(context.Background(), e.opts()); err == nil || !strings.Contains(err.Error(), "files git does not track under "+kd+"python/sgl_kernel ("+kd+"python/sgl_kernel/stale_ops.so)") {
		t.Errorf("ignored .so in the package: %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestOfflineAndDepsDir(t *testing.T) {
	e := newEnv(t)
	o := e.opts()
	o.Offline = true
	_, err := PlanBuild(context.Background(), o)
	var me *MissingDepsError
	if !errors.As(err, &me) || len(me.Missing) != 3 {
		t.Fatalf("err = %v, want 3 missing deps", err)
	}
	contains(t, err.Error(), "repo-cutlass", "https://github.com/NVIDIA/cutlass @ 57e3cfb47a2d9e0d46eb6335c3dc411498efa198", "repo-triton", "@ v3.5.1", "(sgl-kernel/cmake/deps.cmake)")

	// Provide every dep: cutlass by its name, triton by its repo base
	// name, fmt without the "repo-" prefix.
	deps := t.TempDir()
	mk := func(dir string) string {
		if err := testrepo.WriteFiles(filepath.Join(deps, dir), map[string]string{"README": dir + "\n"}); err != nil {
			t.Fatal(err)
		}
		c, err := testrepo.Init(filepath.Join(deps, dir))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cut, tri, fmtc := mk("repo-cutlass"), mk("triton"), mk("fmt")
	// The fixture pins commits these copies do not have: refused by name.
	o.DepsDir = deps
	_, err = PlanBuild(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "repo-cutlass") || !strings.Contains(err.Error(), "pins 57e3cfb47a2d9e0d46eb6335c3dc411498efa198, which that checkout does not have") {
		t.Fatalf("wrong pin: %v", err)
	}
	// The fixture re-pinned to the copies' commits (a tag for triton): an
	// upstream and checkout of the test's own.
	cm := strings.NewReplacer("57e3cfb47a2d9e0d46eb6335c3dc411498efa198", cut, "v3.5.1", tri).Replace(fixtureCMake)
	more := strings.Replace(fixtureMoreCMake, "553ec11ec06fbe0beebfbb45f9dc3c9eabd83d28", fmtc, 1)
	e2 := newEnvWith(t, layout{"repinned", oldLayout.dir, cm, more}, false)
	o2 := e2.opts()
	o2.Offline, o2.DepsDir = true, deps
	p := mustPlan(t, o2)
	contains(t, p.Env["CMAKE_ARGS"], "-DFETCHCONTENT_SOURCE_DIR_REPO-CUTLASS="+filepath.Join(deps, "repo-cutlass"),
		"-DFETCHCONTENT_SOURCE_DIR_REPO-TRITON="+filepath.Join(deps, "triton"), "-DFETCHCONTENT_SOURCE_DIR_REPO-FMT="+filepath.Join(deps, "fmt"),
		"-DFETCHCONTENT_FULLY_DISCONNECTED=ON")
	for _, d := range p.Inputs.Deps {
		if d.Commit == "" {
			t.Errorf("dep %s has no recorded commit", d.Name)
		}
	}
}

func TestCheckCompilesEachArch(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			e := newEnvIn(t, l).with("FAKE_NVCC_FAIL_ARCHS=120a")
			res, tc, err := Check(context.Background(), CheckOptions{Src: e.src, Archs: []cudaarch.Arch{"120a", "90a"}, Python: "python3", Env: e.env})
			if err != nil {
				t.Fatal(err)
			}
			if tc.NVCC.Version != "13.0.88" || len(res) != 2 {
				t.Fatalf("tc %+v res %+v", tc.NVCC, res)
			}
			if res[0].Arch != "120a" || res[0].OK || len(res[0].Errors) != 1 || !strings.Contains(res[0].Errors[0], `identifier "full_nvlink" is undefined`) {
				t.Errorf("120a = %+v", res[0])
			}
			if !res[1].OK || res[1].TU != l.dir+"/csrc/allreduce/custom_all_reduce.cu" {
				t.Errorf("90a = %+v", res[1])
			}
			cmd := strings.Join(res[1].Command, " ")
			contains(t, cmd, "-c -o", "-gencode=arch=compute_90a,code=sm_90a", "-D_GLIBCXX_USE_CXX11_ABI=1", "-I/fake/torch/include",
				"-I"+e.k("include"), "-I"+e.k("csrc"), e.k("csrc/allreduce/custom_all_reduce.cu"), "--expt-relaxed-constexpr")
			if strings.Contains(cmd, "compute_120a") {
				t.Errorf("90a command compiles 120a too: %s", cmd)
			}
		})
	}
	// A tree with no sgl-kernel project says what it looked for.
	dir := t.TempDir()
	if err := testrepo.WriteFiles(dir, map[string]string{"python/sglang/version.py": "x\n", "csrc/allreduce/custom_all_reduce.cu": "//\n"}); err != nil {
		t.Fatal(err)
	}
	if _, err := testrepo.Init(dir); err != nil {
		t.Fatal(err)
	}
	_, _, err := Check(context.Background(), CheckOptions{Src: dir, Archs: []cudaarch.Arch{"90a"}, Python: "python3"})
	contains(t, errString(err), dir+" has no sgl-kernel project: looked for a directory holding csrc/allreduce/custom_all_reduce.cu, CMakeLists.txt and a pyproject.toml",
		"./ holds csrc/allreduce/custom_all_reduce.cu but no CMakeLists.txt")
}

func TestAllreduceExtBuildAndCache(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			e := newEnvIn(t, l)
			o := e.opts("90a")
			p, err := PlanExt(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if p.Env["TORCH_CUDA_ARCH_LIST"] != "9.0a" || p.Inputs.Kind != "allreduce-ext" || p.Inputs.Extra["binding.cpp_sha256"] == "" || p.Inputs.Project != l.dir {
				t.Fatalf("plan = %+v", p)
			}
			// The project is copied into the fixed build path and built there.
			contains(t, strings.Join(p.Argv, " "), "build_ext.py --kernel-dir "+filepath.Join(p.BuildPath, "sglang", l.dir)+" --binding")
			wheel := mustPlan(t, o)
			if wheel.Key == p.Key {
				t.Error("the extension and the wheel share a cache key")
			}
			res, err := Build(context.Background(), p, o, nil)
			if err != nil {
				t.Fatal(err)
			}
			if filepath.Base(res.Wheel) != "arpatch_custom_ar.so" || !strings.HasPrefix(readFile(t, res.Wheel), "fake ext for 9.0a\n") {
				t.Errorf("ext output %s = %q", res.Wheel, readFile(t, res.Wheel))
			}
			// The binding and the translation unit were compiled in the
			// fixed build path, with its prefix map and the commit's time.
			contains(t, readFile(t, res.Wheel), "source /arpatch/src/binding.cpp\ncwd /arpatch\ntime 1775217600\nseed arpatch-allreduce\n",
				"source /arpatch/sglang/"+l.dir+"/csrc/allreduce/custom_all_reduce.cu\n", "tmp /arpatch/build/x.cudafe1.cpp\n")
			if names := objectNames(res.Manifest.Objects); names != "binding.o custom_all_reduce.cuda.o" {
				t.Errorf("objects = %s", names)
			}
			if res2, err := Build(context.Background(), p, o, nil); err != nil || !res2.Hit {
				t.Errorf("second ext build: hit %v err %v", res2 != nil && res2.Hit, err)
			}
		})
	}
}

// TestProgressFollowsNinja: a build's output, away from a terminal,
// shows its first step, its last, and a new count for each ninja run
// (the interval logic itself is internal/progress's, tested there).
func TestProgressFollowsNinja(t *testing.T) {
	var b bytes.Buffer
	p := NewProgress(&b, "sgl-kernel 120a")
	for _, l := range strings.Split(readFile(t, "testdata/recorded/ninja-build.txt"), "\n") {
		p.Line(l)
	}
	p.Done(true)
	want := "sgl-kernel 120a [  1/412]   0%\nsgl-kernel 120a [412/412] 100% eta 0s\nsgl-kernel 120a [1/3]  33%\n"
	if b.String() != want {
		t.Errorf("progress:\n%s\nwant\n%s", b.String(), want)
	}
}

// TestDepsOfArchiveURLs covers the July 2026 form of sgl-kernel's deps
// (archive URL + URL_HASH) and what a --deps-dir copy must be: an
// unpacked archive is hashed into the key, a git checkout must be at the
// pin and clean.
func TestDepsOfArchiveURLs(t *testing.T) {
	dir := t.TempDir()
	if err := testrepo.WriteFiles(dir, map[string]string{"CMakeLists.txt": `FetchContent_Declare(
    repo-cutlass
    URL      https://${GITHUB_ARTIFACTORY}/NVIDIA/cutlass/archive/1111111111111111111111111111111111111111.tar.gz
    URL_HASH SHA256=aaaa0000aaaa0000aaaa0000aaaa0000aaaa0000aaaa0000aaaa0000aaaa0000
)
FetchContent_Declare(repo-triton URL https://${GITHUB_ARTIFACTORY}/triton-lang/triton/archive/v3.6.0.tar.gz URL_HASH SHA256=bbbb)
FetchContent_Declare(repo-odd URL https://example.invalid/odd.tar.gz)
`}); err != nil {
		t.Fatal(err)
	}
	deps, err := ScanDeps(dir, "k")
	if err != nil || len(deps) != 3 {
		t.Fatalf("ScanDeps = %+v, %v", deps, err)
	}
	if deps[0].Name != "repo-cutlass" || deps[0].Pin() != "1111111111111111111111111111111111111111" || deps[0].URLHash != "SHA256=aaaa0000aaaa0000aaaa0000aaaa0000aaaa0000aaaa0000aaaa0000aaaa0000" {
		t.Errorf("cutlass = %+v pin %q", deps[0], deps[0].Pin())
	}
	if deps[2].Name != "repo-triton" || deps[2].Pin() != "v3.6.0" || deps[1].Pin() != "" {
		t.Errorf("pins: %q %q", deps[2].Pin(), deps[1].Pin())
	}

	// An unpacked archive (no .git): recorded by the hash of its files,
	// which changes with any byte.
	dd := t.TempDir()
	if err := testrepo.WriteFiles(filepath.Join(dd, "cutlass"), map[string]string{"include/cute/a.h": "// a\n"}); err != nil {
		t.Fatal(err)
	}
	got, err := MapDeps(deps[:1], dd, false)
	if err != nil || !strings.HasPrefix(got[0].Commit, "sha256:") || len(got[0].Commit) != 7+64 {
		t.Fatalf("archive copy: %+v %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(dd, "cutlass", "include/cute/a.h"), []byte("// b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	again, _ := MapDeps(deps[:1], dd, false)
	if again[0].Commit == got[0].Commit {
		t.Error("an edited archive copy kept its hash")
	}

	// A git checkout is held to the pin from the URL ...
	if err := testrepo.WriteFiles(filepath.Join(dd, "triton"), map[string]string{"README": "triton\n"}); err != nil {
		t.Fatal(err)
	}
	c, err := testrepo.Init(filepath.Join(dd, "triton"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := MapDeps(deps[2:], dd, false); err == nil || !strings.Contains(err.Error(), "pins v3.6.0, which that checkout does not have") {
		t.Errorf("unpinned checkout: %v", err)
	}
	// ... and when it is at the pin, it must be clean.
	pinned := deps[2]
	pinned.Repo = "https://x/triton-lang/triton/archive/" + c + ".tar.gz"
	if got, err := MapDeps([]Dep{pinned}, dd, false); err != nil || got[0].Commit != c {
		t.Fatalf("clean pinned checkout: %+v %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(dd, "triton", "README"), []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dd, "triton", "untracked.txt"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = MapDeps([]Dep{pinned}, dd, false)
	if err == nil || !strings.Contains(err.Error(), "has local changes or untracked files") || !strings.Contains(err.Error(), "README") || !strings.Contains(err.Error(), "untracked.txt") {
		t.Errorf("edited checkout: %v", err)
	}

	// A copy that is a symlink to an unpacked archive: its files count.
	real := t.TempDir()
	if err := os.WriteFile(filepath.Join(real, "x.h"), []byte("v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ld := t.TempDir()
	if err := os.Symlink(real, filepath.Join(ld, "cutlass")); err != nil {
		t.Fatal(err)
	}
	h1, err := MapDeps(deps[:1], ld, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(real, "x.h"), []byte("v2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if h2, _ := MapDeps(deps[:1], ld, false); h2[0].Commit == h1[0].Commit {
		t.Error("a symlinked copy kept its hash after its files changed")
	}

	// Two deps from one repository (upstream pins two cutlass commits):
	// neither takes the shared base name "cutlass"; each needs its own.
	two := []Dep{deps[0], {Name: "repo-flashmla-cutlass", Repo: "https://x/NVIDIA/cutlass/archive/2222222222222222222222222222222222222222.tar.gz"}}
	if got, err := MapDeps(two, dd, false); err != nil || got[0].Dir != filepath.Join(dd, "cutlass") || got[1].Dir != "" {
		t.Errorf("shared base name: %+v %v", got, err)
	}
	// A missing deps dir: online, refused with the mkdir; offline, one
	// refusal with the mkdir and every fetch into it.
	nosuch := filepath.Join(dd, "nosuch")
	if _, err := MapDeps(deps, nosuch, false); err == nil || !strings.Contains(err.Error(), "--deps-dir") || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("missing deps dir: %v", err)
	}
	var me *MissingDepsError
	if _, err := MapDeps(deps, nosuch, true); !errors.As(err, &me) || len(me.Missing) != 3 || !strings.Contains(err.Error(), "does not exist yet") || !strings.Contains(err.Error(), "\n  mkdir -p "+nosuch+"\n") {
		t.Errorf("missing deps dir, offline: %v", err)
	}
}

func objectNames(objs []Output) string {
	var n []string
	for _, o := range objs {
		n = append(n, o.File)
	}
	return strings.Join(n, " ")
}
