package checkout

import (
	"errors"
	"fmt"
	"strings"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/patches/port"
)

// Moved is what rename-aware drift found for one series at one commit:
// files its patches change that the commit lacks, followed from the
// series' tested_on commit through history (gitsrc.Follow), and how the
// patches fit with those files at their new paths.
type Moved struct {
	Moves []gitsrc.Rename
	// Fits says how each patch fits with its files at the new paths.
	Fits []patches.PatchFit
	// Lost lists files that could not be followed (deleted without a
	// rename, or history that does not lead from tested_on to here).
	Lost []string
	// Err is the built-in effect rule's refusal of the series at the new
	// paths (patches.ApplyChecked), when it fits there otherwise.
	Err error
}

// Verdict is "moved" when every file was followed and every patch fits at
// the new paths (exactly or with offsets) and passes the gate rule there;
// "error" when only the gate rule refuses it; else the verdict of Fits.
func (m *Moved) Verdict() string {
	v := patches.Verdict(m.Fits)
	if len(m.Lost) == 0 && m.Err == nil && (v == "exact" || v == "offset") {
		return "moved"
	}
	if m.Err != nil {
		return "error"
	}
	return v
}

// movesFor follows the files of ps that tree (at commit) lacks, from the
// last of the series' tested_on commits that repo holds. It returns nil
// when no file is missing or the repository holds no tested_on commit.
func movesFor(repo *gitsrc.Repo, s *patches.Series, ps []*patches.Patch, commit string, tree patches.Tree) *Moved {
	from := port.BaseCommit(repo, s)
	if from == "" || from == commit {
		return nil
	}
	moved, lost := port.FollowMissing(repo, from, commit, ps, tree)
	for _, err := range lost {
		var na *gitsrc.NotAncestorError
		if errors.As(err, &na) {
			return nil // an older commit: nothing moved on the way to it
		}
	}
	if len(moved) == 0 && len(lost) == 0 {
		return nil
	}
	m := &Moved{}
	newPath := map[string]string{}
	seen := map[string]bool{}
	for _, p := range ps {
		for _, fc := range p.Diff.Changes {
			if seen[fc.Path] {
				continue
			}
			seen[fc.Path] = true
			if ms := moved[fc.Path]; len(ms) > 0 {
				m.Moves = append(m.Moves, ms...)
				newPath[fc.Path] = ms[len(ms)-1].To
			}
			if err := lost[fc.Path]; err != nil {
				m.Lost = append(m.Lost, err.Error())
			}
		}
	}
	atNew := remap(ps, newPath)
	m.Fits = patches.Check(tree, atNew)
	if v := patches.Verdict(m.Fits); v == "exact" || v == "offset" {
		if _, err := patches.ApplyChecked(tree, atNew); err != nil {
			m.Err = err
		}
	}
	return m
}

// remap returns copies of ps whose file changes name the new paths.
func remap(ps []*patches.Patch, newPath map[string]string) []*patches.Patch {
	out := make([]*patches.Patch, len(ps))
	for i, p := range ps {
		c := *p
		d := *p.Diff
		d.Changes = nil
		for _, fc := range p.Diff.Changes {
			f := *fc
			if np := newPath[fc.Path]; np != "" {
				f.Path = np
			}
			d.Changes = append(d.Changes, &f)
		}
		c.Diff = &d
		out[i] = &c
	}
	return out
}

// Explain says, in lines, where the files went and how each patch fits
// there, and the command that writes a series for the commit (patchesDir:
// the --patches-dir of the series, "" for the embedded ones).
func (m *Moved) Explain(series, repo, commit, patchesDir string) []string {
	var out []string
	for _, mv := range m.Moves {
		out = append(out, fmt.Sprintf("%s %s (%q)", mv.From, mv, mv.Subject))
	}
	out = append(out, m.Lost...)
	var fits []string
	for _, f := range m.Fits {
		fits = append(fits, f.Patch+"="+f.Fit.String())
	}
	if len(m.Fits) > 0 {
		out = append(out, "at the new paths: "+strings.Join(fits, " "))
	}
	if m.Err != nil {
		out = append(out, "there arpatch's gate rule refuses the series: "+m.Err.Error())
	}
	if m.Verdict() == "moved" {
		out = append(out, "write a series for this commit: "+port.Command(series, repo, commit, port.DraftDir(series, commit), patchesDir))
	}
	return out
}

// explainMoves adds to a refusal, for each candidate series whose files
// moved since its tested_on commit, where they went, how the patches fit
// there and the `arpatch patches port` command that writes a series for
// head from the checkout's own history.
func explainMoves(e *patches.NoSeriesError, cat *patches.Catalog, repo *gitsrc.Repo, src, head string) {
	tree, err := repo.TreeAt(head)
	if err != nil {
		return
	}
	for _, s := range cat.Members(e.Want) {
		ps, err := s.Load(nil)
		if err != nil {
			continue
		}
		if m := movesFor(repo, s, ps, head, tree); m != nil {
			for _, l := range m.Explain(s.Name, src, head, cat.Dir) {
				e.Details = append(e.Details, s.Name+": "+l)
			}
		}
	}
}
