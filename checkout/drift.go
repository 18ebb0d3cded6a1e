package checkout

import (
	"context"
	"fmt"
	"strings"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/patches/port"
)

// Drift verdicts beyond patches.Verdict's.
const (
	// VerdictMoved: the series conflicts only because upstream moved
	// files it changes; every patch fits at the new paths (DriftRow.Moved).
	VerdictMoved patches.SeriesVerdict = "moved"
	// VerdictError: the series could not be checked (DriftRow.Err).
	VerdictError patches.SeriesVerdict = "error"
)

// DriftRow is how one series fits one commit.
type DriftRow struct {
	Series  string
	Commit  string                // 40 hex
	Rev     string                // the revision as given (a hash, branch or tag)
	Verdict patches.SeriesVerdict // patches.Verdict's, VerdictMoved (see Moved) or VerdictError (see Err)
	Fits    []patches.PatchFit
	Err     error // a series that failed to load (tampered, bad requires)
	// Moved is set when files the series changes are missing here and
	// were followed from its tested_on commit; Verdict is VerdictMoved when
	// every patch fits at the new paths.
	Moved *Moved
	// PortClean is set when the series conflicts here with no file
	// moved, this commit descends from its tested_on commit, and a port
	// (three-way merge) to it is clean: `arpatch patches port` writes a
	// draft.
	PortClean bool
	// Notes say what the built-in gate rule could not check on this
	// machine (patches.Result.Notes).
	Notes []string
}

// CheckCommits checks every series in cat (or only those named) against
// each revision of the repository at repoPath, reading files from git's
// object store: nothing is checked out or written. Revisions may be hashes,
// branches or tags, or ranges FROM..TO (gitsrc.Repo.Range: the commits on
// TO's first-parent chain after FROM, oldest first). It returns an error for a repository or revision that
// cannot be read; a series that does not load is reported in its rows. A
// series whose files are missing at a commit is followed through renames
// from its tested_on commit (DriftRow.Moved).
func CheckCommits(repoPath string, revs []string, cat *patches.Catalog, only []string) ([]DriftRow, error) {
	return CheckCommitsContext(context.Background(), repoPath, revs, cat, only, nil)
}

// CheckCommitsContext is CheckCommits that stops between two commits
// once ctx is done, returning ctx's error, and tells progress (when not
// nil) after each commit how many of them are checked: a range may hold
// thousands.
func CheckCommitsContext(ctx context.Context, repoPath string, revs []string, cat *patches.Catalog, only []string, progress func(done, total int)) ([]DriftRow, error) {
	repo, err := gitsrc.OpenAny(repoPath)
	if err != nil {
		return nil, err
	}
	var series []*patches.Series
	if len(only) == 0 {
		series = cat.Series
	} else {
		for _, n := range only {
			s, err := cat.Get(n)
			if err != nil {
				return nil, err
			}
			series = append(series, s)
		}
	}
	type at struct{ rev, commit string }
	var commits []at
	for _, rev := range revs {
		if strings.Contains(rev, "..") {
			cs, err := repo.Range(rev)
			if err != nil {
				return nil, err
			}
			if len(cs) == 0 {
				// FROM is on TO's chain (Range checks it): FROM is TO.
				from, _, _ := strings.Cut(rev, "..")
				return nil, fmt.Errorf("range %s holds no commits (FROM..TO lists the commits after FROM up to TO, and FROM is TO here), so nothing was checked; name the commit itself (--commit %s), or a FROM before it", rev, from)
			}
			for _, c := range cs {
				commits = append(commits, at{c, c})
			}
			continue
		}
		commit, err := repo.Resolve(rev)
		if err != nil {
			return nil, err
		}
		commits = append(commits, at{rev, commit})
	}
	var rows []DriftRow
	for i, a := range commits {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rev, commit := a.rev, a.commit
		tree, err := repo.TreeAt(commit)
		if err != nil {
			return nil, err
		}
		for _, s := range series {
			row := DriftRow{Series: s.Name, Commit: commit, Rev: rev}
			ps, err := s.Load(nil)
			if err != nil {
				row.Verdict, row.Err = VerdictError, err
			} else {
				row.Fits = patches.Check(tree, ps)
				row.Verdict = patches.Verdict(row.Fits)
				if row.Verdict == patches.VerdictConflict {
					if row.Moved = movesFor(repo, s, ps, commit, tree); row.Moved != nil && row.Moved.Verdict() == VerdictMoved {
						row.Verdict = VerdictMoved
					}
					if row.Moved == nil {
						row.PortClean = portClean(repo, s, commit)
					}
				}
				if row.Verdict == patches.VerdictExact || row.Verdict == patches.VerdictOffset {
					// It applies; the built-in rule judges what it does.
					res, err := patches.ApplyChecked(tree, ps)
					if err != nil {
						row.Verdict, row.Err = VerdictError, err
					} else {
						row.Notes = res.Notes
					}
				}
			}
			rows = append(rows, row)
		}
		if len(only) == 0 {
			// A series passed over (it does not load) fails a check of
			// them all, as a broken one did; named ones are not blocked.
			for _, k := range cat.Skipped {
				rows = append(rows, DriftRow{Series: k.Name, Commit: commit, Rev: rev, Verdict: VerdictError, Err: k.Err})
			}
		}
		if progress != nil {
			progress(i+1, len(commits))
		}
	}
	return rows, nil
}

// Applies reports whether the row's series applies at its commit as is:
// exact, with offsets, or already in the tree.
func (r DriftRow) Applies() bool {
	return r.Verdict == patches.VerdictExact || r.Verdict == patches.VerdictOffset || r.Verdict == patches.VerdictApplied
}

// Unfit says what makes a `patches check` fail, one line each. By default
// a family of series is one job done differently per upstream era, so a
// revision passes when some checked series of each family fits there (the
// other era's series conflicting is expected); strict asks every series
// to fit every revision, and every fit to have been judged whole: a fit
// whose gate rule left something unchecked on this machine (its Notes:
// no clang or python3 found, a kernel arpatch does not know) fails under
// strict, naming the first note, where the default passes it with the
// notes printed. A series that does not load always fails.
func Unfit(rows []DriftRow, cat *patches.Catalog, strict bool) []string {
	family := map[string]string{}
	for _, s := range cat.Series {
		family[s.Name] = s.Family
	}
	type key struct{ rev, family string }
	fits := map[key]bool{}
	var order []key
	var out []string
	for _, r := range rows {
		k := key{r.Rev, family[r.Series]}
		if _, seen := fits[k]; !seen {
			order = append(order, k)
		}
		fits[k] = fits[k] || r.Applies()
		switch {
		case r.Verdict == VerdictError:
			out = append(out, fmt.Sprintf("series %s does not load: %v", r.Series, r.Err))
		case strict && !r.Applies():
			out = append(out, fmt.Sprintf("series %s at %s (%s): %s", r.Series, r.Rev, githash.Hash(r.Commit).Short(), r.Verdict))
		case strict && len(r.Notes) > 0:
			out = append(out, fmt.Sprintf("series %s at %s (%s): %s, but the gate rule did not check all of it here (%d notes; the first: %s)", r.Series, r.Rev, githash.Hash(r.Commit).Short(), r.Verdict, len(r.Notes), r.Notes[0]))
		}
	}
	if !strict {
		for _, k := range order {
			if !fits[k] {
				out = append(out, fmt.Sprintf("no %q series fits %s", k.family, k.rev))
			}
		}
	}
	return out
}

// portClean reports whether a port of s to commit, a later commit than
// its tested_on one, is clean (never backwards: an older commit has its
// own series).
func portClean(repo *gitsrc.Repo, s *patches.Series, commit string) bool {
	from := port.BaseCommit(repo, s)
	if from == "" || !repo.Precedes(from, commit) {
		return false
	}
	rep, err := port.Run(port.Options{Repo: repo, Series: s, From: from, To: commit})
	return err == nil && rep.Clean
}
