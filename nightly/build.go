package nightly

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/arpatch/arpatch/checkout"
	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/kernels"
	"github.com/arpatch/arpatch/recipes"
)

// BuildRow is one arm's build.
type BuildRow struct {
	Arm    string `json:"arm"`
	Key    string `json:"key,omitempty"`
	Hit    bool   `json:"cache_hit"`
	Output string `json:"output,omitempty"`
	Error  string `json:"error,omitempty"`
}

// build is step 2: both arms through the build cache at commit (drift's:
// the pinned commit, or the head with arms.commit = "head"), with recipe
// B's build options (BuildOptions). A checkout of another commit is
// cloned afresh first (refreshArms). Each arm's build goes into the
// report's builds, whose keys the history stores with the arms.
func (n *night) build(ctx context.Context, commit string) []history.Check {
	if n.o.SkipBuild {
		return []history.Check{{Name: "build", Kind: history.KindBuild, Status: history.CheckSkip, Detail: "--skip-build"}}
	}
	if !n.canContinue() || ctx.Err() != nil {
		return nil
	}
	rep, cfg, a, b := n.rep, n.cfg, n.in.a, n.in.b
	n.o.logf("building %s and %s at %s", a.Name, b.Name, githash.Hash(commit).Short())
	fail := func(msg string, err error) []history.Check {
		rep.Errors = append(rep.Errors, msg)
		rep.exit(ExitInfra)
		return []history.Check{{Name: "build", Kind: history.KindBuild, Status: history.CheckFail, Detail: err.Error()}}
	}
	bo, err := BuildOptions(cfg, n.o, b)
	if err != nil {
		return fail(err.Error(), err)
	}
	if err := refreshArms(cfg.Path(cfg.Build.WorkDir), commit); err != nil {
		return fail("build: "+err.Error(), err)
	}
	at := "" // ABBuild's word for the recipes' pinned commit
	if cfg.Arms.Commit == CommitHead {
		at = commit
	}
	var cs []history.Check
	_, results, err := kernels.ABBuild(ctx, kernels.ABOptions{A: a, B: b, Catalog: n.in.cat, Dir: cfg.Path(cfg.Build.WorkDir), Repo: cfg.Path(cfg.Upstream.Repo), Commit: at, Build: bo}, nil)
	for i, r := range results {
		arm := []string{a.Name, b.Name}[i]
		rep.Builds = append(rep.Builds, BuildRow{Arm: arm, Key: r.Plan.Key, Hit: r.Hit, Output: r.Wheel})
		cs = append(cs, history.Check{Name: "build " + arm, Kind: history.KindBuild, Status: history.CheckPass, Detail: fmt.Sprintf("key %s, cache hit %v", digest.Short(r.Plan.Key), r.Hit)})
	}
	if err != nil {
		rep.Errors = append(rep.Errors, "build: "+err.Error())
		cs = append(cs, history.Check{Name: "build", Kind: history.KindBuild, Status: history.CheckFail, Detail: err.Error()})
		rep.exit(ExitInfra)
	}
	return cs
}

// BuildOptions turns recipe B's [build] and nightly.toml's [build] into
// the build's options with kernels.FromRecipe, as `arpatch build` does
// with its flags: nightly.toml's archs, jobs, tool, deps_dir and offline
// over the recipe's, with its python and cache_dir (relative paths are
// relative to the config file). Both arms build with them: recipe B's
// [build] is the build the patch needs. Errors name the config key
// (build.archs, build.cache_dir, ...).
func BuildOptions(cfg *Config, o Options, b *recipes.Recipe) (kernels.BuildOptions, error) {
	c := cfg.Build
	ov := kernels.BuildOverrides{Archs: c.Archs, Tool: c.Tool, DepsDir: cfg.Path(c.DepsDir), Offline: c.Offline, CacheDir: cfg.Path(c.CacheDir),
		Python: c.Python, Env: o.Env, Launcher: o.Launcher, Version: o.Version}
	if c.Jobs != 0 {
		ov.Jobs = &c.Jobs
	}
	bo, err := kernels.FromRecipe(b.Build, ov)
	if err != nil {
		return bo, fmt.Errorf("build.%w", err)
	}
	bo.Log = o.Log // a wait for the fixed build path says so
	return bo, nil
}

// refreshArms removes the nightly's A/B checkouts (work/a, work/b) when
// they hold another commit than tonight's (arms.commit = "head" after
// upstream moved), so that they are cloned afresh. A checkout with
// anything arpatch did not put there (edits, untracked files) is kept, and
// the error names it; ignored files (build products) go with the tree.
func refreshArms(work, commit string) error {
	for _, arm := range []string{"a", "b"} {
		dir := filepath.Join(work, arm)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		st, err := checkout.Status(dir, nil)
		if err != nil || st.State == nil || st.State.Commit == commit {
			continue // not ours, or already right: ABBuild decides
		}
		if !st.Clean() || len(st.Other) > 0 || len(st.Untracked) > 0 {
			return fmt.Errorf("%s holds commit %s with changes or files arpatch did not make; tonight needs %s. Move it away (the nightly re-clones it)", dir, githash.Hash(st.State.Commit).Short(), githash.Hash(commit).Short())
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	return nil
}
