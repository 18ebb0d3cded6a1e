// Package gitdir makes a git directory with only what git and go-git
// need to read it as a repository: objects/, refs/, HEAD and config.
// git's own `git init` and go-git's PlainInit add objects/info,
// objects/pack, refs/heads and refs/tags, empty (and git a template's
// hooks, info/exclude and description); both make a directory when they
// first write a file there, so the empty ones only cost an inode each at
// every clone and fixture. It does not copy objects or write refs
// (internal/gitsrc's clone and internal/testrepo do).
//
// Upstream: git/git setup.c@v2.39.5 (is_git_directory: HEAD, objects/
// and refs/ are what make a repository); go-git/go-git
// storage/filesystem/dotgit/dotgit.go@v5.19.3 (DotGit.Initialize) and
// go-git/go-billy osfs/os.go@v5.9.2 (openFile, creating a file's
// directory on O_CREATE), the versions in go.mod.
package gitdir

import (
	"os"
	"path/filepath"

	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
)

// Create makes the git directory dir (and its parents) with empty
// objects/ and refs/, HEAD pointing at refs/heads/master (unborn, as
// go-git's PlainInit leaves it) and config holding cfg (nil: a new
// config), with core.bare false: the git directory of a repository with a
// work tree. It returns the error making a directory, marshalling cfg or
// writing a file.
func Create(dir string, cfg *config.Config) error {
	if cfg == nil {
		cfg = config.NewConfig()
	}
	cfg.Core.IsBare = false
	b, err := cfg.Marshal()
	if err != nil {
		return err
	}
	for _, d := range []string{"objects", "refs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "HEAD"), []byte("ref: "+plumbing.Master+"\n"), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config"), b, 0o644)
}
