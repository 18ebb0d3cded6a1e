// Package sglkernel finds the sgl-kernel project in an SGLang tree: the one
// place that knows how to tell where upstream keeps it. Every caller that
// needs a path inside sgl-kernel (the wheel build, --check, the allreduce
// extension, the cache key, the FetchContent scan, status's untracked-file
// and skip-worktree guards, nightly's arch check) asks Find, InCheckout or
// AtCommit and joins paths onto Project.Dir. It does not build or judge
// anything.
//
// The location is read from the tree, never from a date or a list of
// commits: the project is the directory that holds the custom allreduce
// translation unit (AllreduceTU) next to a CMakeLists.txt and a
// pyproject.toml built by scikit-build-core whose
// [project] name is sglang-kernel (or sgl-kernel, its name before 0.4.0).
//
// Upstream facts it rests on:
//   - build-backend "scikit_build_core.build", name "sglang-kernel",
//     wheel.packages ["python/sgl_kernel"]; CMakeLists.txt, Makefile and
//     cmake/utils.cmake beside it. Upstream: sgl-kernel/pyproject.toml@84118acf50b3
//     ([build-system] build-backend, [project] name,
//     [tool.scikit-build] wheel.packages), also at 8905cbd42f4a.
//   - The same project, moved whole on 2026-07-29 by c32c4ef79cf5 ("Move
//     sgl-kernel under sglang.kernels.aot"); the import sgl_kernel is
//     kept. Upstream: python/sglang/kernels/aot/pyproject.toml@c32c4ef79cf5
//     ([project] name, [tool.scikit-build] wheel.packages), also at
//     0bda0b168ad5.
//   - The distribution was sgl-kernel before 2026-03-16. Upstream:
//     sgl-kernel/pyproject.toml@15097c5c3b52 ([project] name: "sglang-kernel",
//     "sgl-kernel" at its parent; "Release sglang kernel 0.4.0").
package sglkernel

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
)

// AllreduceTU is the custom allreduce translation unit, relative to the
// project directory; the project is found by it.
const AllreduceTU = "csrc/allreduce/custom_all_reduce.cu"

// Names are the distribution names the project has had (pyproject.toml
// [project] name, PEP 503-normalized).
var Names = []string{"sglang-kernel", "sgl-kernel"}

const backend = "scikit_build_core.build"

// Project is the sgl-kernel CMake project of one tree.
type Project struct {
	// Dir is the project directory, a slash path relative to the tree's
	// root: "sgl-kernel" (up to 2026-07-28) or "python/sglang/kernels/aot".
	Dir string `json:"dir"`
	// Name is pyproject.toml's [project] name, e.g. "sglang-kernel".
	Name string `json:"name"`
	// Packages are the directories the wheel packages whole
	// ([tool.scikit-build] wheel.packages), relative to the tree's root,
	// e.g. "sgl-kernel/python/sgl_kernel". When pyproject.toml names none,
	// the project's python/ directory.
	Packages []string `json:"packages"`
}

// Path joins slash path rel onto the project directory, relative to the
// tree's root: Path("CMakeLists.txt") is "sgl-kernel/CMakeLists.txt".
func (p Project) Path(rel string) string { return path.Join(p.Dir, rel) }

// Prefix is Dir with a trailing slash, for matching the paths under it;
// "" for a project at the tree's root, which every path is under.
func (p Project) Prefix() string {
	if p.Dir == "." {
		return ""
	}
	return p.Dir + "/"
}

// String is Dir with a trailing slash, as messages show it:
// "python/sglang/kernels/aot/", or "./" at the tree's root.
func (p Project) String() string { return p.Dir + "/" }

// AllreduceTU returns the allreduce translation unit's path relative to
// the tree's root.
func (p Project) AllreduceTU() string { return p.Path(AllreduceTU) }

// Files reads a tree's files by slash path relative to its root.
type Files interface {
	ReadFile(name string) ([]byte, error)
}

// NotFoundError is a tree with no sgl-kernel project, or with more than
// one. Its message names what was looked for, each near miss and a remedy.
type NotFoundError struct {
	Tree   string   // the checkout directory or "<repo> at <commit>"
	Found  []string // project directories, when more than one
	Misses []string // directories that hold the translation unit but are not the project, with why
}

func (e *NotFoundError) Error() string {
	var b strings.Builder
	if len(e.Found) > 1 {
		fmt.Fprintf(&b, "%s holds %d sgl-kernel projects (%s/); arpatch builds one and will not guess which. Use an upstream SGLang tree (arpatch apply clones one at the recipe's commit)", e.Tree, len(e.Found), strings.Join(e.Found, "/, "))
		return b.String()
	}
	fmt.Fprintf(&b, "%s has no sgl-kernel project: looked for a directory holding %s, CMakeLists.txt and a pyproject.toml built by scikit-build-core with [project] name %s (upstream keeps it in sgl-kernel/ up to 2026-07-28 and in python/sglang/kernels/aot/ since c32c4ef79cf5)",
		e.Tree, AllreduceTU, strings.Join(Names, " or "))
	for _, m := range e.Misses {
		fmt.Fprintf(&b, "; %s", m)
	}
	b.WriteString(". Point --src at an SGLang checkout (arpatch apply clones one)")
	return b.String()
}

// Find locates the project among paths (every file of the tree, slash
// paths relative to its root), reading pyproject.toml through files. tree
// names the tree in errors. It returns a *NotFoundError when no directory,
// or more than one, qualifies.
func Find(tree string, paths []string, files Files) (Project, error) {
	have := make(map[string]bool, len(paths))
	for _, p := range paths {
		have[p] = true
	}
	return findIn(tree, have, files)
}

// findIn is Find over the set of paths (those mapped to true); the result
// does not depend on the order they are visited in (projects and misses
// are sorted).
func findIn(tree string, have map[string]bool, files Files) (Project, error) {
	var found []Project
	nf := &NotFoundError{Tree: tree}
	for p, ok := range have {
		if !ok {
			continue
		}
		dir, ok := strings.CutSuffix(p, "/"+AllreduceTU)
		if !ok {
			if p != AllreduceTU {
				continue
			}
			dir = "."
		}
		proj, why := qualify(dir, have, files)
		if why != "" {
			nf.Misses = append(nf.Misses, why)
			continue
		}
		found = append(found, proj)
	}
	sort.Slice(found, func(i, j int) bool { return found[i].Dir < found[j].Dir })
	sort.Strings(nf.Misses)
	if len(found) == 1 {
		return found[0], nil
	}
	for _, f := range found {
		nf.Found = append(nf.Found, f.Dir)
	}
	return Project{}, nf
}

// qualify checks that dir is the project, or says why not.
func qualify(dir string, have map[string]bool, files Files) (Project, string) {
	at := func(rel string) string { return path.Join(dir, rel) }
	if !have[at("CMakeLists.txt")] {
		return Project{}, fmt.Sprintf("%s/ holds %s but no CMakeLists.txt", dir, AllreduceTU)
	}
	if !have[at("pyproject.toml")] {
		return Project{}, fmt.Sprintf("%s/ holds %s but no pyproject.toml", dir, AllreduceTU)
	}
	b, err := files.ReadFile(at("pyproject.toml"))
	if err != nil {
		return Project{}, fmt.Sprintf("%s: %v", at("pyproject.toml"), err)
	}
	var pp struct {
		BuildSystem struct {
			BuildBackend string `toml:"build-backend"`
		} `toml:"build-system"`
		Project struct {
			Name string `toml:"name"`
		} `toml:"project"`
		Tool struct {
			ScikitBuild struct {
				Wheel struct {
					Packages []string `toml:"packages"`
				} `toml:"wheel"`
			} `toml:"scikit-build"`
		} `toml:"tool"`
	}
	if _, err := toml.Decode(string(b), &pp); err != nil {
		return Project{}, fmt.Sprintf("%s: %v", at("pyproject.toml"), err)
	}
	name := normalize(pp.Project.Name)
	known := false
	for _, n := range Names {
		known = known || name == n
	}
	switch {
	case !known:
		return Project{}, fmt.Sprintf("%s names project %q", at("pyproject.toml"), pp.Project.Name)
	case pp.BuildSystem.BuildBackend != backend:
		return Project{}, fmt.Sprintf("%s builds with %q, not %s", at("pyproject.toml"), pp.BuildSystem.BuildBackend, backend)
	}
	p := Project{Dir: dir, Name: name}
	for _, pk := range pp.Tool.ScikitBuild.Wheel.Packages {
		p.Packages = append(p.Packages, at(pk))
	}
	if len(p.Packages) == 0 {
		p.Packages = []string{at("python")}
	}
	return p, ""
}

// normalize is PEP 503's name normalization: lower case, runs of -_. as -.
func normalize(s string) string {
	s = strings.ToLower(s)
	var b strings.Builder
	dash := false
	for _, r := range s {
		if r == '-' || r == '_' || r == '.' {
			dash = true
			continue
		}
		if dash && b.Len() > 0 {
			b.WriteByte('-')
		}
		dash = false
		b.WriteRune(r)
	}
	return b.String()
}

// InCheckout locates the project in the checkout at src, among the files
// git tracks (what upstream ships; a build directory or other untracked
// copy does not count), reading pyproject.toml from the work tree. A
// directory that is not a git checkout is walked instead (a slim copy of
// the kernel sources, for --check), skipping hidden directories. Errors:
// the directory is unreadable, or a *NotFoundError.
func InCheckout(src string) (Project, error) {
	var paths []string
	if _, err := os.Lstat(filepath.Join(src, ".git")); err == nil {
		repo, err := gitsrc.Open(src)
		if err != nil {
			return Project{}, err
		}
		tracked, err := repo.Tracked()
		if err != nil {
			return Project{}, err
		}
		return InTracked(src, tracked)
	} else {
		err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && p != src && strings.HasPrefix(d.Name(), ".") {
				return fs.SkipDir
			}
			if d.Type().IsRegular() {
				rel, _ := filepath.Rel(src, p)
				paths = append(paths, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			return Project{}, fmt.Errorf("--src %s: %w", src, err)
		}
	}
	sort.Strings(paths)
	return Find(src, paths, dirFiles(src))
}

// InTracked is InCheckout for a caller that has read the checkout's index
// already: tracked holds the paths git tracks (gitsrc.Repo.Tracked).
func InTracked(src string, tracked map[string]bool) (Project, error) {
	return findIn(src, tracked, dirFiles(src))
}

type dirFiles string

func (d dirFiles) ReadFile(name string) ([]byte, error) {
	return os.ReadFile(filepath.Join(string(d), filepath.FromSlash(name)))
}

// AtCommit locates the project in one commit of a repository, from its
// object store. Errors: the tree cannot be read, or a *NotFoundError.
func AtCommit(t *gitsrc.CommitTree) (Project, error) {
	paths, err := t.Paths()
	if err != nil {
		return Project{}, err
	}
	return Find("commit "+githash.Hash(t.Commit).Short(), paths, t)
}

// IsNotFound reports whether err says a tree has no single sgl-kernel
// project.
func IsNotFound(err error) bool {
	var nf *NotFoundError
	return errors.As(err, &nf)
}
