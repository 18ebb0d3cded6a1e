package checkout

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/patches"
)

// RevertOptions holds every input of Revert.
type RevertOptions struct {
	Src string
	// Catalog, when set, holds the series the state names, so that the
	// state is checked against it before it is trusted.
	Catalog *patches.Catalog
	// Force discards edits made to patched files since apply.
	Force  bool
	DryRun bool
}

// RevertReport says what Revert did.
type RevertReport struct {
	Src             string
	State           *State // nil when there was nothing to revert
	Restored        []string
	AlreadyUpstream []string    // files that held upstream's bytes already
	Discarded       []FileDrift // edits thrown away under --force
}

// removeTemps deletes temp files a killed apply left beside the files it
// was writing (".<name>.arpatch-*", see safefs).
func removeTemps(src string, st *State) {
	for _, f := range st.Files {
		dir := filepath.Join(src, filepath.Dir(filepath.FromSlash(f.Path)))
		m, _ := filepath.Glob(filepath.Join(dir, "."+filepath.Base(f.Path)+".arpatch-*"))
		for _, p := range m {
			_ = os.Remove(p) // a sweep: one that stays is swept next time
		}
	}
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
	if !opts.DryRun {
		unlock, err := lock(gitDir)
		if err != nil {
			return nil, err
		}
		defer unlock()
		removeStrayTemps(gitDir)
	}
	st, err := readTrusted(repo, opts.Src, opts.Catalog)
	if err != nil || st == nil {
		return rep, err
	}
	rep.State = st
	head, err := repo.Head()
	if err != nil {
		return nil, err
	}
	// A state that patched no file is forgotten at any commit: nothing
	// is restored, and the commit it names matters to no byte.
	if head != st.Commit && len(st.Files) > 0 {
		return nil, movedHead(opts.Src, head, st, "revert")
	}
	root := safefs.Root{Dir: opts.Src}
	drift, err := st.drift(root)
	if err != nil {
		return nil, err
	}
	upstream := map[string]bool{}
	for _, d := range drift {
		if d.Upstream {
			upstream[d.Path] = true
		}
	}
	// Files of an interrupted apply may hold either side; only other
	// bytes are edits.
	lost := edits(drift)
	if len(lost) > 0 && !opts.Force {
		return nil, lostEditsError(opts.Src, lost)
	}
	rep.Discarded = lost
	tree, err := repo.TreeAt(st.Commit)
	if err != nil {
		return nil, err
	}
	writes, err := restores(tree, st, upstream, rep)
	if err != nil {
		return nil, err
	}
	if opts.DryRun {
		return rep, nil
	}
	// Journal: the state says "reverting" while files are restored, so a
	// revert killed part way is reported by status and finished by the
	// next revert (files already restored hold upstream's bytes, which
	// are never taken for edits).
	st.Reverting = true
	if err := writeState(gitDir, st); err != nil {
		return nil, fmt.Errorf("recording the revert in %s: %w; nothing was changed", StatePath(gitDir), err)
	}
	if err := root.Write(writes); err != nil {
		return nil, fmt.Errorf("restoring upstream files: %w; run `%s` again to finish", err, sh("arpatch", "revert", "--src", opts.Src))
	}
	removeTemps(opts.Src, st)
	if err := removeState(gitDir); err != nil {
		return nil, fmt.Errorf("files restored, but removing %s failed: %w", StatePath(gitDir), err)
	}
	return rep, nil
}

// lostEditsError refuses a revert that would lose the edits lost (files
// changed since apply), saying how to keep them and how to go on.
func lostEditsError(src string, lost []FileDrift) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: files changed since apply, and revert would lose those edits:", src)
	for _, d := range lost {
		b.WriteString("\n  " + d.String())
	}
	fmt.Fprintf(&b, "\nnothing was changed. To keep your edits, save the tree's diff first (`%s > my.diff`: it holds the series' changes as well as yours, so take your lines from it after the revert), then run `%s`", sh("git", "-C", src, "diff"), sh("arpatch", "revert", "--src", src, "--force"))
	return errors.New(b.String())
}

// restores are the writes that put each file st records back to its bytes
// in tree (upstream's commit; nil for a file the commit does not hold),
// in reverse patch order, the opposite of apply's. Each file goes into
// rep.AlreadyUpstream when upstream says it holds them already, else into
// rep.Restored.
func restores(tree *gitsrc.CommitTree, st *State, upstream map[string]bool, rep *RevertReport) ([]safefs.Change, error) {
	var writes []safefs.Change
	for _, f := range st.Files {
		data, err := tree.ReadFile(f.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			data = nil
		case err != nil:
			return nil, err
		}
		if upstream[f.Path] {
			rep.AlreadyUpstream = append(rep.AlreadyUpstream, f.Path)
		} else {
			rep.Restored = append(rep.Restored, f.Path)
		}
		c := safefs.Change{Path: f.Path, Data: data}
		if data != nil {
			c.Mode = gitMode(tree.Mode(f.Path))
		}
		writes = append(writes, c)
	}
	for i, j := 0, len(writes)-1; i < j; i, j = i+1, j-1 {
		writes[i], writes[j] = writes[j], writes[i]
	}
	return writes, nil
}
