package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/kernels"
	"github.com/arpatch/arpatch/nightly"
	"github.com/arpatch/arpatch/recipes"
)

// TestBuildOptionsAgreeWithNightly: `arpatch build` and a nightly turn
// the same recipe into the same build (kernels.FromRecipe is the one
// place for both): with the recipe's [build] alone, with flags and
// nightly.toml's [build] giving the same values over it, and with offline
// set by the flag and nightly.toml only (the recipe says false), so that
// neither side can drop a field the other keeps: every field of the
// options is compared, each set to a value that is not its default.
func TestBuildOptionsAgreeWithNightly(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("ARPATCH_CACHE", filepath.Join(dir, "cache"))
	for _, d := range []string{"recipe-deps", "deps"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pcie, err := recipes.Embedded("pcie")
	if err != nil {
		t.Fatal(err)
	}
	pcie.Build.Jobs, pcie.Build.Tool, pcie.Build.DepsDir, pcie.Build.Offline = 6, "pip", filepath.Join(dir, "recipe-deps"), true
	online := *pcie
	online.Build.Offline = false
	fromCLI := func(pcie *recipes.Recipe, args ...string) kernels.BuildOptions {
		t.Helper()
		o, err := optsOf(t, func(f buildCmdFlags) (kernels.BuildOptions, error) {
			return optsFromRecipe(f.buildFlagValues, f.Out, f.Given, pcie)
		}, strings.Join(append([]string{"arpatch", "build"}, args...), " "))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	fromNightly := func(pcie *recipes.Recipe, build string) kernels.BuildOptions {
		t.Helper()
		p := filepath.Join(dir, "nightly.toml")
		if err := os.WriteFile(p, []byte("[arms]\na = \"baseline\"\nb = \"pcie\"\n[build]\n"+build), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := nightly.LoadConfig(p)
		if err != nil {
			t.Fatal(err)
		}
		o, err := nightly.BuildOptions(cfg, nightly.Options{Launcher: launcher(), Version: arpatchVersion()}, pcie)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	for _, tc := range []struct {
		name   string
		recipe *recipes.Recipe
		flags  []string
		toml   string
		archs  []string
		want   kernels.BuildOptions // Jobs, Tool, Offline, DepsDir, Python, Cache
	}{
		{"the recipe's [build]", pcie, nil, "", []string{"120a"},
			kernels.BuildOptions{Jobs: 6, Tool: "pip", Offline: true, DepsDir: filepath.Join(dir, "recipe-deps"), Python: "python3", Cache: kernels.Cache{Dir: filepath.Join(dir, "cache")}}},
		{"flags and nightly.toml over it", pcie,
			[]string{"--arch", "90a,120a", "--jobs", "3", "--tool", "uv", "--deps-dir", filepath.Join(dir, "deps"), "--python", "/opt/py/bin/python3", "--cache-dir", filepath.Join(dir, "c2")},
			"archs = [\"120a\", \"90a\"]\njobs = 3\ntool = \"uv\"\ndeps_dir = \"deps\"\npython = \"/opt/py/bin/python3\"\ncache_dir = \"c2\"\n",
			[]string{"120a", "90a"},
			kernels.BuildOptions{Jobs: 3, Tool: "uv", Offline: true, DepsDir: filepath.Join(dir, "deps"), Python: "/opt/py/bin/python3", Cache: kernels.Cache{Dir: filepath.Join(dir, "c2")}}},
		{"offline from the flag and nightly.toml alone", &online, []string{"--offline"}, "offline = true\n", []string{"120a"},
			kernels.BuildOptions{Jobs: 6, Tool: "pip", Offline: true, DepsDir: filepath.Join(dir, "recipe-deps"), Python: "python3", Cache: kernels.Cache{Dir: filepath.Join(dir, "cache")}}},
	} {
		c, n := fromCLI(tc.recipe, tc.flags...), fromNightly(tc.recipe, tc.toml)
		c.Src = "" // --src; the nightly's ABBuild sets each arm's checkout
		if !reflect.DeepEqual(c, n) {
			t.Errorf("%s:\narpatch build: %+v\nnightly:       %+v", tc.name, c, n)
		}
		got := kernels.BuildOptions{Jobs: n.Jobs, Tool: n.Tool, Offline: n.Offline, DepsDir: n.DepsDir, Python: n.Python, Cache: n.Cache}
		if !reflect.DeepEqual(got, tc.want) || !reflect.DeepEqual(cudaarch.Strings(n.Archs), tc.archs) {
			t.Errorf("%s: options %+v archs %v, want %+v archs %v", tc.name, got, n.Archs, tc.want, tc.archs)
		}
	}
}

// TestLockTimeout: --lock-timeout sets how long a build waits for the
// fixed build path (kernels.DefaultLockWait unless given; 0 refuses at
// once); a negative one is a usage error.
func TestLockTimeout(t *testing.T) {
	t.Setenv("ARPATCH_CACHE", t.TempDir())
	pcie, err := recipes.Embedded("pcie")
	if err != nil {
		t.Fatal(err)
	}
	opts := func(f buildCmdFlags) (kernels.BuildOptions, error) {
		return optsFromRecipe(f.buildFlagValues, f.Out, f.Given, pcie)
	}
	for argv, want := range map[string]time.Duration{"arpatch build": kernels.DefaultLockWait, "arpatch build --lock-timeout 0": 0, "arpatch build --lock-timeout 90s": 90 * time.Second} {
		if o, err := optsOf(t, opts, argv); err != nil || o.LockWait != want {
			t.Errorf("%s: LockWait %v, %v; want %v", argv, o.LockWait, err, want)
		}
	}
	if _, err := optsOf(t, opts, "arpatch build --lock-timeout -1s"); exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--lock-timeout -1s: use 0 (refuse at once) or a wait such as 30m") {
		t.Errorf("negative: %v", err)
	}
}
