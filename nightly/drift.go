package nightly

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/arpatch/arpatch/checkout"
	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/patches/port"
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
// every series of recipe B's family at the pinned commit, the head and
// the also_check revisions (checkSeries). It returns the commit the arms
// are built and benched at (the report's BuildCommit: the head with
// arms.commit = "head", else the pinned commit) and its checks.
func (n *night) drift(ctx context.Context) (string, []history.Check) {
	rep, cfg, repo := n.rep, n.cfg, n.in.repo
	var cs []history.Check
	if cfg.Upstream.Fetch {
		if err := repo.Fetch(ctx, nil); err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("upstream.fetch: fetching origin into %s: %v", cfg.Path(cfg.Upstream.Repo), err))
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
	cs = append(cs, n.checkSeries()...)
	rep.BuildCommit = rep.Pinned
	if cfg.Arms.Commit == CommitHead && rep.Head != "" {
		rep.BuildCommit = rep.Head
	}
	return rep.BuildCommit, cs
}

// revisions are the commits drift checks, in order: the pinned commit
// and the tracked ref's head (the first judged of them), which decide
// the night, then the also_check revisions, which are recorded and
// reported, never judged.
type revisions struct {
	commits []string
	judged  int
	also    map[string]string // commit -> the also_check revision that names it
}

// revisions resolves the commits to check, with a skipped check and a
// warning for each also_check revision that does not resolve (also_check
// is recorded, never failing); one already checked is not checked twice.
func (n *night) revisions() (revisions, []history.Check) {
	rep := n.rep
	var cs []history.Check
	revs := revisions{commits: []string{rep.Pinned}, also: map[string]string{}}
	if rep.Head != "" && rep.Head != rep.Pinned {
		revs.commits = append(revs.commits, rep.Head)
	}
	revs.judged = len(revs.commits)
	for _, a := range n.cfg.Upstream.Also {
		commit, err := n.in.repo.Resolve(a)
		if err != nil {
			cs = append(cs, history.Check{Name: "also_check " + a, Kind: history.KindDrift, Status: history.CheckSkip, Detail: err.Error()})
			rep.Warnings = append(rep.Warnings, "upstream.also_check: "+err.Error())
			continue
		}
		if slices.Contains(revs.commits, commit) {
			continue
		}
		revs.commits = append(revs.commits, commit)
		revs.also[commit] = a
	}
	return revs, cs
}

// checkSeries checks every series of recipe B's family at each revision
// (with [arms] patches_dir beside the embedded series, the others are no
// part of this job), records each patch's fit in the report's drift rows
// (driftRows), and returns its checks: at a judged revision one per
// series (judgedChecks), which fail the run (exit 3) when no series of
// the family fits there (drifted); at an also_check revision one per
// series that is recorded only.
func (n *night) checkSeries() []history.Check {
	revs, cs := n.revisions()
	members := n.in.cat.Members(n.in.b.Series)
	var only []string
	for _, s := range members {
		only = append(only, s.Name)
	}
	rows, err := checkout.CheckCommits(n.cfg.Path(n.cfg.Upstream.Repo), revs.commits, n.in.cat, only)
	if err != nil {
		n.rep.Errors = append(n.rep.Errors, "drift check: "+err.Error())
		n.rep.exit(ExitInfra)
		return cs
	}
	fits := n.driftRows(rows, revs)
	for i, commit := range rowsCommits(rows) {
		if i >= revs.judged {
			cs = append(cs, n.alsoChecks(members, commit, fits)...)
			continue
		}
		cs = append(cs, n.judgedChecks(members, commit, fits)...)
	}
	return cs
}

// driftRows adds a DriftRow to the report for each series at each
// commit, with each patch's fit (a moved file explained), and returns
// whether each series applies at each commit (commit -> series -> fits).
func (n *night) driftRows(rows []checkout.DriftRow, revs revisions) map[string]map[string]bool {
	rep, repoPath, cat := n.rep, n.cfg.Path(n.cfg.Upstream.Repo), n.in.cat
	fits := map[string]map[string]bool{}
	for _, r := range rows {
		rev := string(CommitPinned)
		switch {
		case r.Commit == rep.Head && r.Commit != rep.Pinned:
			rev = rep.Ref
		case r.Commit == rep.Head:
			rev = "pinned=" + rep.Ref
		case r.Commit != rep.Pinned:
			rev = "also " + cmp.Or(revs.also[r.Commit], githash.Hash(r.Commit).Short())
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
		}
		if r.Err != nil {
			dr.Patches = append(dr.Patches, history.DriftRecord{Series: r.Series, Commit: r.Commit, Rev: rev, Patch: "(series)", Fit: checkout.VerdictError, Detail: r.Err.Error()})
		}
		rep.Drift = append(rep.Drift, dr)
		if fits[r.Commit] == nil {
			fits[r.Commit] = map[string]bool{}
		}
		fits[r.Commit][r.Series] = r.Applies()
	}
	return fits
}

// driftRecords are the patches' fits of the drift rows, in order: what
// the history stores of the drift step.
func driftRecords(rows []DriftRow) []history.DriftRecord {
	var out []history.DriftRecord
	for _, r := range rows {
		out = append(out, r.Patches...)
	}
	return out
}

// alsoChecks are the checks at an also_check revision: recorded and
// reported, never judged (a series that does not fit there is skipped).
func (n *night) alsoChecks(members []*patches.Series, commit string, fits map[string]map[string]bool) []history.Check {
	var cs []history.Check
	for _, s := range members {
		c := history.Check{Name: fmt.Sprintf("%s at %s", s.Name, githash.Hash(commit).Short()), Kind: history.KindDrift, Status: history.CheckPass}
		if !fits[commit][s.Name] {
			c.Status, c.Detail = history.CheckSkip, "recorded only (also_check)"
			setNote(n.rep.Drift, s.Name, commit, c.Detail)
		}
		cs = append(cs, c)
	}
	return cs
}

// judgedChecks are the checks at the pinned commit or the tracked head:
// a series that fits passes; one that does not is skipped when another
// member of the family fits there (it is superseded), and fails when
// none does, which fails the run (drifted).
func (n *night) judgedChecks(members []*patches.Series, commit string, fits map[string]map[string]bool) []history.Check {
	rep := n.rep
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
	var cs []history.Check
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
		n.drifted(members, commit, label, cs)
	}
	return cs
}

// drifted fails the run (exit 3) at commit, which label names as the
// headline does, where no member of the family fits: its error names
// each series' first conflict, the port hint when `arpatch patches port`
// finds one (which then leads the failing checks' details in cs), and
// the remedy.
func (n *night) drifted(members []*patches.Series, commit, label string, cs []history.Check) {
	rep, repoPath, cat := n.rep, n.cfg.Path(n.cfg.Upstream.Repo), n.in.cat
	rep.exit(ExitDrift)
	rep.DriftedAt = append(rep.DriftedAt, label)
	hint := portHint(n.in.repo, repoPath, cat, members, commit)
	msg := fmt.Sprintf("no %q series applies to %s:", n.in.b.Series, label)
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

// setNote sets the note of series' row at commit.
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

// conflictDetail is the first conflict (or error) of series' patches at
// commit, else its verdict; "" when no row holds them.
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
