// Package testrepo makes small fixture git repositories for arpatch's
// tests, with go-git and fixed author and time, so the same files always
// give the same commit hash. Fixtures are trees the tests write, shaped
// like upstream SGLang; they never hold upstream code.
package testrepo

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
)

var sig = &object.Signature{Name: "arpatch fixture", Email: "fixture@arpatch.invalid", When: time.Date(2026, 4, 3, 12, 0, 0, 0, time.UTC)}

// Init makes dir (with the files already in it) a git repository and
// commits everything. It returns the 40-hex commit.
func Init(dir string) (string, error) {
	if _, err := git.PlainInit(dir, false); err != nil {
		return "", err
	}
	return Commit(dir, "fixture: initial tree")
}

// Commit stages every change in dir (additions, edits, deletions) and
// commits it, returning the 40-hex commit.
func Commit(dir, msg string) (string, error) {
	r, err := git.PlainOpen(dir)
	if err != nil {
		return "", err
	}
	w, err := r.Worktree()
	if err != nil {
		return "", err
	}
	if err := w.AddWithOptions(&git.AddOptions{All: true}); err != nil {
		return "", err
	}
	h, err := w.Commit(msg, &git.CommitOptions{Author: sig, Committer: sig, AllowEmptyCommits: true})
	if err != nil {
		return "", err
	}
	return h.String(), nil
}

// WriteFiles writes files (slash paths relative to dir) with their
// contents, creating directories.
func WriteFiles(dir string, files map[string]string) error {
	for p, c := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Change writes files into dir (content "" removes the file) and commits
// everything as Commit does, returning the 40-hex commit.
func Change(dir, msg string, files map[string]string) (string, error) {
	write := map[string]string{}
	for p, c := range files {
		if c == "" {
			if err := os.Remove(filepath.Join(dir, filepath.FromSlash(p))); err != nil {
				return "", err
			}
			continue
		}
		write[p] = c
	}
	if err := WriteFiles(dir, write); err != nil {
		return "", err
	}
	return Commit(dir, msg)
}

// KernelPyproject is a pyproject.toml shaped like upstream's sgl-kernel
// project's (sgl-kernel/ and, from 2026-07-29, python/sglang/kernels/aot/):
// built by scikit-build-core, distribution sglang-kernel, wheel package
// python/sgl_kernel. A fixture tree needs it next to CMakeLists.txt and
// csrc/allreduce/custom_all_reduce.cu for arpatch to find its project.
const KernelPyproject = `[build-system]
requires = ["scikit-build-core>=0.10", "torch>=2.8.0", "wheel"]
build-backend = "scikit_build_core.build"

[project]
name = "sglang-kernel"
version = "0.4.1"

[tool.scikit-build]
cmake.build-type = "Release"
wheel.packages = ["python/sgl_kernel"]
`

// RandomEdit returns a copy of lines with one to three random edits: a
// line replaced, a line inserted or a line deleted. New lines carry tag
// and a random number, so they are unique and any two correct line diffs
// of the result agree (differential tests against git rely on it).
func RandomEdit(rng *rand.Rand, lines []string, tag string) []string {
	out := slices.Clone(lines)
	for n := 1 + rng.Intn(3); n > 0; n-- {
		if len(out) == 0 {
			out = append(out, fmt.Sprintf("%s only %d\n", tag, rng.Int()))
			continue
		}
		at := rng.Intn(len(out))
		switch rng.Intn(3) {
		case 0:
			out[at] = fmt.Sprintf("%s changed %d\n", tag, rng.Int())
		case 1:
			out = slices.Insert(out, at, fmt.Sprintf("%s inserted %d\n", tag, rng.Int()))
		default:
			out = slices.Delete(out, at, at+1)
		}
	}
	return out
}
