package checkout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/recipes"
)

// ApplyOptions holds every input of Apply.
type ApplyOptions struct {
	Recipe  *recipes.Recipe
	Catalog *patches.Catalog
	Src     string // the checkout; cloned when missing or an empty directory
	Repo    string // clone source instead of the recipe's URL (--repo)
	Commit  string // commit instead of the recipe's pin (--commit)
	Series  string // force this series (--series)
	DryRun  bool
	Version string // arpatch version, recorded in the state
	// Progress receives clone progress; nil for none.
	Progress io.Writer
	Now      func() time.Time
	// Again is the arpatch command a remedy says to run again once its
	// steps are done: "apply" when empty; ab build, which applies to its
	// own trees, passes "ab build" (an apply there would not help).
	Again string
}

// again is the command a remedy says to run again (ApplyOptions.Again).
func (o ApplyOptions) again() string { return cmp.Or(o.Again, "apply") }

// ApplyReport says what Apply did.
type ApplyReport struct {
	Src            string
	Cloned         bool
	Clone          gitsrc.CloneInfo
	Commit         string
	Series         *patches.Series // nil for a recipe without patches
	Reason         string          // why this series
	Patches        []*patches.Patch
	Result         *patches.Result // nil when nothing was computed
	AlreadyApplied bool
	ByHand         bool // already applied, but with no arpatch state
	DryRun         bool
	WouldClone     bool // dry run: Src is missing and would be cloned
	Untracked      []string
	ApplyTime      time.Duration // from tree checks to state written, clone excluded
}

// Apply brings opts.Src to the recipe's commit with its patch series
// applied. It clones when Src is missing (into a temp directory beside it,
// renamed into place when the checkout is complete), then refuses a
// checkout at another commit (*CommitMismatchError) or with uncommitted
// tracked changes (*DirtyError, which also reports a half-applied series
// patch by patch), verifies every patch's sha256 (*patches.TamperError),
// checks that the files the series touches hold HEAD's bytes (git status
// can hide edits behind skip-worktree), checks every hunk in memory
// (*patches.ConflictError, *patches.FileError), and only then writes. The
// writes are journaled: the state is recorded as incomplete first, files
// go in patch order (so a kill can never leave a later patch without the
// one it requires), and the state is completed last. An already-applied
// series is reported and nothing is written. After any error the checkout
// is byte-identical to before.
func Apply(ctx context.Context, opts ApplyOptions) (*ApplyReport, error) {
	rep := &ApplyReport{Src: opts.Src, DryRun: opts.DryRun}
	// Resolve: the checkout (cloned when missing) at the commit asked for.
	missing, err := cloneTarget(opts.Src)
	if err != nil {
		return nil, err
	}
	if missing && opts.DryRun {
		return dryRunClone(opts, rep, opts.source(), opts.want())
	}
	repo, head, err := checkoutAt(ctx, opts, rep, missing)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	gitDir := repo.GitDir()
	unlock, err := lockToWrite(gitDir, opts.DryRun)
	if err != nil {
		return nil, err
	}
	defer unlock()
	root := safefs.Root{Dir: opts.Src}
	st, err := readTrusted(repo, opts.Src, opts.Catalog)
	if err != nil {
		return nil, err
	}
	if st != nil {
		return rep, alreadyApplied(opts, rep, st, root, head)
	}
	if opts.Recipe.Series == "" && opts.Series == "" {
		return applyNoSeries(opts, rep, repo, root, head)
	}

	// Check: the series is worked out (prepareSeries: its choice, the
	// checks against HEAD, the patched bytes, the gate rule) on a
	// repository of its own while the work tree is read here; both only
	// read. A tree with changes is refused before any refusal of the
	// series but its choice.
	read := make(chan *workTree, 1) // what the work tree holds, for the gate rule's blob ids
	series := alongside(opts.Src, func(own *gitsrc.Repo) (*preparedSeries, error) {
		return prepareSeries(opts, own, root, head, read)
	})
	defer func() { _, _ = series() }() // nothing runs on after Apply returns
	tree, err := readWorkTree(repo, head, root)
	read <- tree // nil when it could not be read: then no file is trusted
	if err != nil {
		return nil, err
	}
	rep.Untracked = tree.untracked
	prep, err := series()
	if prep == nil || prep.choice == nil {
		return nil, err // no series fits, or the repository could not be read
	}
	rep.Series, rep.Reason, rep.Patches = prep.choice.Series, prep.choice.Reason, prep.choice.Patches
	if len(tree.tracked) > 0 {
		return changedTree(opts, rep, root, tree, prep.choice)
	}
	if prep.committed {
		rep.AlreadyApplied, rep.ByHand = true, true
		return rep, nil
	}
	if err != nil {
		return nil, err
	}
	rep.Result = prep.res
	if opts.DryRun {
		return rep, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted before writing; %s is unchanged", opts.Src)
	}

	// Write and record: journaled by the apply state.
	if err := writeSeries(gitDir, root, newState(opts, rep, head), prep); err != nil {
		return nil, err
	}
	rep.ApplyTime = time.Since(start)
	return rep, nil
}

// want is the commit Apply brings the checkout to: --commit (a full hash
// in lower case), else the recipe's pin.
func (o ApplyOptions) want() string {
	if o.Commit == "" {
		return o.Recipe.Upstream.Commit
	}
	if githash.Hash(strings.ToLower(o.Commit)).IsFull() {
		return strings.ToLower(o.Commit)
	}
	return o.Commit
}

// source is where a clone comes from: --repo, else the recipe's URL.
func (o ApplyOptions) source() string { return cmp.Or(o.Repo, o.Recipe.Upstream.URL) }

// checkoutAt returns the checkout, cloned first when missing (cloneInto,
// recorded in rep), with its HEAD, which it records in rep; it refuses a
// checkout at another commit than the one asked for
// (*CommitMismatchError, naming a series arpatch applied there, which the
// remedy reverts first). A want that names the clone source's HEAD (HEAD,
// HEAD~1, ...: a linked worktree's own, as the dry run reads it) is
// resolved in the source, since the clone has no copy of it; branches and
// tags resolve in the clone.
func checkoutAt(ctx context.Context, opts ApplyOptions, rep *ApplyReport, missing bool) (*gitsrc.Repo, string, error) {
	want, source := opts.want(), opts.source()
	if missing {
		if strings.HasPrefix(want, "HEAD") && gitsrc.LocalGitDir(source) != "" {
			src, err := gitsrc.OpenAny(source)
			if err != nil {
				return nil, "", err
			}
			if want, err = src.Resolve(want); err != nil {
				return nil, "", err
			}
		}
		info, err := cloneInto(ctx, source, opts.Src, want, opts.Progress)
		if err != nil {
			return nil, "", err
		}
		rep.Cloned, rep.Clone = true, info
	}
	repo, err := gitsrc.Open(opts.Src)
	if err != nil {
		return nil, "", err
	}
	if !githash.Hash(want).IsFull() {
		if want, err = repo.Resolve(want); err != nil {
			return nil, "", err
		}
	}
	head, err := repo.Head()
	if err != nil {
		return nil, "", err
	}
	if head != want {
		e := &CommitMismatchError{Src: opts.Src, Head: head, Want: want, FromFlag: opts.Commit != "", Missing: !repo.HasCommit(want), Again: opts.again()}
		if st, err := ReadState(repo.GitDir()); err == nil && st != nil && st.Commit == head {
			// A recipe with no series records its apply too: the
			// remedy forgets it first, or the checkout it names would
			// leave a state at another commit (movedHead).
			e.Applied, e.AppliedRecipe = st.Series, st.Recipe
		}
		return nil, "", e
	}
	rep.Commit = head
	return repo, head, nil
}

// lockToWrite takes the checkout's lock (lock) and removes the temp files
// a killed write left (removeStrayTemps), unless dryRun, which writes
// nothing and takes no lock. It returns the unlock.
func lockToWrite(gitDir string, dryRun bool) (func(), error) {
	if dryRun {
		return func() {}, nil
	}
	unlock, err := lock(gitDir)
	if err != nil {
		return nil, err
	}
	removeStrayTemps(gitDir)
	return unlock, nil
}

// changedTree is Apply's answer for a tree with tracked changes: the
// series applied by hand when the changes are the series' files and hold
// every patch, else a *DirtyError that says how each patch the changes
// touch relates to the tree.
func changedTree(opts ApplyOptions, rep *ApplyReport, root safefs.Root, tree *workTree, choice *patches.Choice) (*ApplyReport, error) {
	fits := patches.Check(root, choice.Patches)
	if allApplied(fits) && onlySeriesFiles(tree.tracked, choice.Patches) {
		rep.AlreadyApplied, rep.ByHand = true, true
		return rep, nil
	}
	return nil, &DirtyError{Src: opts.Src, Changes: tree.tracked, Hidden: tree.hidden, Fits: touching(tree.tracked, choice.Patches, fits)}
}

// workTree is what Apply reads of the work tree.
type workTree struct {
	tracked   []gitsrc.Change // changes to tracked files
	hidden    []string        // those of tracked that git status cannot see (hiddenChanges)
	untracked []string        // untracked paths, reported only
}

// readWorkTree reads the checkout's changes (gitsrc.Repo.Changes),
// refusing tracked changes that are only line endings git would convert
// (lineEndings), and finds those hidden from git status.
func readWorkTree(repo *gitsrc.Repo, head string, root safefs.Root) (*workTree, error) {
	changes, err := repo.Changes()
	if err != nil {
		return nil, err
	}
	t := &workTree{}
	for _, c := range changes {
		if c.Untracked() {
			t.untracked = append(t.untracked, c.Path)
		} else {
			t.tracked = append(t.tracked, c)
		}
	}
	if len(t.tracked) > 0 {
		if err := lineEndings(repo, head, root, t.tracked); err != nil {
			return nil, err
		}
	}
	if t.hidden, err = hiddenChanges(repo, t.tracked); err != nil {
		return nil, err
	}
	return t, nil
}

// applyNoSeries is Apply for a recipe without patches: a clean tree at
// the commit, recorded as such (not on a dry run).
func applyNoSeries(opts ApplyOptions, rep *ApplyReport, repo *gitsrc.Repo, root safefs.Root, head string) (*ApplyReport, error) {
	tree, err := readWorkTree(repo, head, root)
	if err != nil {
		return nil, err
	}
	rep.Untracked = tree.untracked
	if len(tree.tracked) > 0 {
		return nil, &DirtyError{Src: opts.Src, Changes: tree.tracked, Hidden: tree.hidden, Again: opts.again()}
	}
	rep.Result = &patches.Result{}
	if opts.DryRun {
		return rep, nil
	}
	return rep, writeState(repo.GitDir(), newState(opts, rep, head))
}

// preparedSeries is what Apply works out of the series, reading only.
type preparedSeries struct {
	choice *patches.Choice // nil when no series fits
	res    *patches.Result // the patched files; nil when a check failed
	// committed: the patches do not apply because the clean tree at HEAD
	// holds them all (committed at this commit).
	committed bool
}

// prepareSeries works out, without writing anything, what Apply writes
// for the series at head, one step after another: the series for this
// commit (Catalog.Resolve, its refusal naming the check command), the
// touched files holding HEAD's bytes and modes (sameAsHead), every hunk
// applied in memory (patches.Apply; when one does not, a tree that holds
// them all is committed, one that holds some a *DirtyError with
// Committed), and the built-in gate rule on the result
// (patches.CheckResult, with the index's paths, and the index's blob ids
// of the files read that the work tree, once read, shows clean). The
// error is the first failed step's, ready to print; the steps before it
// are kept in p.
func prepareSeries(opts ApplyOptions, repo *gitsrc.Repo, root safefs.Root, head string, read <-chan *workTree) (*preparedSeries, error) {
	p := &preparedSeries{}
	r := opts.Recipe
	check := opts.Catalog.CheckCommand(opts.Src, head)
	choice, err := opts.Catalog.Resolve(r.Series, opts.Series, head, root, r.Skip)
	if err != nil {
		var nse *patches.NoSeriesError
		if errors.As(err, &nse) {
			explainMoves(nse, opts.Catalog, repo, opts.Src, head)
		}
		return p, withCheck(err, opts.Catalog, opts.Src, head)
	}
	p.choice = choice
	if err := sameAsHead(repo, head, root, choice.Patches, check); err != nil {
		return p, err
	}
	res, err := patches.Apply(root, choice.Patches)
	if err != nil {
		fits := patches.Check(root, choice.Patches)
		switch patches.Verdict(fits) {
		case patches.VerdictApplied:
			p.committed = true
			return p, nil
		case patches.VerdictPartial:
			return p, &DirtyError{Src: opts.Src, Fits: fits, Committed: true}
		}
		return p, fmt.Errorf("%w\nthe tree is unchanged. Run `%s` to see which series fits this commit", err, check)
	}
	listed, err := repo.TrackedPaths()
	if err != nil {
		return p, err
	}
	blobs := sync.OnceValue(func() map[string]string { return cleanBlobs(repo, <-read) })
	if err := patches.CheckResult(listedRoot{root, listed, blobs}, res, choice.Patches); err != nil {
		return p, fmt.Errorf("series %s: %w\nthe tree is unchanged", choice.Series.Name, err)
	}
	p.res = res
	return p, nil
}

// writeSeries writes the patched files, journaled: st is recorded
// incomplete first, the files go in patch order (so a kill can never
// leave a later patch without the one it requires), and st is completed
// last. A failure restores the files and removes the state, or, when the
// files cannot be restored, keeps the incomplete state and names the
// revert that finishes the job.
func writeSeries(gitDir string, root safefs.Root, st *State, p *preparedSeries) error {
	src := root.Dir
	st.Incomplete = true
	if err := writeState(gitDir, st); err != nil {
		return fmt.Errorf("recording apply state in %s: %w; nothing was changed", StatePath(gitDir), err)
	}
	if err := root.Write(orderedWrites(p.res, p.choice.Patches, false)); err != nil {
		var we *safefs.WriteError
		if errors.As(err, &we) && !we.Restored {
			// A double fault: some files hold patched bytes. The state,
			// still marked incomplete, is the record status and revert
			// need; it stays.
			return fmt.Errorf("writing the patched files: %w; the apply state stays, marked incomplete, so that nothing is lost: once the cause is fixed, run `%s`", err, sh("arpatch", "revert", "--src", src))
		}
		if rerr := removeState(gitDir); rerr != nil {
			return fmt.Errorf("writing the patched files: %w; the files were restored, but the apply state %s could not be removed (%v): remove it", err, StatePath(gitDir), rerr)
		}
		return fmt.Errorf("writing the patched files: %w", err)
	}
	st.Incomplete = false
	if err := writeState(gitDir, st); err != nil {
		if uerr := root.Write(orderedWrites(p.res, p.choice.Patches, true)); uerr != nil {
			return fmt.Errorf("recording apply state: %v; restoring the files also failed: %v; run `%s`", err, uerr, sh("arpatch", "revert", "--src", src))
		}
		if rerr := removeState(gitDir); rerr != nil {
			return fmt.Errorf("recording apply state in %s: %w; the files were restored, but the incomplete state could not be removed (%v): remove it", StatePath(gitDir), err, rerr)
		}
		return fmt.Errorf("recording apply state in %s: %w; the files were restored", StatePath(gitDir), err)
	}
	return nil
}

// inPatchOrder returns the result's files ordered by the first patch that
// touches each (stable within a patch): the order apply writes them in,
// and, reversed, the order revert restores them in.
func inPatchOrder(res *patches.Result, ps []*patches.Patch) []*patches.FileResult {
	rank := map[string]int{}
	for i, p := range ps {
		for _, fc := range p.Diff.Changes {
			if _, ok := rank[fc.Path]; !ok {
				rank[fc.Path] = i
			}
		}
	}
	files := append([]*patches.FileResult(nil), res.Files...)
	sort.SliceStable(files, func(i, j int) bool { return rank[files[i].Path] < rank[files[j].Path] })
	return files
}

func orderedWrites(res *patches.Result, ps []*patches.Patch, undo bool) []safefs.Change {
	var out []safefs.Change
	for _, f := range inPatchOrder(res, ps) {
		c := safefs.Change{Path: f.Path, Data: f.After}
		if f.Op == patches.Create || f.OldMode != "" {
			c.Mode = gitMode(f.Mode)
		}
		if undo {
			c = safefs.Change{Path: f.Path, Data: f.Before}
			if f.OldMode != "" {
				c.Mode = gitMode(f.OldMode)
			}
		}
		out = append(out, c)
	}
	if undo {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out
}

// alreadyApplied handles a checkout that has apply state: the same recipe
// and the same patches (names and sha256) with undrifted files at the
// commit they were applied at is a no-op; a moved HEAD, an interrupted
// apply, another recipe, another patch set or drift is refused, naming
// what differs.
func alreadyApplied(opts ApplyOptions, rep *ApplyReport, st *State, root safefs.Root, head string) error {
	if head != st.Commit {
		return movedHead(opts.Src, head, st, opts.again())
	}
	if st.Reverting {
		return fmt.Errorf("%s: a revert of series %s was interrupted part way (the state says reverting); run `%s` to finish it, then run %s again", opts.Src, cmp.Or(st.Series, "(none)"), sh("arpatch", "revert", "--src", opts.Src), opts.again())
	}
	if st.Incomplete {
		return fmt.Errorf("%s: an apply of series %s was interrupted part way (the state says incomplete); run `%s` to restore upstream's bytes, then run %s again", opts.Src, cmp.Or(st.Series, "(none)"), sh("arpatch", "revert", "--src", opts.Src), opts.again())
	}
	if st.Recipe != opts.Recipe.Name {
		return fmt.Errorf("%s already has recipe %q applied (series %s); run `%s` first", opts.Src, st.Recipe, cmp.Or(st.Series, "(none)"), sh("arpatch", "revert", "--src", opts.Src))
	}
	want, err := requestedPatches(opts, st)
	if err != nil {
		return err
	}
	if got := patchList(st.Patches); got != want {
		return fmt.Errorf("%s has another patch set applied than this run asks for:\n  applied:   %s\n  requested: %s\nnothing was changed; run `%s` first", opts.Src, got, want, sh("arpatch", "revert", "--src", opts.Src))
	}
	drift, err := st.drift(root)
	if err != nil {
		return err
	}
	if len(drift) > 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "%s has series %s applied, but files changed since:", opts.Src, cmp.Or(st.Series, "(none)"))
		for _, d := range drift {
			b.WriteString("\n  " + d.String())
		}
		fmt.Fprintf(&b, "\nnothing was changed. Run `%s` (add --force to discard the edits above; save them first with git diff), then run %s again", sh("arpatch", "revert", "--src", opts.Src), opts.again())
		return errors.New(b.String())
	}
	rep.AlreadyApplied = true
	rep.Reason = "recorded in the apply state: " + st.SeriesReason
	if st.Series != "" {
		if s, err := opts.Catalog.Get(st.Series); err == nil {
			rep.Series = s
		}
	}
	return nil
}

// requestedPatches lists, as patchList does, the patches this run would
// apply to a tree whose state names st.Series.
func requestedPatches(opts ApplyOptions, st *State) (string, error) {
	name := opts.Series
	if name == "" {
		name = st.Series
	}
	if opts.Recipe.Series == "" && opts.Series == "" {
		return patchList(nil), nil
	}
	if name == "" {
		return "", fmt.Errorf("%s has no series applied, but recipe %s asks for series %s; run `%s` first", opts.Src, opts.Recipe.Name, opts.Recipe.Series, sh("arpatch", "revert", "--src", opts.Src))
	}
	s, err := opts.Catalog.Get(name)
	if err != nil {
		return "", fmt.Errorf("%s has series %s applied, which this run's catalog lacks (%v); pass the --patches-dir it came from, or run `%s`", opts.Src, name, err, sh("arpatch", "revert", "--src", opts.Src))
	}
	ps, err := s.Load(opts.Recipe.Skip)
	if err != nil {
		return "", err
	}
	var out []PatchState
	for _, p := range ps {
		out = append(out, PatchState{Name: p.Name, SHA256: p.SHA256})
	}
	return patchList(out), nil
}

func patchList(ps []PatchState) string {
	if len(ps) == 0 {
		return "(no patches)"
	}
	var s []string
	for _, p := range ps {
		s = append(s, p.Name+"@"+digest.Short(p.SHA256))
	}
	return strings.Join(s, " ")
}

func newState(opts ApplyOptions, rep *ApplyReport, commit string) *State {
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	st := &State{
		Schema:         StateSchema,
		Recipe:         opts.Recipe.Name,
		RecipeSource:   absSource(opts.Recipe.Source),
		RecipeSHA256:   opts.Recipe.SHA256,
		UpstreamURL:    opts.Recipe.Upstream.URL,
		Commit:         commit,
		ArpatchVersion: opts.Version,
		AppliedAt:      now().UTC().Truncate(time.Second),
		Patches:        []PatchState{},
		Files:          []FileState{},
	}
	if rep.Series != nil {
		st.Series, st.SeriesSource, st.SeriesReason = rep.Series.Name, rep.Series.Dir, rep.Reason
	}
	for _, p := range rep.Patches {
		st.Patches = append(st.Patches, PatchState{Name: p.Name, SHA256: p.SHA256})
	}
	// In patch order, so that revert, restoring them in reverse, undoes
	// apply step by step.
	st.Files = fileStates(rep.Result, rep.Patches)
	for _, h := range rep.Result.Offsets() {
		st.Offsets = append(st.Offsets, Offset{Patch: h.Patch, Path: h.Path, Hunk: h.Hunk, Offset: h.Offset})
	}
	return st
}

// absSource makes a recipe file's path absolute, so that a later build
// run from elsewhere can read it back; "embedded:NAME" stays.
func absSource(src string) string {
	if src == "" || strings.HasPrefix(src, "embedded:") || filepath.IsAbs(src) {
		return src
	}
	if abs, err := filepath.Abs(src); err == nil {
		return abs
	}
	return src
}

func allApplied(fits []patches.PatchFit) bool {
	for _, f := range fits {
		if f.Fit != patches.FitApplied {
			return false
		}
	}
	return len(fits) > 0
}

func seriesFiles(ps []*patches.Patch) map[string]bool {
	m := map[string]bool{}
	for _, p := range ps {
		for _, fc := range p.Diff.Changes {
			m[fc.Path] = true
		}
	}
	return m
}

func onlySeriesFiles(cs []gitsrc.Change, ps []*patches.Patch) bool {
	m := seriesFiles(ps)
	for _, c := range cs {
		if !m[c.Path] {
			return false
		}
	}
	return true
}

// touching returns fits only when some change touches a series file, so a
// dirty-tree error about unrelated files does not talk about patches.
func touching(cs []gitsrc.Change, ps []*patches.Patch, fits []patches.PatchFit) []patches.PatchFit {
	m := seriesFiles(ps)
	for _, c := range cs {
		if m[c.Path] {
			return fits
		}
	}
	return nil
}

// withCheck fills a *patches.NoSeriesError's remedy with the patches check
// command for repo at commit, through the catalog that was used.
func withCheck(err error, c *patches.Catalog, repo, commit string) error {
	var ns *patches.NoSeriesError
	if errors.As(err, &ns) {
		ns.Check = c.CheckCommand(repo, commit)
	}
	return err
}

// listedRoot is a checkout read through safefs that can list its tracked
// files, so that the built-in rule finds the dispatch header wherever the
// tree keeps it (patches.Lister), and give the blob ids of its clean
// files (patches.BlobTree).
type listedRoot struct {
	safefs.Root
	tracked []string                 // sorted (gitsrc.Repo.TrackedPaths)
	blobs   func() map[string]string // cleanBlobs, asked once; nil: none
}

// ReadFile is safefs.Root's, with a directory absent (wrapping
// fs.ErrNotExist, as patches.Tree has it): the gate rule's Python judge
// asks for NAME.py and NAME/__init__.py where NAME may be a package.
func (l listedRoot) ReadFile(p string) ([]byte, error) {
	b, err := l.Root.ReadFile(p)
	var pe *safefs.PathError
	if errors.As(err, &pe) && l.Root.DirExists(p) {
		return nil, fmt.Errorf("%s is a directory: %w", p, fs.ErrNotExist)
	}
	return b, err
}

// BlobID is the index's blob id of a clean tracked file (cleanBlobs), ""
// for any other path: that one is read.
func (l listedRoot) BlobID(p string) (string, error) {
	if l.blobs == nil {
		return "", nil
	}
	return l.blobs()[p], nil
}

// cleanBlobs is the index's blob ids (gitsrc.Repo.IndexBlobs) of the
// files the work tree t does not show changed: their bytes are the
// blob's. None when t is nil (not read), when the index cannot be read,
// or when t holds a .gitattributes (a conversion git may have made).
func cleanBlobs(repo *gitsrc.Repo, t *workTree) map[string]string {
	if t == nil {
		return nil
	}
	ids, err := repo.IndexBlobs()
	if err != nil {
		return nil
	}
	for _, c := range t.tracked {
		delete(ids, c.Path)
		if path.Base(c.Path) == ".gitattributes" {
			return nil
		}
	}
	for _, p := range t.untracked {
		if path.Base(p) == ".gitattributes" {
			return nil
		}
	}
	return ids
}

// IsDir reports whether path is a directory of the tracked files: some
// tracked path lies under it (patches.DirTree).
func (l listedRoot) IsDir(path string) bool {
	i := sort.SearchStrings(l.tracked, path+"/")
	return i < len(l.tracked) && strings.HasPrefix(l.tracked[i], path+"/")
}

func (l listedRoot) Named(base string) ([]string, error) {
	var out []string
	for _, p := range l.tracked {
		if path.Base(p) == base {
			out = append(out, p)
		}
	}
	return out, nil
}
