package kernels

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arpatch/arpatch/checkout"
	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/testrepo"
	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/recipes"
)

// fixtureCMake is shaped like `sgl-kernel/CMakeLists.txt`: FetchContent
// dependencies and a hard-coded gencode list.
const fixtureCMake = `cmake_minimum_required(VERSION 3.26)
project(sgl-kernel LANGUAGES CXX CUDA)
include(FetchContent)
# FetchContent_Declare(commented-out GIT_REPOSITORY x)
FetchContent_Declare(
    repo-cutlass
    GIT_REPOSITORY https://github.com/NVIDIA/cutlass
    GIT_TAG        57e3cfb47a2d9e0d46eb6335c3dc411498efa198
    GIT_SHALLOW    OFF
)
FetchContent_Declare(
    repo-triton
    GIT_REPOSITORY "https://github.com/triton-lang/triton"
    GIT_TAG        v3.5.1
)
set(SGL_KERNEL_CUDA_FLAGS
    "-O3"
    "-gencode=arch=compute_90,code=sm_90"
)
if (ENABLE_BELOW_SM90)
    list(APPEND SGL_KERNEL_CUDA_FLAGS "-gencode=arch=compute_80,code=sm_80")
endif()
list(APPEND SGL_KERNEL_CUDA_FLAGS
    "-gencode=arch=compute_100a,code=sm_100a"
    "-gencode=arch=compute_120a,code=sm_120a"
    "-gencode=arch=compute_90a,code=sm_90a"
)
`

const fixtureMoreCMake = `FetchContent_Declare(repo-fmt GIT_REPOSITORY https://github.com/fmtlib/fmt GIT_TAG 553ec11ec06fbe0beebfbb45f9dc3c9eabd83d28)
`

// fixtureAOTCMake is shaped like `python/sglang/kernels/aot/CMakeLists.txt`
// (the aot layout, 2026-07-29 on): archive URLs under the
// GITHUB_ARTIFACTORY cache variable, each with URL_HASH SHA256. The hashes
// are the fixture archives' (fixtureArchive), filled in by newEnvIn.
const fixtureAOTCMake = `cmake_minimum_required(VERSION 3.26 FATAL_ERROR)
project(sgl-kernel LANGUAGES CXX CUDA)
include(FetchContent)
set(GITHUB_ARTIFACTORY "github.com" CACHE STRING "GitHub mirror URL")
FetchContent_Declare(
    repo-cutlass
    URL      https://${GITHUB_ARTIFACTORY}/NVIDIA/cutlass/archive/57e3cfb47a2d9e0d46eb6335c3dc411498efa198.tar.gz
    URL_HASH SHA256=@repo-cutlass@
)
FetchContent_Populate(repo-cutlass)
set(SGL_KERNEL_CUDA_FLAGS
    "-O3"
    "-gencode=arch=compute_90,code=sm_90"
)
list(APPEND SGL_KERNEL_CUDA_FLAGS
    "-gencode=arch=compute_120a,code=sm_120a"
    "-gencode=arch=compute_90a,code=sm_90a"
)
`

// fixtureAOTMoreCMake is shaped like the aot layout's cmake/flashmla.cmake:
// a second cutlass pin, unpacked into another dep's tree.
const fixtureAOTMoreCMake = `FetchContent_Declare(
    repo-flashmla-cutlass
    URL      https://${GITHUB_ARTIFACTORY}/NVIDIA/cutlass/archive/147f5673d0c1c3dcf66f78d677fd647e4a020219.tar.gz
    URL_HASH SHA256=@repo-flashmla-cutlass@
    SOURCE_DIR ${repo-flashmla_SOURCE_DIR}/csrc/cutlass
)
`

// layout is where a fixture tree keeps its sgl-kernel project, with the
// CMake files of that era.
type layout struct {
	name, dir, cmake, more string
}

var (
	oldLayout = layout{"sgl-kernel", "sgl-kernel", fixtureCMake, fixtureMoreCMake}
	aotLayout = layout{"aot", "python/sglang/kernels/aot", fixtureAOTCMake, fixtureAOTMoreCMake}
	layouts   = []layout{oldLayout, aotLayout}
)

// fixtureArchive is a GitHub-style source archive of dep name: a gzip'd
// tar with one top-level directory <repo>-<rev>/, bytes fixed by name.
func fixtureArchive(t testing.TB, name string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	mt := time.Date(2026, 7, 29, 0, 0, 0, 0, time.UTC)
	top := strings.TrimPrefix(name, "repo-") + "-rev/"
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"comment": "0123456789abcdef"}}))
	must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: top, Mode: 0o755, ModTime: mt}))
	body := "// " + name + " header\n"
	must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: top + "include/cute/a.h", Mode: 0o644, Size: int64(len(body)), ModTime: mt}))
	_, err := tw.Write([]byte(body))
	must(err)
	must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: top + "include/b.h", Linkname: "cute/a.h", ModTime: mt}))
	must(tw.Close())
	must(zw.Close())
	return buf.Bytes()
}

// kernelFiles is a fixture SGLang tree with its sgl-kernel project where
// l keeps it; @<dep>@ in the CMake files becomes the sha256 of that dep's
// fixture archive.
func kernelFiles(t testing.TB, l layout) map[string]string {
	fill := func(s string) string {
		for _, d := range []string{"repo-cutlass", "repo-flashmla-cutlass"} {
			s = strings.ReplaceAll(s, "@"+d+"@", digest.SHA256Hex(fixtureArchive(t, d)))
		}
		return s
	}
	return map[string]string{
		l.dir + "/CMakeLists.txt":                      fill(l.cmake),
		l.dir + "/cmake/deps.cmake":                    fill(l.more),
		l.dir + "/pyproject.toml":                      testrepo.KernelPyproject,
		l.dir + "/csrc/allreduce/custom_all_reduce.cu": "// fixture translation unit\n",
		l.dir + "/include/utils.h":                     "// fixture header\n",
		l.dir + "/csrc/common_extension.cc":            "// fixture host translation unit\n",
		l.dir + "/python/sgl_kernel/__init__.py":       "# fixture package\n",
		"python/sglang/version.py":                     "__version__ = \"0.0.0\"\n",
	}
}

// env is a build fixture: a checkout with apply state and fake tools.
type env struct {
	kdir   string // the sgl-kernel project's directory, relative to the tree
	src    string
	up     string
	commit string
	cache  Cache
	env    []string
	fake   string
	// scratch is binScratchDir, where seedProbe keeps its seeds.
	scratch string
}

func fakeBin(t testing.TB) string {
	t.Helper()
	p, err := filepath.Abs("testdata/fakebin")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newEnv(t testing.TB) *env { return newEnvIn(t, oldLayout) }

// newEnvIn is newEnv with the sgl-kernel project where l keeps it. Its
// upstream is l's shared one (sharedUpstream) and so is its checkout
// (sharedCheckout): the test plans, builds and checks that tree but must
// leave it as it was, which a cleanup checks. newEnvWritable gives a test
// that edits its tree a checkout of its own; newEnvWith an upstream too.
func newEnvIn(t testing.TB, l layout) *env {
	t.Helper()
	up, commit := sharedUpstream(t, l)
	return newEnvAt(t, l, up, commit, sharedCheckout(t, up, commit))
}

// newEnvWritable is newEnvIn with a checkout of the test's own, which it
// may edit.
func newEnvWritable(t testing.TB, l layout) *env {
	t.Helper()
	up, commit := sharedUpstream(t, l)
	return newEnvFrom(t, l, up, commit)
}

// newEnvWith is newEnvIn with an upstream and checkout of the test's
// own; sized adds testrepo.WriteSized's SGLang-shaped tree (4,303 files,
// 47 MB) and packs the objects, as a real clone holds them.
func newEnvWith(t testing.TB, l layout, sized bool) *env {
	t.Helper()
	up := filepath.Join(t.TempDir(), "up")
	commit, err := makeUpstream(t, up, l, sized)
	if err != nil {
		t.Fatal(err)
	}
	return newEnvFrom(t, l, up, commit)
}

// makeUpstream writes l's fixture tree at up and commits it (with
// WriteSized's tree and packed when sized).
func makeUpstream(t testing.TB, up string, l layout, sized bool) (string, error) {
	if err := testrepo.WriteFiles(up, kernelFiles(t, l)); err != nil {
		return "", err
	}
	if sized {
		if _, err := testrepo.WriteSized(filepath.Join(up, "python")); err != nil {
			return "", err
		}
	}
	commit, err := testrepo.Init(up)
	if err != nil {
		return "", err
	}
	if sized {
		return commit, testrepo.Pack(up)
	}
	return commit, nil
}

// upstreams holds each layout's fixture upstream, made by the first test
// that asks and shared read-only by the rest (each clones its own
// checkout from it), the shared checkouts (sharedCheckout) and series,
// and the scratch directories the tests write (Scratch); TestMain closes
// it, and fails if a test changed an upstream, checkout or series. One
// upstream per test (about 20) wrote about 1,400 files and directories of
// the package's 5,500.
var upstreams testrepo.Shared

// sharedUpstream returns l's shared upstream repository and its commit.
func sharedUpstream(t testing.TB, l layout) (up, commit string) {
	t.Helper()
	up, commit, err := upstreams.Get(l.name+" "+digest.SHA256Hex([]byte(l.dir + "\n" + l.cmake + "\n" + l.more))[:12], func(dir string) (string, error) {
		return makeUpstream(t, dir, l, false)
	})
	if err != nil {
		t.Fatal(err)
	}
	return up, commit
}

// newEnvFrom is the fixture with upstream up at commit: a checkout of it
// in the test's directory, applied with no series, and fake tools.
func newEnvFrom(t testing.TB, l layout, up, commit string) *env {
	t.Helper()
	return newEnvAt(t, l, up, commit, "")
}

// newEnvAt is the fixture with upstream up at commit, its checkout at src
// (made and applied already; when src is "", made in the test's
// directory), and fake tools; its cache is a directory of the test's (its
// home too: nothing writes there), its build root the shared one
// (sharedBuildRoot).
func newEnvAt(t testing.TB, l layout, up, commit, src string) *env {
	t.Helper()
	tmp := t.TempDir()
	e := &env{kdir: l.dir, up: up, commit: commit, src: src, cache: Cache{Dir: tmp}, fake: fakeBin(t), scratch: binScratchDir(t)}
	e.env = []string{"PATH=" + e.fake + ":/usr/bin:/bin", "HOME=" + tmp, BuildRootEnv + "=" + sharedBuildRoot(t)}
	if src == "" {
		e.src = filepath.Join(t.TempDir(), "src")
		e.apply(t, e.src, "", nil)
	}
	return e
}

// sharedCheckout returns the shared checkout of up at commit, applied with
// no series: made by the first test that asks (about 30 inodes of git's
// and the tree's each time) and used read-only by the rest. upstreams
// records its tree when it is made, and a cleanup (upstreams.Check)
// checks, at the end of each test that asks, that every file under it
// (its .git included) has the path, mode, size, modification time and
// bytes it had, and names the test and the paths if not: such a test must
// take newEnvWritable.
func sharedCheckout(t testing.TB, up, commit string) string {
	t.Helper()
	src, _, err := upstreams.Get("checkout "+up, func(dir string) (string, error) {
		e := &env{up: up, commit: commit}
		e.apply(t, dir, "", nil)
		return commit, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	upstreams.Check(t, src)
	return src
}

// binScratchDir is a directory of the test binary's own, made on first
// use and removed by TestMain (upstreams.Scratch): the fixtures' build root
// and the probe seeds.
func binScratchDir(t testing.TB) string {
	t.Helper()
	dir, err := upstreams.Scratch("scratch", func(dir string) error {
		return os.MkdirAll(filepath.Join(dir, "broot"), 0o755)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// sharedBuildRoot is every fixture's build root (BuildRootEnv), one per
// test binary, so that it exists: a plan's check of the root then makes
// nothing, and a build makes only its own path in it. Every build removes
// its path and lock when it ends (TestBuildsInTwoDirectoriesAreIdentical
// checks the root is empty after its builds), and the tests run one at a
// time, so no test sees another's. Tests that need another root set their
// own (e.with(BuildRootEnv + "=...")).
func sharedBuildRoot(t testing.TB) string { return filepath.Join(binScratchDir(t), "broot") }

// probeSeeds holds, per fake environment (seedKey), the toolchain probe
// cache file that Probe wrote for the first fixture with that environment
// (in binScratchDir): "" where that probe failed.
var probeSeeds = struct {
	sync.Mutex
	m map[string]string
}{m: map[string]string{}}

// seedProbe puts into e's cache directory, unless it has one, the probe
// cache that the first fixture with e's environment made (opts calls it),
// so that PlanBuild answers the probe
// from its cache (one Python start) instead of running every tool's
// --version and the Python probe: 7 fake-tool starts, in each of about 40
// fixtures. The file holds its fingerprint (the tools' paths, sizes and
// modification times, and where torch would be imported from), which
// Probe checks as always: a test that runs another Python or changes a
// tool still probes. The FAKE_* variables the fingerprint does not cover
// are in the seed's key, as with's own cache keeps them apart. The seed is
// hard-linked into the cache directory, so no file is made per fixture:
// Probe replaces its cache by a rename (safefs.WriteFile), never writing
// through the link into the seed. A seed that could not be made or linked
// costs the test a probe, nothing else.
func (e *env) seedProbe() {
	key := seedKey(e.env)
	probeSeeds.Lock()
	defer probeSeeds.Unlock()
	seed, ok := probeSeeds.m[key]
	if !ok {
		f := filepath.Join(e.scratch, "probe-seed-"+strconv.Itoa(len(probeSeeds.m)))
		if _, err := Probe(context.Background(), ProbeOptions{Python: "python3", Env: e.env, CacheFile: f}); err == nil {
			if _, err := os.Stat(f); err == nil {
				seed = f
			}
		}
		probeSeeds.m[key] = seed
	}
	f := filepath.Join(e.cache.Dir, probeCacheName)
	if _, err := os.Lstat(f); seed == "" || err == nil {
		return
	}
	if os.MkdirAll(e.cache.Dir, 0o755) == nil {
		_ = os.Link(seed, f) // unlinked: the test probes
	}
}

// seedKey is what a probe with the fake tools answers from in env: PATH,
// CUDA_HOME and CUDAHOSTCXX (Probe reads them) and every FAKE_* variable
// but those only a fake build or compile reads (the tools' --version and
// python3's probe answers never do). Variables that differ per test (HOME,
// the build root) or that only a build reads (CXX, CMAKE_BUILD_TYPE, ...)
// are left out, so that tests share seeds.
func seedKey(env []string) string {
	var kept []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH", "CUDA_HOME", "CUDAHOSTCXX":
		case "FAKE_BUILD_DURING", "FAKE_BUILD_FAIL", "FAKE_BUILD_HANG", "FAKE_PIDS", "FAKE_STEPS", "FAKE_NONDET_TU", "FAKE_SKIP_ARCHS", "FAKE_NVCC_FAIL_ARCHS":
			continue
		default:
			if !strings.HasPrefix(k, "FAKE_") {
				continue
			}
		}
		kept = append(kept, kv)
	}
	return strings.Join(kept, "\x00")
}

// k is path rel inside the fixture checkout's sgl-kernel project.
func (e *env) k(rel string) string { return filepath.Join(e.src, e.kdir, rel) }

// apply clones the fixture into src and applies a recipe with the given
// series (none when empty).
func (e *env) apply(t testing.TB, src, series string, cat *patches.Catalog) *recipes.Recipe {
	t.Helper()
	text := "name = \"fx\"\n"
	if series != "" {
		text += "series = \"" + series + "\"\n"
	}
	r, err := recipes.Parse("fx.toml", []byte(text+"[upstream]\ncommit = \""+e.commit+"\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checkout.Apply(context.Background(), checkout.ApplyOptions{Recipe: r, Catalog: cat, Src: src, Repo: e.up}); err != nil {
		t.Fatal(err)
	}
	return r
}

func (e *env) opts(archs ...cudaarch.Arch) BuildOptions {
	e.seedProbe()
	if len(archs) == 0 {
		archs = []cudaarch.Arch{"120a"}
	}
	return BuildOptions{Src: e.src, Archs: archs, Jobs: 4, Tool: "auto", Python: "python3", Cache: e.cache,
		Env: e.env, Launcher: []string{"/opt/arpatch", "gencode-filter"}, Version: "test"}
}

// with returns the fixture with extra environment and its own cache (the
// probe cache keys on tool files, which FAKE_* variables do not change).
func (e *env) with(kv ...string) *env {
	c := *e
	c.env = append(append([]string(nil), e.env...), kv...)
	c.cache = Cache{Dir: e.cache.Dir + "-" + strings.Join(kv, ",")}
	return &c
}

func mustPlan(t testing.TB, o BuildOptions) *Plan {
	t.Helper()
	p, err := PlanBuild(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func contains(t testing.TB, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("missing %q in:\n%s", w, s)
		}
	}
}
