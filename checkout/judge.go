package checkout

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sort"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/patches"
)

// readTrusted is the one judgement of a checkout's apply state that
// status, apply and revert share. It reads the state (ReadState checks it
// against itself), then against the upstream commit it names (each
// file's before-sha256 must be that commit's blob, and the commit must
// exist), and, when cat holds the series it names with the same patch
// hashes, against the series: applying those patches to that commit must
// change exactly the files it lists, with the same ops and sha256s. It
// returns (nil, nil) when there is no state, and a *StateError naming src
// in its remedy when the state cannot be trusted.
func readTrusted(repo *gitsrc.Repo, src string, cat *patches.Catalog) (*State, error) {
	st, err := judgeState(repo, src, cat)
	var se *StateError
	if errors.As(err, &se) && se.Schema == 0 {
		se.Restore, se.Remove = damagedFiles(repo, cat)
	}
	return st, err
}

// damagedFiles names the files a damaged state's remedy puts back
// (Restore, tracked) or deletes (Remove, created by apply): the files
// git status shows changed that the state (read as far as it parses,
// unchecked) or the series it names lists; when neither lists any, every
// changed tracked file. Untracked files are removed only when named.
// When git status cannot be read, the named files, by the state's ops.
func damagedFiles(repo *gitsrc.Repo, cat *patches.Catalog) (restore, remove []string) {
	named := map[string]bool{}
	created := map[string]bool{}
	var raw State
	if b, err := os.ReadFile(StatePath(repo.GitDir())); err == nil {
		_ = json.Unmarshal(b, &raw) // as far as it parses
	}
	for _, f := range raw.Files {
		if _, err := patches.CleanPath(f.Path); err == nil {
			named[f.Path] = true
			created[f.Path] = f.Op == "create"
		}
	}
	if cat != nil && raw.Series != "" {
		if s, err := cat.Get(raw.Series); err == nil {
			if ps, err := s.Load(nil); err == nil {
				for _, p := range ps {
					for _, fc := range p.Diff.Changes {
						named[fc.Path] = true
					}
				}
			}
		}
	}
	changes, err := repo.Changes()
	if err != nil {
		for f := range named {
			if created[f] {
				remove = append(remove, f)
			} else {
				restore = append(restore, f)
			}
		}
		sort.Strings(restore)
		sort.Strings(remove)
		return restore, remove
	}
	for _, c := range changes {
		switch {
		case c.Untracked():
			if named[c.Path] {
				remove = append(remove, c.Path)
			}
		case len(named) == 0 || named[c.Path]:
			restore = append(restore, c.Path)
		}
	}
	sort.Strings(restore)
	sort.Strings(remove)
	return restore, remove
}

// judgeState is readTrusted without the remedy's file list.
func judgeState(repo *gitsrc.Repo, src string, cat *patches.Catalog) (*State, error) {
	st, err := ReadState(repo.GitDir())
	var se *StateError
	if errors.As(err, &se) {
		se.Src = src
	}
	if err != nil || st == nil {
		return nil, err
	}
	damaged := func(format string, args ...any) error {
		return &StateError{File: StatePath(repo.GitDir()), Src: src, Problem: fmt.Sprintf(format, args...)}
	}
	tree, err := repo.TreeAt(st.Commit)
	if err != nil {
		return nil, damaged("it names commit %s, which this repository does not have (%v)", st.Commit, err)
	}
	for _, f := range st.Files {
		data, err := tree.ReadFile(f.Path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		if errors.Is(err, fs.ErrNotExist) {
			data = nil
		}
		if got := sum(data); got != f.Before {
			return nil, damaged("%s at commit %s has sha256 %q, but the state says %q before apply", f.Path, githash.Hash(st.Commit).Short(), got, f.Before)
		}
	}
	ps := statePatches(st, cat)
	if ps == nil {
		return st, nil
	}
	res, err := patches.Apply(tree, ps)
	if err != nil {
		return nil, damaged("its patches (series %s) do not apply to commit %s: %v", st.Series, githash.Hash(st.Commit).Short(), err)
	}
	want := fileStates(res, ps)
	if !slices.Equal(want, st.Files) {
		return nil, damaged("it lists %s, but series %s at commit %s changes %s", fileList(st.Files), st.Series, githash.Hash(st.Commit).Short(), fileList(want))
	}
	return st, nil
}

// statePatches returns the patches the state names, from cat's copy of
// its series, when every one is there with the recorded sha256; else nil
// (the series changed or is elsewhere: the digest alone vouches).
func statePatches(st *State, cat *patches.Catalog) []*patches.Patch {
	if cat == nil || st.Series == "" || len(st.Patches) == 0 {
		return nil
	}
	s, err := cat.Get(st.Series)
	if err != nil {
		return nil
	}
	var skip []string
	for _, e := range s.Patches {
		if !slices.ContainsFunc(st.Patches, func(p PatchState) bool { return p.Name == e.File }) {
			skip = append(skip, e.File)
		}
	}
	ps, err := s.Load(skip)
	if err != nil || len(ps) != len(st.Patches) {
		return nil
	}
	for i, p := range ps {
		if p.Name != st.Patches[i].Name || p.SHA256 != st.Patches[i].SHA256 {
			return nil
		}
	}
	return ps
}

// fileStates lists a result's files as the state records them, in patch
// order.
func fileStates(res *patches.Result, ps []*patches.Patch) []FileState {
	out := []FileState{}
	for _, f := range inPatchOrder(res, ps) {
		fs := FileState{Path: f.Path, Op: f.Op.String(), Before: sum(f.Before), After: sum(f.After)}
		if f.OldMode != "" {
			fs.OldMode, fs.Mode = f.OldMode, f.Mode
		}
		out = append(out, fs)
	}
	return out
}

func fileList(fs []FileState) string {
	if len(fs) == 0 {
		return "no files"
	}
	s := ""
	for i, f := range fs {
		if i > 0 {
			s += ", "
		}
		s += f.Op + " " + f.Path
	}
	return s
}
