// Package port carries a patch series from the upstream commit it was
// tested on to a later one, in memory: `arpatch patches port` and the
// nightly's drift verdict use it. It never touches a work tree; it reads
// both commits from git's object store.
//
// For each file a patch changes, in series order:
//   - a file missing at the target is followed through history with
//     go-git's rename detection (gitsrc.Follow): the hunks go to the new
//     path, and the report says "moved to P at C";
//   - when every hunk's context is found at the target (exactly, or at
//     other lines) the hunks are kept and re-headed there: exact / offset;
//   - otherwise the file is merged three-way (internal/merge3): base = the
//     file at the series' tested_on commit (with the series' earlier
//     patches), ours = base plus the patch, theirs = the file at the
//     target (with the earlier ported patches). A clean merge yields hunks
//     regenerated against the target with fresh context (3 lines, as git
//     diff); changes of both sides that overlap are conflicts, reported
//     with base's, ours' and theirs' lines and never written into a patch.
//
// The draft is a series directory (series.toml plus patches) with
// tested_on = [target] and the source's provides and requires, unsealed
// unless asked; each ported patch is re-read and re-applied to the target
// before the draft is offered, so it reproduces the merged bytes. It is
// not a general merge tool: a patch that creates or deletes a file is
// carried only when it still fits as is.
//
// The move this exists for: c32c4ef79cf5 moved sgl-kernel/ under
// python/sglang/kernels/aot/, the kernel header byte-identical. Upstream:
// python/sglang/kernels/aot/csrc/allreduce/custom_all_reduce.cuh@c32c4ef79cf5218c24f467aad7f3ff392a62bed7
// (CustomAllreduce::allreduce).
package port

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/merge3"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/patches"
)

// Status says how one hunk of the source series reached the target.
type Status string

// The hunk statuses, in the report's words: exact, offset and conflict
// are the engine's verdict words (patches.VerdictExact, ...), merged is
// port's own.
const (
	Exact           = Status(patches.VerdictExact)  // context found where the header says
	Offset          = Status(patches.VerdictOffset) // context found at other lines
	Merged   Status = "merged"                      // context changed upstream; merged three-way
	Conflict        = Status(patches.VerdictConflict)
)

// Hunk is one hunk of the source series at the target.
type Hunk struct {
	Patch  string `json:"patch"`
	File   string `json:"file"`           // path in the source series
	Path   string `json:"path"`           // path at the target (differs when moved)
	Hunk   string `json:"hunk"`           // header in the source series
	Status Status `json:"status"`         // exact, offset, merged or conflict
	Offset int    `json:"offset"`         // lines from the header's position (exact, offset)
	Line   int    `json:"line,omitempty"` // 1-based line at the target where its old lines start (exact, offset)
	// Moved lists the renames that took File to Path.
	Moved []gitsrc.Rename `json:"moved,omitempty"`
}

// ConflictDetail is a range the patch and upstream both changed, or a
// file the patch cannot reach; nothing of it is written into a patch.
type ConflictDetail struct {
	Patch  string   `json:"patch"`
	Path   string   `json:"path"`            // path at the target
	Hunks  []string `json:"hunks,omitempty"` // source hunk headers that touch the range
	Reason string   `json:"reason"`
	// BaseLine is the 1-based line at the tested_on commit (after the
	// series' earlier patches) where the range starts.
	BaseLine int      `json:"base_line,omitempty"`
	Base     []string `json:"base,omitempty"`   // the lines at tested_on
	Ours     []string `json:"ours,omitempty"`   // the patch's version
	Theirs   []string `json:"theirs,omitempty"` // upstream's version at the target
}

// Patch is one patch of the series at the target.
type Patch struct {
	Patch     string           `json:"patch"`
	Clean     bool             `json:"clean"`
	Hunks     []Hunk           `json:"hunks"`
	Conflicts []ConflictDetail `json:"conflicts,omitempty"`
	// Text is the ported patch file (clean patches only).
	Text []byte `json:"-"`
}

// Report is the outcome of a port, printed and written as JSON.
type Report struct {
	Series  string          `json:"series"`
	From    string          `json:"from"` // the tested_on commit used as base
	To      string          `json:"to"`
	Clean   bool            `json:"clean"`
	Moves   []gitsrc.Rename `json:"moves,omitempty"`
	Patches []Patch         `json:"patches"`
	// Refused is set when every patch ported cleanly but arpatch's
	// built-in effect rule (patches.ApplyChecked) refuses the ported series
	// at the target, as apply would: no draft is offered then.
	Refused string `json:"refused,omitempty"`
}

// Counts returns how many hunks have each status.
func (r *Report) Counts() map[Status]int {
	m := map[Status]int{}
	for _, p := range r.Patches {
		for _, h := range p.Hunks {
			m[h.Status]++
		}
	}
	return m
}

// Options holds every input of Run.
type Options struct {
	Repo   *gitsrc.Repo
	Series *patches.Series
	// From is the 40-hex base commit; "" takes the last of the series'
	// tested_on commits that the repository holds.
	From string
	To   string // 40-hex target commit
	// Moves names, old path to new path, where a file the target lacks
	// went, for a rename history does not settle (one file copied to
	// several identical ones) or that go-git's detection does not find
	// (--move OLD=NEW). The new path must exist at the target.
	Moves map[string]string
}

// NoBase says why a series' moves cannot be followed in repo, which holds
// none of its tested_on commits, and what to do: a shallow clone is named
// as such, with the command that fetches its history.
func NoBase(repo *gitsrc.Repo, s *patches.Series) error {
	msg := fmt.Sprintf("series %s: the repository %s holds none of its tested_on commits (%s)", s.Name, repo.Dir, strings.Join(s.TestedOn, ", "))
	const from = "pass --from to arpatch patches port with a commit the series applies to; without one, moves of its files since cannot be followed"
	if sh := repo.Shallow(); len(sh) > 0 {
		var at []string
		for _, c := range sh {
			at = append(at, githash.Hash(c).Short())
		}
		return fmt.Errorf("%s: it is a shallow clone (its history stops at %s); run `git -C %s fetch --unshallow`, or point --repo at a full clone or mirror, or %s", msg, strings.Join(at, ", "), shellq.Path(repo.Dir), from)
	}
	return fmt.Errorf("%s; fetch one, or %s", msg, from)
}

// Run ports the series to opts.To in memory. It returns the report (a
// conflict is a report with Clean false, not an error), or an error when
// the series does not load (*patches.TamperError, ...), a commit is not in
// the repository, or the series does not apply to its own base commit.
func Run(opts Options) (*Report, error) {
	s := opts.Series
	ps, err := s.Load(nil)
	if err != nil {
		return nil, err
	}
	from := opts.From
	if from == "" {
		from = BaseCommit(opts.Repo, s)
	}
	if from == "" {
		return nil, NoBase(opts.Repo, s)
	}
	baseTree, err := opts.Repo.TreeAt(from)
	if err != nil {
		return nil, err
	}
	toTree, err := opts.Repo.TreeAt(opts.To)
	if err != nil {
		return nil, err
	}
	rep := &Report{Series: s.Name, From: from, To: opts.To, Clean: true}
	base, theirs := newMem(baseTree), newMem(toTree)
	if err := checkMoves(opts, ps, toTree); err != nil {
		return nil, err
	}
	moved, follow := FollowMissing(opts.Repo, from, opts.To, ps, toTree, opts.Moves)
	seen := map[string]bool{}
	for _, p := range ps {
		raw, err := s.ReadPatch(p.Name)
		if err != nil {
			return nil, err
		}
		header, _ := patches.SplitHeader(raw)
		pr := Patch{Patch: p.Name, Clean: true}
		var body strings.Builder
		for _, fc := range p.Diff.Changes {
			newPath := fc.Path
			if ms := moved[fc.Path]; len(ms) > 0 {
				newPath = ms[len(ms)-1].To
				if !seen[fc.Path] {
					rep.Moves = append(rep.Moves, ms...)
				}
			}
			seen[fc.Path] = true
			if err := follow[fc.Path]; err != nil {
				pr.lost(fc, err)
				continue
			}
			sec, err := portFile(p, fc, newPath, moved[fc.Path], base, theirs, &pr)
			if err != nil {
				return nil, err
			}
			body.WriteString(sec)
		}
		if pr.Clean && body.Len() == 0 {
			pr.Clean = false
			pr.Conflicts = append(pr.Conflicts, ConflictDetail{Patch: p.Name, Reason: "upstream already holds every change of this patch at " + githash.Hash(opts.To).Short() + "; drop it from the series by hand (and its requires pairs)"})
		}
		if pr.Clean {
			pr.Text = append(rewritePaths(rewriteAppliesTo(header, s.Name, from, opts.To), rep.Moves), body.String()...)
			if err := verify(p.Name, pr.Text, theirs); err != nil {
				return nil, err
			}
			theirs.commit()
		} else {
			// The next patch is ported onto the target without this one.
			clear(theirs.pending)
			rep.Clean = false
		}
		rep.Patches = append(rep.Patches, pr)
	}
	if rep.Clean {
		if err := rep.applyPorted(ps, toTree); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// lost marks the patch a conflict at fc, which could not be followed to
// the target (err says why), with each of its hunks.
func (pr *Patch) lost(fc *patches.FileChange, err error) {
	pr.Clean = false
	pr.Conflicts = append(pr.Conflicts, ConflictDetail{Patch: pr.Patch, Path: fc.Path, Reason: err.Error()})
	for _, h := range fc.Hunks {
		pr.Hunks = append(pr.Hunks, Hunk{Patch: pr.Patch, File: fc.Path, Path: fc.Path, Hunk: h.Header, Status: Conflict})
	}
}

// checkMoves refuses a --move OLD=NEW whose OLD the series does not
// change, whose OLD is still at opts.To, or whose NEW is not a file there.
func checkMoves(opts Options, ps []*patches.Patch, toTree *gitsrc.CommitTree) error {
	for old, np := range opts.Moves {
		if !changes(ps, old) {
			return fmt.Errorf("--move %s=%s: series %s does not change %s", old, np, opts.Series.Name, old)
		}
		if _, err := toTree.ReadFile(old); err == nil {
			return fmt.Errorf("--move %s=%s: %s is still there at %s; nothing to move", old, np, old, githash.Hash(opts.To).Short())
		}
		if _, err := toTree.ReadFile(np); err != nil {
			return fmt.Errorf("--move %s=%s: %s is not a file at %s", old, np, np, githash.Hash(opts.To).Short())
		}
	}
	return nil
}

// applyPorted applies the ported series (each patch keeping what its
// original provides) to toTree as apply would; a refusal marks the report
// not clean, with the refusal in Refused.
func (rep *Report) applyPorted(ps []*patches.Patch, toTree *gitsrc.CommitTree) error {
	var ported []*patches.Patch
	for i, pr := range rep.Patches {
		d, err := patches.ParseDiff(pr.Patch, pr.Text)
		if err != nil {
			return err // verify parsed it already
		}
		ported = append(ported, &patches.Patch{Name: pr.Patch, Provides: ps[i].Provides, Diff: d})
	}
	if _, err := patches.ApplyChecked(toTree, ported); err != nil {
		rep.Clean = false
		rep.Refused = err.Error()
	}
	return nil
}

// BaseCommit returns the last of the series' tested_on commits that repo
// holds, or "" when it holds none.
func BaseCommit(repo *gitsrc.Repo, s *patches.Series) string {
	from := ""
	for _, c := range s.TestedOn {
		if _, err := repo.TreeAt(c); err == nil {
			from = c
		}
	}
	return from
}

// FollowMissing follows each file the patches modify or delete that tree
// (the commit to) lacks, from commit from, with gitsrc.Follow. It returns
// the renames per old path, in order, and for each file it could not
// follow (deleted without a rename, several equally good renames, no
// first-parent line from from, a shallow clone) the reason. named (old
// path to new path, --move) settles where a file went when history does
// not: one of several identical copies, or a path the rename detection
// did not find.
func FollowMissing(repo *gitsrc.Repo, from, to string, ps []*patches.Patch, tree patches.Tree, named map[string]string) (map[string][]gitsrc.Rename, map[string]error) {
	moved, lost := map[string][]gitsrc.Rename{}, map[string]error{}
	for _, p := range ps {
		for _, fc := range p.Diff.Changes {
			if _, done := moved[fc.Path]; done || lost[fc.Path] != nil || fc.Op == patches.Create {
				continue
			}
			if _, err := tree.ReadFile(fc.Path); !errors.Is(err, fs.ErrNotExist) {
				continue
			}
			ms, err := repo.Follow(from, to, fc.Path)
			if np := named[fc.Path]; np != "" {
				ms, err = nameMove(fc.Path, np, ms, err)
			}
			var de *gitsrc.DeletedError
			var ae *gitsrc.AmbiguousError
			switch {
			case err != nil && errors.As(err, &ae):
				lost[fc.Path] = &AmbiguousMove{AmbiguousError: ae, Moves: ms}
			case err != nil && errors.As(err, &de) && len(ms) > 0:
				lost[fc.Path] = fmt.Errorf("%s %s, then %w", fc.Path, ms[len(ms)-1], err)
			case err != nil:
				lost[fc.Path] = err
			default:
				moved[fc.Path] = ms
			}
		}
	}
	return moved, lost
}

// nameMove applies --move old=np to what Follow found: np must be one of
// the candidates of an ambiguous rename; where Follow found a single
// rename elsewhere, or none, the named path wins and is recorded as named.
func nameMove(old, np string, ms []gitsrc.Rename, err error) ([]gitsrc.Rename, error) {
	var ae *gitsrc.AmbiguousError
	if errors.As(err, &ae) {
		if !slices.Contains(ae.Candidates, np) {
			return ms, fmt.Errorf("--move %s=%s: %s is not one of the files %s went to at %s: %s", old, np, np, ae.Path, githash.Hash(ae.Commit).Short(), strings.Join(ae.Candidates, ", "))
		}
		return append(ms, gitsrc.Rename{From: ae.Path, To: np, Commit: ae.Commit, Subject: ae.Subject}), nil
	}
	if err == nil && len(ms) > 0 && ms[len(ms)-1].To == np {
		return ms, nil
	}
	return []gitsrc.Rename{{From: old, To: np, Subject: "named by --move"}}, nil
}

// AmbiguousMove is a file that went to several identical files; the
// error says how to name the one the patch belongs to.
type AmbiguousMove struct {
	*gitsrc.AmbiguousError
	Moves []gitsrc.Rename // the moves before the ambiguous one
}

// Error names every candidate and the flag that chooses.
func (e *AmbiguousMove) Error() string {
	var opts []string
	for _, c := range e.Candidates {
		opts = append(opts, "--move "+shellq.Path(e.From())+"="+shellq.Path(c))
	}
	return e.AmbiguousError.Error() + "; name the one it belongs to: port with " + strings.Join(opts, " or ")
}

// From is the path the series changes.
func (e *AmbiguousMove) From() string {
	if len(e.Moves) > 0 {
		return e.Moves[0].From
	}
	return e.Path
}

func (e *AmbiguousMove) Unwrap() error { return e.AmbiguousError }

// changes reports whether a patch of ps changes path.
func changes(ps []*patches.Patch, path string) bool {
	for _, p := range ps {
		for _, fc := range p.Diff.Changes {
			if fc.Path == path {
				return true
			}
		}
	}
	return false
}

// portFile ports one file change, records its hunks and conflicts in pr,
// updates the base and target views, and returns the file's section of
// the ported patch ("" when it conflicts): directly when every hunk's
// context is at the target, else by a three-way merge.
func portFile(p *patches.Patch, fc *patches.FileChange, newPath string, moves []gitsrc.Rename, base, theirs *mem, pr *Patch) (string, error) {
	fp := &filePort{p: p, fc: fc, newPath: newPath, moves: moves, theirs: theirs, pr: pr}
	// ours = base + this file change.
	ours, err := patches.Apply(base, fp.one(fc.Path, fc.Hunks))
	if err != nil {
		return "", fmt.Errorf("series patch %s does not apply to its own base commit (with the patches before it), so it cannot be ported: %w", p.Name, err)
	}
	baseBytes, _ := base.ReadFile(fc.Path)
	oursFile := ours.Files[0]
	base.set(fc.Path, oursFile.After, oursFile.Op != patches.Delete)

	// Direct: every hunk's context is at the target.
	if res, err := patches.Apply(theirs, fp.one(newPath, fc.Hunks)); err == nil {
		return fp.direct(res), nil
	}
	if fc.Op != patches.Modify {
		pr.Clean = false
		pr.Conflicts = append(pr.Conflicts, ConflictDetail{Patch: p.Name, Path: newPath, Reason: fmt.Sprintf("the patch %ss %s, which does not fit the target as is; port %s by hand", fc.Op, newPath, fc.Op)})
		for _, h := range fc.Hunks {
			pr.Hunks = append(pr.Hunks, fp.hunkReport(h, Conflict))
		}
		return "", nil
	}
	theirsBytes, err := theirs.ReadFile(newPath)
	if err != nil {
		pr.Clean = false
		pr.Conflicts = append(pr.Conflicts, ConflictDetail{Patch: p.Name, Path: newPath, Reason: err.Error()})
		return "", nil
	}
	return fp.merge(baseBytes, ours, theirsBytes), nil
}

// filePort is one file change being ported: the patch, the change, its
// path at the target, the moves that led there, the target's view, and
// the patch's report.
type filePort struct {
	p       *patches.Patch
	fc      *patches.FileChange
	newPath string
	moves   []gitsrc.Rename
	theirs  *mem
	pr      *Patch
}

// one is the change alone, at path with hunks, as a series of one patch.
func (fp *filePort) one(path string, hunks []*patches.Hunk) []*patches.Patch {
	c := *fp.fc
	c.Path, c.Hunks = path, hunks
	return []*patches.Patch{{Name: fp.p.Name, Diff: &patches.Diff{Header: fp.p.Diff.Header, Changes: []*patches.FileChange{&c}}}}
}

// hunkReport is hunk h's line of the report, with status st.
func (fp *filePort) hunkReport(h *patches.Hunk, st Status) Hunk {
	return Hunk{Patch: fp.p.Name, File: fp.fc.Path, Path: fp.newPath, Hunk: h.Header, Status: st, Moved: fp.moves}
}

// direct records each hunk where res (the change applied to the target
// as is) placed it, exactly or at an offset, stages the result and
// returns its section ("" when the target already holds the change).
func (fp *filePort) direct(res *patches.Result) string {
	var hunks []*patches.Hunk
	for i, h := range fp.fc.Hunks {
		hr := res.Hunks[i]
		st := Exact
		if hr.Offset != 0 {
			st = Offset
		}
		r := fp.hunkReport(h, st)
		r.Offset, r.Line = hr.Offset, hr.Line
		fp.pr.Hunks = append(fp.pr.Hunks, r)
		hunks = append(hunks, h)
	}
	if len(res.Files) == 0 {
		return "" // the target already holds this change
	}
	f := res.Files[0]
	before, _ := fp.theirs.ReadFile(fp.newPath)
	fp.theirs.stage(fp.newPath, f.After, f.Op != patches.Delete)
	return section(fp.newPath, f, before, reheader(hunks, res.Hunks), fp.theirs.mode(fp.newPath))
}

// merge merges the change three ways (base, ours: base with the change,
// theirs: the target's bytes), records each hunk as merged, conflicting or
// still fitting alone, and each conflict with the hunks it touches; it
// stages the merge and returns its section, or "" when it conflicts or
// changes nothing.
func (fp *filePort) merge(baseBytes []byte, ours *patches.Result, theirsBytes []byte) string {
	fc, pr, newPath, theirs := fp.fc, fp.pr, fp.newPath, fp.theirs
	m := merge3.Merge(lines(baseBytes), lines(ours.Files[0].After), lines(theirsBytes))
	// Where each source hunk sat in base.
	spans := hunkSpans(fc, ours)
	conflicted := make([]bool, len(fc.Hunks))
	for _, c := range m.Conflicts {
		d := ConflictDetail{Patch: fp.p.Name, Path: newPath, Reason: "the patch and upstream changed the same lines", BaseLine: c.BaseStart + 1, Base: c.Base, Ours: c.Ours, Theirs: c.Theirs}
		for i, sp := range spans {
			if sp[0] <= c.BaseEnd && c.BaseStart <= sp[1] {
				conflicted[i] = true
				d.Hunks = append(d.Hunks, fc.Hunks[i].Header)
			}
		}
		pr.Conflicts = append(pr.Conflicts, d)
	}
	for i, h := range fc.Hunks {
		st := Merged
		if conflicted[i] {
			st = Conflict
		} else if res, err := patches.Apply(theirs, fp.one(newPath, []*patches.Hunk{h})); err == nil {
			// This hunk alone still fits; the file needed the merge
			// for another.
			st = Exact
			r := fp.hunkReport(h, st)
			if r.Offset, r.Line = res.Hunks[0].Offset, res.Hunks[0].Line; r.Offset != 0 {
				r.Status = Offset
			}
			pr.Hunks = append(pr.Hunks, r)
			continue
		}
		pr.Hunks = append(pr.Hunks, fp.hunkReport(h, st))
	}
	if !m.Clean() {
		pr.Clean = false
		return ""
	}
	merged := []byte(strings.Join(m.Lines, ""))
	if bytes.Equal(merged, theirsBytes) {
		return ""
	}
	theirs.stage(newPath, merged, true)
	f := &patches.FileResult{Path: newPath, Op: patches.Modify, Before: theirsBytes, After: merged, Mode: fc.NewMode, OldMode: fc.OldMode}
	return section(newPath, f, theirsBytes, unified(lines(theirsBytes), m.Lines), theirs.mode(newPath))
}

// hunkSpans returns, per hunk, the 0-based base line range [start, end]
// it covers (inclusive of its context), from where Apply placed it.
func hunkSpans(fc *patches.FileChange, r *patches.Result) [][2]int {
	out := make([][2]int, len(fc.Hunks))
	for i, h := range fc.Hunks {
		start := h.OrigStart - 1
		if i < len(r.Hunks) {
			start = r.Hunks[i].Line - 1
		}
		out[i] = [2]int{start, start + len(h.Old)}
	}
	return out
}

// verify re-parses a ported patch and applies it to the target (with the
// earlier ported patches): a port that does not read back or apply is a
// bug, never a draft.
func verify(name string, text []byte, theirs *mem) error {
	d, err := patches.ParseDiff(name, text)
	if err != nil {
		return fmt.Errorf("ported %s does not parse (a bug in arpatch's port): %w", name, err)
	}
	res, err := patches.Apply(theirs.committed(), []*patches.Patch{{Name: name, Diff: d}})
	if err != nil {
		return fmt.Errorf("ported %s does not apply to the target (a bug in arpatch's port): %w", name, err)
	}
	for _, f := range res.Files {
		want, _ := theirs.ReadFile(f.Path)
		if !bytes.Equal(f.After, want) {
			return fmt.Errorf("ported %s gives other bytes for %s than the port computed (a bug in arpatch's port)", name, f.Path)
		}
	}
	return nil
}

// rewritePaths names, in the DEP-3 header, each moved file by its new
// path: a description that names the old one would be stale in the draft.
// Only whole occurrences of the old path are rewritten (a path wrapped
// over two lines is left for the review).
func rewritePaths(header []byte, moves []gitsrc.Rename) []byte {
	h := string(header)
	for _, m := range moves {
		h = strings.ReplaceAll(h, m.From, m.To)
	}
	return []byte(h)
}

// rewriteAppliesTo points the DEP-3 Applies-To field at the target.
func rewriteAppliesTo(header []byte, series, from, to string) []byte {
	var out []string
	skip := false
	for _, l := range strings.SplitAfter(string(header), "\n") {
		if skip && (strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t")) {
			continue
		}
		skip = false
		if strings.HasPrefix(l, "Applies-To:") {
			l = fmt.Sprintf("Applies-To: sglang %s (ported by `arpatch patches port` from %s, tested on %s)\n", to, series, githash.Hash(from).Short())
			skip = true
		}
		out = append(out, l)
	}
	return []byte(strings.Join(out, ""))
}

// mem is a copy-on-write view of a commit's files; stage/commit let a
// patch's files become visible to the next patch only once it is clean.
type mem struct {
	base    patches.Tree
	files   map[string]*memFile
	pending map[string]*memFile
}

type memFile struct {
	data   []byte
	exists bool
}

func newMem(t patches.Tree) *mem {
	return &mem{base: t, files: map[string]*memFile{}, pending: map[string]*memFile{}}
}

// ReadFile reads staged, then committed, then the commit's bytes.
func (m *mem) ReadFile(path string) ([]byte, error) {
	return m.read(path, m.pending, m.files)
}

// read reads path from the first layer that holds it, else from the
// commit.
func (m *mem) read(path string, layers ...map[string]*memFile) ([]byte, error) {
	for _, layer := range layers {
		if f, ok := layer[path]; ok {
			if !f.exists {
				return nil, fmt.Errorf("%s: %w", path, fs.ErrNotExist)
			}
			return f.data, nil
		}
	}
	return m.base.ReadFile(path)
}

// mode is the git mode of path in the commit the view starts from ("" when
// the tree does not say).
func (m *mem) mode(path string) string {
	if t, ok := m.base.(patches.Moder); ok {
		return t.Mode(path)
	}
	return ""
}

func (m *mem) set(path string, data []byte, exists bool) {
	m.files[path] = &memFile{data: data, exists: exists}
}

func (m *mem) stage(path string, data []byte, exists bool) {
	m.pending[path] = &memFile{data: data, exists: exists}
}

// commit makes the staged files of a clean patch part of the view.
func (m *mem) commit() {
	for p, f := range m.pending {
		m.files[p] = f
	}
	clear(m.pending)
}

// committed is the view without staged files.
func (m *mem) committed() patches.Tree { return committedView{m} }

type committedView struct{ m *mem }

func (c committedView) ReadFile(path string) ([]byte, error) {
	return c.m.read(path, c.m.files)
}
