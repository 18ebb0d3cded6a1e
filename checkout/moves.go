package checkout

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/shellq"
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
	// Why says, per patch (in Fits order), what became of the files it
	// changes that the commit lacks (MoveWhy).
	Why []MoveWhy
	// Clean is set when a port of the series to the commit would be clean
	// (patches port writes a draft), though it does not fit as is.
	Clean bool
	lost  []error
}

// Verdict is VerdictMoved when every file was followed and every patch
// fits at the new paths (exactly or with offsets) and passes the gate rule
// there; VerdictError when only the gate rule refuses it; else the verdict
// of Fits.
func (m *Moved) Verdict() patches.SeriesVerdict {
	v := patches.Verdict(m.Fits)
	if len(m.Lost) == 0 && m.Err == nil && (v == patches.VerdictExact || v == patches.VerdictOffset) {
		return VerdictMoved
	}
	if m.Err != nil {
		return VerdictError
	}
	return v
}

// movesFor follows the files of ps that tree (at commit) lacks, from the
// last of the series' tested_on commits that repo holds. It returns nil
// when no file is missing or commit is older than tested_on; when the
// repository holds no tested_on commit (a shallow clone), a Moved whose
// Lost says so and what to do.
func movesFor(repo *gitsrc.Repo, s *patches.Series, ps []*patches.Patch, commit string, tree patches.Tree) *Moved {
	from := port.BaseCommit(repo, s)
	if from == commit {
		return nil
	}
	var moved map[string][]gitsrc.Rename
	var lost map[string]error
	if from == "" {
		noBase := port.NoBase(repo, s)
		moved, lost = map[string][]gitsrc.Rename{}, map[string]error{}
		for _, p := range ps {
			for _, fc := range p.Diff.Changes {
				if _, err := tree.ReadFile(fc.Path); fc.Op != patches.Create && errors.Is(err, fs.ErrNotExist) {
					lost[fc.Path] = fmt.Errorf("%s does not exist here, and %w", fc.Path, noBase)
				}
			}
		}
	} else {
		moved, lost = port.FollowMissing(repo, from, commit, ps, tree, nil)
	}
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
		why := WhyInPlace
		for _, fc := range p.Diff.Changes {
			if ms := moved[fc.Path]; len(ms) > 0 {
				if !seen[fc.Path] {
					m.Moves = append(m.Moves, ms...)
				}
				newPath[fc.Path] = ms[len(ms)-1].To
				if why == WhyInPlace {
					why = WhyMoved
				}
			}
			if err := lost[fc.Path]; err != nil {
				if !seen[fc.Path] {
					m.Lost = append(m.Lost, err.Error())
					m.lost = append(m.lost, err)
				}
				if why == WhyInPlace || why == WhyMoved {
					why = lostWhy(err)
				}
			}
			seen[fc.Path] = true
		}
		m.Why = append(m.Why, why)
	}
	atNew := remap(ps, newPath)
	m.Fits = patches.Check(tree, atNew)
	if v := patches.Verdict(m.Fits); v == patches.VerdictExact || v == patches.VerdictOffset {
		if _, err := patches.ApplyChecked(tree, atNew); err != nil {
			m.Err = err
		}
	} else if from != "" && len(lost) == 0 {
		// The hunks do not fit the new paths as they are: would a port
		// (three-way merge) give a clean draft?
		if rep, err := port.Run(port.Options{Repo: repo, Series: s, From: from, To: commit}); err == nil {
			m.Clean = rep.Clean
		}
	}
	return m
}

// lostWhy is the one-word reason a file could not be followed.
func lostWhy(err error) MoveWhy {
	var de *gitsrc.DeletedError
	var ae *gitsrc.AmbiguousError
	switch {
	case errors.As(err, &ae):
		return WhyAmbiguous
	case errors.As(err, &de):
		return WhyDeleted
	}
	return WhyNotFollowed
}

// MoveWhy is what became of the files a patch changes that a commit
// lacks: the one vocabulary of Moved.Why, which patches check prints.
type MoveWhy string

const (
	WhyInPlace     MoveWhy = ""             // the patch's files are all in place
	WhyMoved       MoveWhy = "moved"        // every missing file was followed to its new path
	WhyDeleted     MoveWhy = "deleted"      // deleted without a rename
	WhyAmbiguous   MoveWhy = "ambiguous"    // several identical files it may have gone to
	WhyNotFollowed MoveWhy = "not followed" // the history to follow it is not there to read
)

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
	for _, err := range m.lost {
		var am *port.AmbiguousMove
		if !errors.As(err, &am) {
			out = append(out, err.Error())
			continue
		}
		out = append(out, am.AmbiguousError.Error())
		out = append(out, "name the one the patch belongs to and port:")
		for _, c := range am.Candidates {
			out = append(out, "  "+port.Command(series, repo, commit, port.DraftDir(series, commit), patchesDir)+" --move "+shellq.Path(am.From())+"="+shellq.Path(c))
		}
	}
	var fits []string
	for _, f := range m.Fits {
		fits = append(fits, f.Patch+"="+f.Fit.String())
	}
	if len(m.Fits) > 0 && len(m.Moves) > 0 {
		out = append(out, "at the new paths: "+strings.Join(fits, " "))
	}
	if m.Err != nil {
		out = append(out, "there arpatch's gate rule refuses the series: "+m.Err.Error())
	}
	switch {
	case m.Verdict() == VerdictMoved:
		out = append(out, "write a series for this commit: "+port.Command(series, repo, commit, port.DraftDir(series, commit), patchesDir))
	case m.Clean:
		out = append(out, "the hunks do not fit the new paths as they are, but a port (three-way merge) is clean; write it with: "+port.Command(series, repo, commit, port.DraftDir(series, commit), patchesDir))
	case len(m.lost) == 0:
		out = append(out, "a port conflicts; see what with: "+port.Command(series, repo, commit, "", patchesDir))
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
