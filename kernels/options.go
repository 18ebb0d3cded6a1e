package kernels

import (
	"path/filepath"
	"time"

	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/recipes"
)

// BuildOverrides are the settings laid over a recipe's [build] table by
// FromRecipe: `arpatch build`'s and `arpatch ab build`'s flags, or
// nightly.toml's [build]. A zero value keeps the recipe's.
type BuildOverrides struct {
	Archs   []string     // CUDA arch names, e.g. "120a"; nil: the recipe's archs
	Jobs    *int         // build parallelism; nil: the recipe's jobs (0 there: one per CPU core)
	Tool    recipes.Tool // recipes.ToolAuto, ToolUV or ToolPip; "": the recipe's tool ("" there is ToolAuto)
	DepsDir string       // pre-fetched dependencies; "": the recipe's deps_dir
	Offline bool         // true builds offline; false keeps the recipe's offline
	// CacheDir is the build cache; "": DefaultCacheDir.
	CacheDir string
	// Src, Out, Python, Env, Launcher and Version go to BuildOptions as
	// they are (the recipe has none of them).
	Src, Out, Python string
	Env, Launcher    []string
	Version          string
	// LockWait is BuildOptions.LockWait; nil: DefaultLockWait.
	LockWait *time.Duration
}

// FromRecipe turns a recipe's [build] table and the overrides into
// BuildOptions: the one place where a recipe becomes a build, for
// `arpatch build`, `arpatch ab build` and nightly alike, so that the same
// recipe and settings give the same options (and so the same cache key).
// Every path is made absolute, relative to the working directory: the
// build runs in the sgl-kernel project's directory. Errors name the
// setting (a *SettingError): "archs" for an arch cudaarch.Parse refuses
// (or none at all), "cache_dir" when there is no cache directory
// (DefaultCacheDir), the path's name when it cannot be made absolute.
func FromRecipe(rb recipes.Build, ov BuildOverrides) (BuildOptions, error) {
	list := ov.Archs
	if len(list) == 0 {
		list = rb.Archs
	}
	archs, err := cudaarch.Parse(list)
	if err != nil {
		return BuildOptions{}, &SettingError{"archs", err}
	}
	o := BuildOptions{Src: ov.Src, Archs: archs, Jobs: rb.Jobs, Tool: rb.Tool, Offline: rb.Offline || ov.Offline, DepsDir: rb.DepsDir,
		Python: ov.Python, Cache: Cache{Dir: ov.CacheDir}, Out: ov.Out, Env: ov.Env, Launcher: ov.Launcher, Version: ov.Version}
	if ov.Jobs != nil {
		o.Jobs = *ov.Jobs
	}
	o.LockWait = DefaultLockWait
	if ov.LockWait != nil {
		o.LockWait = *ov.LockWait
	}
	if ov.Tool != "" {
		o.Tool = ov.Tool
	}
	if ov.DepsDir != "" {
		o.DepsDir = ov.DepsDir
	}
	if o.Cache.Dir == "" {
		if o.Cache.Dir, err = DefaultCacheDir(); err != nil {
			return BuildOptions{}, &SettingError{"cache_dir", err}
		}
	}
	for _, p := range []struct {
		name string
		v    *string
	}{{"src", &o.Src}, {"cache_dir", &o.Cache.Dir}, {"out", &o.Out}, {"deps_dir", &o.DepsDir}} {
		if *p.v != "" {
			if *p.v, err = filepath.Abs(*p.v); err != nil {
				return BuildOptions{}, &SettingError{p.name, err}
			}
		}
	}
	return o, nil
}

// SettingError is a build setting FromRecipe cannot use. Setting is its
// name as a recipe's [build] spells it: archs, cache_dir, deps_dir, src,
// out.
type SettingError struct {
	Setting string
	Err     error
}

func (e *SettingError) Error() string { return e.Setting + ": " + e.Err.Error() }
func (e *SettingError) Unwrap() error { return e.Err }
