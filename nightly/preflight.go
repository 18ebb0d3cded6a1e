package nightly

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/tune"
	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/sglkernel"
	"github.com/arpatch/arpatch/kernels"
	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/recipes"
)

// ConfigError is a nightly.toml that cannot run; the CLI exits 2.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }

func (e *ConfigError) Unwrap() error { return e.Err }

// runInputs is what a run starts from once preflight has read the config:
// the arms' recipes, the patch series and the upstream repository.
type runInputs struct {
	a, b *recipes.Recipe
	cat  *patches.Catalog
	repo *gitsrc.Repo
	tune *tune.File // bench.tune, nil when unset
}

// preflight checks what the config decides before anything runs: the
// recipes and patch series, and, for the steps that will run, the archs,
// the interpreters, the deps dir and what the bench needs. Errors name
// the config key.
func preflight(cfg *Config, o Options) (*runInputs, error) {
	if err := history.CheckTarget(cfg.History.Path); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.At("history.path"), err)
	}
	if k := cfg.History.Keep; k != "" {
		if err := history.CheckKeep(k); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.At("history.keep"), err)
		}
	}
	a, b, err := loadArms(cfg)
	if err != nil {
		return nil, err
	}
	cat, err := catalog(cfg)
	if err != nil {
		return nil, err
	}
	repo, err := gitsrc.OpenAny(cfg.Path(cfg.Upstream.Repo))
	if err != nil {
		return nil, fmt.Errorf("upstream.repo %s: %w; clone a mirror there (git clone --mirror https://github.com/sgl-project/sglang.git)", cfg.Path(cfg.Upstream.Repo), err)
	}
	if b.Series != "" && len(cat.Members(b.Series)) == 0 {
		return nil, fmt.Errorf("arms.b: recipe %s names series %q, which no series has as name or family (arpatch's embedded series%s)", b.Name, b.Series, besideDir(cfg))
	}
	if !o.SkipBuild {
		bo, err := BuildOptions(cfg, o, b)
		if err != nil {
			return nil, err
		}
		// Against the pinned tree's CMake (the head's is checked by the
		// build itself, after drift).
		// The CMakeLists.txt is the sgl-kernel project's, wherever that
		// tree keeps it; a tree without a single project is refused by
		// the build itself, naming what it looked for.
		if cm := pinnedCMake(repo, b.Upstream.Commit); cm != "" {
			if err := kernels.CheckUpstreamArchs(bo.Archs, kernels.UpstreamArchs(cm)); err != nil {
				return nil, fmt.Errorf("%s: %w", cfg.At("build.archs"), err)
			}
		}
		if err := lookPython(cfg.Build.Python, o.Env); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.At("build.python"), err)
		}
		if d := bo.DepsDir; d != "" {
			if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
				key := cfg.At("build.deps_dir")
				if cfg.Build.DepsDir == "" {
					key = fmt.Sprintf("arms.b: recipe %s's [build] deps_dir", b.Name)
				}
				return nil, fmt.Errorf("%s %s: not a directory", key, d)
			}
		}
	}
	if !o.SkipBench {
		c := cfg.Bench
		for _, arm := range []struct{ key, url, launch string }{{"a", c.URLA, c.LaunchCmdA}, {"b", c.URLB, c.LaunchCmdB}} {
			if arm.url == "" && arm.launch == "" && c.LaunchCmd == "" && cmp.Or(c.Model, b.Bench.Model) == "" {
				return nil, fmt.Errorf("bench: arm %s has no server: set bench.model (and bench.draft_model) to launch SGLang, bench.launch_cmd or bench.launch_cmd_%s, or bench.url_%s; or run with --skip-bench", arm.key, arm.key, arm.key)
			}
		}
		for _, py := range []struct{ key, v string }{{"bench.python_a", c.PythonA}, {"bench.python_b", c.PythonB}} {
			if py.v != "" {
				if err := lookPython(py.v, o.Env); err != nil {
					return nil, fmt.Errorf("%s: %w", py.key, err)
				}
			}
		}
	}
	in := &runInputs{a: a, b: b, cat: cat, repo: repo}
	if !o.SkipBench && cfg.Bench.Tune != "" {
		if in.tune, err = tune.Load(cfg.Path(cfg.Bench.Tune)); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.At("bench.tune"), err)
		}
	}
	return in, nil
}

// loadArms loads the recipes of arm A and arm B, which must pin one
// commit and be two recipes.
func loadArms(cfg *Config) (*recipes.Recipe, *recipes.Recipe, error) {
	// load returns arm's recipe: its file (arms.X_file, relative to the
	// config), else the embedded one it names (arms.X). Errors name the
	// key and its line.
	load := func(arm, name, file string) (*recipes.Recipe, error) {
		if file != "" {
			r, err := bench.RecipeFile(cfg.Path(file))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", cfg.At("arms."+arm+"_file"), err)
			}
			return r, nil
		}
		r, err := recipes.Embedded(name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w (or name a recipe file with arms.%s_file)", cfg.At("arms."+arm), err, arm)
		}
		return r, nil
	}
	a, err := load("a", cfg.Arms.A, cfg.Arms.AFile)
	if err != nil {
		return nil, nil, err
	}
	b, err := load("b", cfg.Arms.B, cfg.Arms.BFile)
	if err != nil {
		return nil, nil, err
	}
	if a.Upstream.Commit != b.Upstream.Commit {
		return nil, nil, fmt.Errorf("arms: recipe %s pins %s and %s pins %s; the A/B needs one commit", a.Name, a.Upstream.Commit, b.Name, b.Upstream.Commit)
	}
	if a.Name == b.Name {
		return nil, nil, fmt.Errorf("arms: A and B are both recipe %s", a.Name)
	}
	return a, b, nil
}

// catalog is the embedded series plus, beside them, those of
// [arms] patches_dir (one of the same name replaces the embedded one).
func catalog(cfg *Config) (*patches.Catalog, error) {
	cat, err := patches.Embedded()
	if err != nil || cfg.Arms.PatchesDir == "" {
		return cat, err
	}
	extra, err := patches.LoadDir(cfg.Path(cfg.Arms.PatchesDir))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.At("arms.patches_dir"), err)
	}
	return cat.With(extra), nil
}

// besideDir names [arms] patches_dir for messages, when one is set.
func besideDir(cfg *Config) string {
	if cfg.Arms.PatchesDir == "" {
		return ""
	}
	return " and those in " + cfg.Path(cfg.Arms.PatchesDir)
}

// pinnedCMake returns the sgl-kernel project's CMakeLists.txt at rev, or
// "" when rev, its project or the file cannot be read.
func pinnedCMake(repo *gitsrc.Repo, rev string) string {
	c, err := repo.Resolve(rev)
	if err != nil {
		return ""
	}
	tree, err := repo.TreeAt(c)
	if err != nil {
		return ""
	}
	proj, err := sglkernel.AtCommit(tree)
	if err != nil {
		return ""
	}
	cm, err := tree.ReadFile(proj.Path("CMakeLists.txt"))
	if err != nil {
		return ""
	}
	return string(cm)
}

// lookPython finds an interpreter by path, or by name on env's PATH.
func lookPython(py string, env []string) error {
	if strings.Contains(py, "/") {
		if _, err := os.Stat(py); err != nil {
			return fmt.Errorf("%s: %w", py, err)
		}
		return nil
	}
	path := os.Getenv("PATH")
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if fi, err := os.Stat(filepath.Join(dir, py)); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return nil
		}
	}
	return fmt.Errorf("%q is not on PATH; give its full path (a relative path is relative to the config file)", py)
}
