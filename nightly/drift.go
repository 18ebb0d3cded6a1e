package nightly

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/checkout"
	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/patches/port"
	"github.com/arpatch/arpatch/recipes"
)

// DriftRow is one series at one commit.
type DriftRow struct {
	Series  string                `json:"series"`
	Commit  string                `json:"commit"`
	Rev     string                `json:"rev"` // CommitPinned's word or the tracked ref
	Verdict patches.SeriesVerdict `json:"verdict"`
	Patches []history.DriftRecord `json:"patches"`
	// Note says why a conflict does not fail the run: another member of
	// the family fits this commit, or the commit is only recorded.
	Note string `json:"note,omitempty"`
}

// drift is step 1: fetch the tracked ref, resolve its head, and check
// every series at the pinned commit, the head and the also_check
// revisions.
func (n *night) drift(ctx context.Context) []history.Check {
	rep, cfg, repo := n.rep, n.cfg, n.in.repo
	var cs []history.Check
	repoPath := cfg.Path(cfg.Upstream.Repo)
	if cfg.Upstream.Fetch {
		if err := repo.Fetch(ctx, nil); err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("upstream.fetch: fetching origin into %s: %v", repoPath, err))
			cs = append(cs, history.Check{Name: "fetch " + cfg.Upstream.Ref, Kind: history.KindDrift, Status: history.CheckFail, Detail: err.Error()})
			rep.exit(ExitInfra)
		}
	}
	var err error
	rep.Head, err = repo.Resolve(cfg.Upstream.Ref)
	if err != nil {
		rep.Errors = append(rep.Errors, "upstream.ref: "+err.Error())
		cs = append(cs, history.Check{Name: "resolve " + cfg.Upstream.Ref, Kind: history.KindDrift, Status: history.CheckFail, Detail: err.Error()})
		rep.exit(ExitInfra)
	}
	for _, l := range n.in.cat.PassedOver() {
		// An unsealed draft in [arms] patches_dir: never applied, and
		// it does not stop the other series.
		first, _, _ := strings.Cut(l, "\n")
		rep.Warnings = append(rep.Warnings, "arms.patches_dir: "+first)
	}
	checks, recs := drift(rep, repo, repoPath, n.in.cat, n.in.b, cfg.Upstream.Also)
	n.out.Drift = recs
	n.out.UpstreamHead = rep.Head
	rep.BuildCommit = rep.Pinned
	if cfg.Arms.Commit == CommitHead && rep.Head != "" {
		rep.BuildCommit = rep.Head
		n.out.SGLangCommit = rep.BuildCommit // what is built and benched
	}
	return append(cs, checks...)
}

// drift checks every series at the pinned commit and at the tracked
// ref's head, returns its checks and each patch's fit (for the history),
// and fails the run (exit 3) when no series of recipe B's family fits
// head, naming the patches, files and hunks that conflict.
func drift(rep *Report, repo *gitsrc.Repo, repoPath string, cat *patches.Catalog, b *recipes.Recipe, also []string) ([]history.Check, []history.DriftRecord) {
	var cs []history.Check
	revs := []string{rep.Pinned}
	if rep.Head != "" && rep.Head != rep.Pinned {
		revs = append(revs, rep.Head)
	}
	judged := len(revs)
	alsoName := map[string]string{}
	for _, a := range also {
		// also_check is recorded, never failing: a revision that does not
		// resolve is noted and skipped; one already checked is not checked
		// twice.
		commit, err := repo.Resolve(a)
		if err != nil {
			cs = append(cs, history.Check{Name: "also_check " + a, Kind: history.KindDrift, Status: history.CheckSkip, Detail: err.Error()})
			rep.Warnings = append(rep.Warnings, "upstream.also_check: "+err.Error())
			continue
		}
		if slices.Contains(revs, commit) {
			continue
		}
		revs = append(revs, commit)
		alsoName[commit] = a
	}
	// The series of B's family: with [arms] patches_dir beside the
	// embedded series, others are no part of this job.
	var only []string
	for _, s := range cat.Members(b.Series) {
		only = append(only, s.Name)
	}
	rows, err := checkout.CheckCommits(repoPath, revs, cat, only)
	if err != nil {
		rep.Errors = append(rep.Errors, "drift check: "+err.Error())
		rep.exit(ExitInfra)
		return cs, nil
	}
	var recs []history.DriftRecord
	fits := map[string]map[string]bool{} // commit -> series -> fits
	for _, r := range rows {
		rev := string(CommitPinned)
		switch {
		case r.Commit == rep.Head && r.Commit != rep.Pinned:
			rev = rep.Ref
		case r.Commit == rep.Head:
			rev = "pinned=" + rep.Ref
		case r.Commit != rep.Pinned:
			rev = "also " + cmp.Or(alsoName[r.Commit], githash.Hash(r.Commit).Short())
		}
		dr := DriftRow{Series: r.Series, Commit: r.Commit, Rev: rev, Verdict: r.Verdict}
		for _, f := range r.Fits {
			rec := history.DriftRecord{Series: r.Series, Commit: r.Commit, Rev: rev, Patch: f.Patch, Fit: f.Fit.Verdict()}
			if f.Err != nil {
				rec.Detail = f.Err.Error()
			}
			if r.Moved != nil && errors.Is(f.Err, patches.ErrFileMissing) {
				rec.Detail = strings.Join(r.Moved.Explain(r.Series, repoPath, r.Commit, cat.Dir), "; ")
			}
			dr.Patches = append(dr.Patches, rec)
			recs = append(recs, rec)
		}
		if r.Err != nil {
			rec := history.DriftRecord{Series: r.Series, Commit: r.Commit, Rev: rev, Patch: "(series)", Fit: checkout.VerdictError, Detail: r.Err.Error()}
			dr.Patches = append(dr.Patches, rec)
			recs = append(recs, rec)
		}
		rep.Drift = append(rep.Drift, dr)
		if fits[r.Commit] == nil {
			fits[r.Commit] = map[string]bool{}
		}
		fits[r.Commit][r.Series] = r.Applies()
	}
	members := cat.Members(b.Series)
	for i, commit := range rowsCommits(rows) {
		if i >= judged {
			// Extra revisions are recorded and reported, never judged.
			for _, s := range members {
				c := history.Check{Name: fmt.Sprintf("%s at %s", s.Name, githash.Hash(commit).Short()), Kind: history.KindDrift, Status: history.CheckPass}
				if !fits[commit][s.Name] {
					c.Status, c.Detail = history.CheckSkip, "recorded only (also_check)"
					setNote(rep.Drift, s.Name, commit, c.Detail)
				}
				cs = append(cs, c)
			}
			continue
		}
		label := "pinned commit " + githash.Hash(commit).Short()
		if commit == rep.Head && commit != rep.Pinned {
			label = rep.Ref + " (" + githash.Hash(commit).Short() + ")"
		}
		anyFit := ""
		for _, s := range members {
			if fits[commit][s.Name] {
				anyFit = s.Name
			}
		}
		for _, s := range members {
			c := history.Check{Name: fmt.Sprintf("%s at %s", s.Name, label), Kind: history.KindDrift}
			switch {
			case fits[commit][s.Name]:
				c.Status = history.CheckPass
			case anyFit != "":
				c.Status, c.Detail = history.CheckSkip, "superseded here by "+anyFit
				setNote(rep.Drift, s.Name, commit, c.Detail)
			default:
				c.Status, c.Detail = history.CheckFail, conflictDetail(rep.Drift, s.Name, commit)
			}
			cs = append(cs, c)
		}
		if anyFit == "" && len(members) > 0 {
			rep.exit(ExitDrift)
			rep.DriftedAt = append(rep.DriftedAt, label)
			hint := portHint(repo, repoPath, cat, members, commit)
			msg := fmt.Sprintf("no %q series applies to %s:", b.Series, label)
			for _, s := range members {
				first, _, _ := strings.Cut(conflictDetail(rep.Drift, s.Name, commit), "\n")
				msg += fmt.Sprintf("\n  %s: %s", s.Name, first)
			}
			if hint != nil {
				rep.Ports = append(rep.Ports, *hint)
				msg += "\n  port: " + hint.String()
				// The JUnit message of each failing drift check leads with it.
				for i := range cs {
					if c := &cs[i]; c.Kind == history.KindDrift && c.Status == history.CheckFail && strings.HasSuffix(c.Name, " at "+label) {
						c.Detail = hint.String() + "\n" + c.Detail
					}
				}
			}
			msg += fmt.Sprintf("\n  remedy: refresh the series against this commit (`%s` shows every hunk), or keep the recipe pinned to a commit it fits", cat.CheckCommand(repoPath, commit))
			rep.Errors = append(rep.Errors, msg)
		}
	}
	return cs, recs
}

// PortHint is the outcome of porting a series, in memory, to a commit the
// family no longer fits.
type PortHint struct {
	Series  string `json:"series"`
	Commit  string `json:"commit"`
	Clean   bool   `json:"clean"`
	Summary string `json:"summary"` // e.g. "clean: 4 exact, 2 offset hunks; 1 file moved"
	// Command writes the draft (clean) or prints the conflicts.
	Command string `json:"command"`
}

func (h PortHint) String() string {
	if h.Clean {
		return fmt.Sprintf("a clean draft exists (port of %s, %s); write it with `%s`", h.Series, h.Summary, h.Command)
	}
	return fmt.Sprintf("no clean draft (port of %s, %s); see the conflicts with `%s`", h.Series, h.Summary, h.Command)
}

// portHint ports each member of the family to commit in memory, the
// newest series (by name, which carries its date) first, and returns the
// first clean result, else the newest series' conflicts; nil when no
// member can be ported at all (no tested_on commit in the repository).
func portHint(repo *gitsrc.Repo, repoPath string, cat *patches.Catalog, members []*patches.Series, commit string) *PortHint {
	var first *PortHint
	for i := len(members) - 1; i >= 0; i-- {
		s := members[i]
		if from := port.BaseCommit(repo, s); from == "" || repo.Precedes(commit, from) {
			// No base here, or commit is older than the series: a port
			// would carry it backwards over upstream's changes; an
			// older commit is for an older series.
			continue
		}
		rep, err := port.Run(port.Options{Repo: repo, Series: s, To: commit})
		if err != nil {
			continue
		}
		h := &PortHint{Series: s.Name, Commit: commit, Clean: rep.Clean, Summary: rep.Summary()}
		if rep.Clean {
			h.Command = port.Command(s.Name, repoPath, commit, port.DraftDir(s.Name, commit), cat.Dir)
			return h
		}
		h.Command = port.Command(s.Name, repoPath, commit, "", cat.Dir)
		if first == nil {
			first = h
		}
	}
	return first
}

func setNote(rows []DriftRow, series, commit, note string) {
	for i := range rows {
		if rows[i].Series == series && rows[i].Commit == commit {
			rows[i].Note = note
		}
	}
}

// rowsCommits returns the 40-hex commits of the rows, in order.
func rowsCommits(rows []checkout.DriftRow) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range rows {
		if !seen[r.Commit] {
			seen[r.Commit] = true
			out = append(out, r.Commit)
		}
	}
	return out
}

func conflictDetail(rows []DriftRow, series, commit string) string {
	for _, r := range rows {
		if r.Series != series || r.Commit != commit {
			continue
		}
		for _, p := range r.Patches {
			if p.Fit == patches.VerdictConflict || p.Fit == checkout.VerdictError {
				return p.Detail
			}
		}
		return "verdict " + string(r.Verdict)
	}
	return ""
}
