package checkout

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/safefs"
)

// RevertOptions holds every input of Revert.
type RevertOptions struct {
	Src string
	// Force discards edits made to patched files since apply.
	Force  bool
	DryRun bool
}

// RevertReport says what Revert did.
type RevertReport struct {
	Src       string
	State     *State // nil when there was nothing to revert
	Restored  []string
	Discarded []FileDrift // edits thrown away under --force
}

// Revert puts every file the recorded apply changed back to the exact
// bytes of the upstream commit, read from git's object store, and removes
// the apply state. It refuses, changing nothing, when the checkout moved
// to another commit or when patched files were edited since apply (unless
// opts.Force), and checks each restored file against the sha256 apply
// recorded. A checkout with no state is reported, not an error.
func Revert(opts RevertOptions) (*RevertReport, error) {
	rep := &RevertReport{Src: opts.Src}
	repo, err := gitsrc.Open(opts.Src)
	if err != nil {
		return nil, err
	}
	gitDir := repo.GitDir()
	st, err := ReadState(gitDir)
	if err != nil || st == nil {
		return rep, err
	}
	rep.State = st
	head, err := repo.Head()
	if err != nil {
		return nil, err
	}
	if head != st.Commit {
		return nil, fmt.Errorf("%s is at commit %s, but the series was applied at %s; check that commit out again (git -C %s checkout --detach %s), then revert",
			opts.Src, head, st.Commit, opts.Src, st.Commit)
	}
	if !opts.DryRun {
		unlock, err := lock(gitDir)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	root := safefs.Root{Dir: opts.Src}
	drift, err := st.drift(root)
	if err != nil {
		return nil, err
	}
	if len(drift) > 0 && !opts.Force {
		var b strings.Builder
		fmt.Fprintf(&b, "%s: files changed since apply, and revert would lose those edits:", opts.Src)
		for _, d := range drift {
			b.WriteString("\n  " + d.String())
		}
		fmt.Fprintf(&b, "\nnothing was changed. Save your edits (git -C %s diff > my.diff), then run `arpatch revert --src %s --force`", opts.Src, opts.Src)
		return nil, errors.New(b.String())
	}
	rep.Discarded = drift
	tree, err := repo.TreeAt(st.Commit)
	if err != nil {
		return nil, err
	}
	var writes []safefs.Change
	for _, f := range st.Files {
		data, err := tree.ReadFile(f.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			data = nil
		case err != nil:
			return nil, err
		}
		if sum(data) != f.Before {
			return nil, fmt.Errorf("%s at %s has sha256 %q, but apply recorded %q before patching; the state does not match this commit, nothing was changed",
				f.Path, st.Commit, sum(data), f.Before)
		}
		writes = append(writes, safefs.Change{Path: f.Path, Data: data, Mode: gitMode(tree.Mode(f.Path))})
		rep.Restored = append(rep.Restored, f.Path)
	}
	if opts.DryRun {
		return rep, nil
	}
	if err := root.Write(writes); err != nil {
		return nil, fmt.Errorf("restoring upstream files: %w", err)
	}
	if err := removeState(gitDir); err != nil {
		return nil, fmt.Errorf("files restored, but removing %s failed: %w", StatePath(gitDir), err)
	}
	return rep, nil
}
