package nightly

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/patches"
)

// Mistakes only a run can see (recipes, series, interpreters, a bench
// without a server) are found before anything runs, as *ConfigError.
func TestPreflightErrors(t *testing.T) {
	w := newWorld(t)
	for _, tc := range []struct {
		edit      func(c *Config)
		skipBuild bool
		want      string
	}{
		{func(c *Config) { c.Arms.AFile, c.Arms.A = "", "nosuch" }, true, "arms.a: "},
		{func(c *Config) { c.Arms.PatchesDir = "nodir" }, true, "nodir"},
		{func(c *Config) { c.Build.Archs = []string{"999z"} }, false, "build.archs: "},
		{func(c *Config) { c.Build.Archs = []string{"90a"} }, false, "build.archs: --arch 90a: upstream's CMake files do not compile sm_90a"},
		{func(c *Config) { c.Upstream.Repo = "nosuch" }, true, "upstream.repo "},
		{func(c *Config) { c.Build.Python = "/no/python3" }, false, "build.python: /no/python3"},
		{func(c *Config) { c.Build.DepsDir = "nodeps" }, false, "build.deps_dir "},
		{func(c *Config) { c.Bench.URLA, c.Bench.URLB = "http://127.0.0.1:1", "" }, true, "bench: arm b has no server"},
	} {
		cfg := *w.cfg
		tc.edit(&cfg)
		_, err := Run(context.Background(), Options{Config: &cfg, Env: w.env, SkipBuild: tc.skipBuild,
			Probe: func(context.Context) Environment { return Environment{} }})
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want a ConfigError with %q", err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(w.dir, "history.db")); err == nil {
		t.Error("a refused config still opened the history")
	}
}

// TestPatchesDirAddsBeside: [arms] patches_dir adds its series beside the
// embedded ones (as docs/nightly.md says), replacing one of the same name.
func TestPatchesDirAddsBeside(t *testing.T) {
	w := newWorld(t)
	emb, err := patches.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	cat, err := catalog(w.cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range cat.Series {
		got = append(got, s.Name)
	}
	if len(got) != len(emb.Series)+1 || got[len(got)-1] != "fx" || got[0] != emb.Series[0].Name {
		t.Errorf("catalog = %v, want the %d embedded series and fx", got, len(emb.Series))
	}
}

// Config errors found before the run name the config's file, line and
// key, never a flag: an arm's recipe file and the patches_dir that are
// not there, a recipe name no recipe has.
func TestConfigPathErrorsNameKeys(t *testing.T) {
	dir := t.TempDir()
	for body, want := range map[string]string{
		"[arms]\na_file = \"nope.toml\"\n":           "c.toml:2: arms.a_file: open " + filepath.Join(dir, "nope.toml") + ": no such file or directory",
		"[arms]\na = \"nosuch\"\n":                   `c.toml:2: arms.a: no recipe named "nosuch"; known recipes: baseline, pcie (or name a recipe file with arms.a_file)`,
		"[arms]\n\npatches_dir = \"/nonexistent\"\n": "c.toml:3: arms.patches_dir: /nonexistent: no such file or directory",
		"[arms]\npatches_dir = \"c.toml\"\n":         "c.toml:2: arms.patches_dir: " + filepath.Join(dir, "c.toml") + " is a file; pass the directory",
	} {
		p := filepath.Join(dir, "c.toml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadConfig(p)
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		_, _, err = loadArms(cfg)
		if err == nil {
			_, err = catalog(cfg)
		}
		if err == nil || !strings.HasPrefix(err.Error(), filepath.Join(dir, want)) {
			t.Errorf("%q:\n got %v\nwant %s", body, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "--") {
			t.Errorf("%q: %v names a flag", body, err)
		}
	}
}
