package kernels

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/internal/checkout"
	"github.com/arpatch/arpatch/internal/testrepo"
	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/recipes"
)

// fixtureCMake is shaped like sgl-kernel/CMakeLists.txt: FetchContent
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

// env is a build fixture: a checkout with apply state and fake tools.
type env struct {
	src    string
	up     string
	commit string
	cache  Cache
	env    []string
	fake   string
}

func fakeBin(t testing.TB) string {
	t.Helper()
	p, err := filepath.Abs("testdata/fakebin")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newEnv(t testing.TB) *env {
	t.Helper()
	tmp := t.TempDir()
	up := filepath.Join(tmp, "up")
	err := testrepo.WriteFiles(up, map[string]string{
		"sgl-kernel/CMakeLists.txt":                      fixtureCMake,
		"sgl-kernel/cmake/deps.cmake":                    fixtureMoreCMake,
		"sgl-kernel/csrc/allreduce/custom_all_reduce.cu": "// fixture translation unit\n",
		"sgl-kernel/include/utils.h":                     "// fixture header\n",
		"python/sglang/version.py":                       "__version__ = \"0.0.0\"\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	commit, err := testrepo.Init(up)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{up: up, commit: commit, src: filepath.Join(tmp, "src"), cache: Cache{Dir: filepath.Join(tmp, "cache")}, fake: fakeBin(t)}
	e.env = []string{"PATH=" + e.fake + ":/usr/bin:/bin", "HOME=" + tmp}
	e.apply(t, e.src, "", nil)
	return e
}

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

func (e *env) opts(archs ...Arch) BuildOptions {
	if len(archs) == 0 {
		archs = []Arch{"120a"}
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
