package gitsrc

import (
	"cmp"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing/filemode"
)

// IndexBlobs returns, per path, the blob id (hex) the index holds for
// each regular or executable file at stage 0 that git status compares
// with the work tree: skip-worktree and intent-to-add entries are left
// out (status does not look at the first's file, the second has no blob
// yet), and so is everything when MayConvert, since the work tree's bytes
// then need not be the blob's. A file that Changes does not list is then
// byte for byte its blob (what git status trusts, by stat data or by
// content). The error is reading the index or the config.
func (r *Repo) IndexBlobs() (map[string]string, error) {
	conv, err := r.MayConvert()
	if err != nil || conv {
		return map[string]string{}, err
	}
	idx, err := r.index()
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(idx.Entries))
	for _, e := range idx.Entries {
		if e.Stage != 0 || e.SkipWorktree || e.IntentToAdd {
			continue
		}
		if e.Mode == filemode.Regular || e.Mode == filemode.Executable {
			out[e.Name] = e.Hash.String()
		}
	}
	return out, nil
}

// MayConvert reports whether git may write a file of this checkout with
// other bytes than its blob's: core.autocrlf is true or input (any
// scope), or some attributes file exists that could ask for a conversion
// (eol, text, ident, filter, working-tree-encoding): a tracked
// .gitattributes, $GIT_DIR/info/attributes, core.attributesFile or its
// default $XDG_CONFIG_HOME/git/attributes ($HOME/.config/git/attributes),
// or /etc/gitattributes. It does not read the attributes: their
// existence is enough to stop trusting blob ids for the work tree.
// Upstream: git's Documentation/gitattributes.txt and config/core.txt (core.autocrlf, core.attributesFile).
func (r *Repo) MayConvert() (bool, error) {
	cfg, err := r.r.ConfigScoped(config.SystemScope)
	if err != nil {
		return false, err
	}
	core := cfg.Raw.Section("core")
	switch strings.ToLower(core.Option("autocrlf")) {
	case "true", "input", "yes", "on", "1":
		return true, nil
	}
	home, _ := os.UserHomeDir()
	xdg := cmp.Or(os.Getenv("XDG_CONFIG_HOME"), filepath.Join(home, ".config"))
	attrs := []string{filepath.Join(r.GitDir(), "info", "attributes"), "/etc/gitattributes", filepath.Join(xdg, "git", "attributes")}
	if f := core.Option("attributesfile"); f != "" {
		if strings.HasPrefix(f, "~/") {
			f = filepath.Join(home, f[2:])
		}
		attrs = append(attrs, f)
	}
	for _, f := range attrs {
		if _, err := os.Stat(f); err == nil {
			return true, nil
		}
	}
	paths, err := r.TrackedPaths()
	if err != nil {
		return false, err
	}
	for _, p := range paths {
		if path.Base(p) == ".gitattributes" {
			return true, nil
		}
	}
	return false, nil
}
