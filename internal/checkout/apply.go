package checkout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/recipes"
)

// ApplyOptions holds every input of Apply.
type ApplyOptions struct {
	Recipe  *recipes.Recipe
	Catalog *patches.Catalog
	Src     string // the checkout; cloned when missing
	Repo    string // clone source instead of the recipe's URL (--repo)
	Commit  string // commit instead of the recipe's pin (--commit)
	Series  string // force this series (--series)
	DryRun  bool
	Version string // arpatch version, recorded in the state
	// Progress receives clone progress; nil for none.
	Progress io.Writer
	Now      func() time.Time
}

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

// DirtyError is a checkout with uncommitted changes to tracked files.
type DirtyError struct {
	Src     string
	Changes []gitsrc.Change
	// Fits, when the changes touch the series' files, says how each patch
	// relates to the tree (a half-applied series shows here).
	Fits []patches.PatchFit
}

func (e *DirtyError) Error() string {
	var b strings.Builder
	applied := 0
	for _, f := range e.Fits {
		if f.Fit == patches.FitApplied {
			applied++
		}
	}
	if applied > 0 && applied < len(e.Fits) {
		fmt.Fprintf(&b, "%s is half-applied: arpatch has no state for it and will not guess which bytes are yours:", e.Src)
		for _, f := range e.Fits {
			state := "not applied"
			if f.Fit == patches.FitApplied {
				state = "applied"
			} else if f.Fit == patches.FitConflict {
				state = "partly applied or changed: neither it nor its reverse applies"
			}
			fmt.Fprintf(&b, "\n  %s: %s", f.Patch, state)
		}
		b.WriteString("\nuncommitted changes:")
	} else {
		fmt.Fprintf(&b, "%s has uncommitted changes:", e.Src)
	}
	for _, c := range e.Changes {
		b.WriteString("\n  " + c.String())
	}
	fmt.Fprintf(&b, "\nnothing was changed. Commit or stash them (git -C %s stash), or restore upstream's files (git -C %s checkout -- .), then run apply again", e.Src, e.Src)
	return b.String()
}

// CommitMismatchError is a checkout at another commit than the one asked for.
type CommitMismatchError struct {
	Src, Head, Want string
	FromFlag        bool
}

func (e *CommitMismatchError) Error() string {
	src := "the recipe pins"
	fix := fmt.Sprintf("Check out the pin (git -C %s checkout --detach %s) or, to patch this commit, pass --commit %s", e.Src, e.Want, e.Head)
	if e.FromFlag {
		src = "--commit asks for"
		fix = fmt.Sprintf("Check it out first (git -C %s checkout --detach %s)", e.Src, e.Want)
	}
	return fmt.Sprintf("%s is at commit %s, but %s %s; nothing was changed. %s", e.Src, e.Head, src, e.Want, fix)
}

var hex40 = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Apply brings opts.Src to the recipe's commit with its patch series
// applied. It clones when Src is missing, then refuses a checkout at
// another commit (*CommitMismatchError) or with uncommitted tracked changes
// (*DirtyError), verifies every patch's sha256 (*patches.TamperError),
// checks every hunk in memory (*patches.ConflictError, *patches.FileError)
// and only then writes all files atomically and records the state. An
// already-applied series is reported and nothing is written. After any
// error the checkout is byte-identical to before.
func Apply(ctx context.Context, opts ApplyOptions) (*ApplyReport, error) {
	r := opts.Recipe
	rep := &ApplyReport{Src: opts.Src, DryRun: opts.DryRun}
	want := r.Upstream.Commit
	if opts.Commit != "" {
		want = strings.ToLower(opts.Commit)
	}
	source := r.Upstream.URL
	if opts.Repo != "" {
		source = opts.Repo
	}

	if _, err := os.Lstat(opts.Src); errors.Is(err, fs.ErrNotExist) {
		if opts.DryRun {
			return dryRunClone(opts, rep, source, want)
		}
		repo, info, err := gitsrc.Clone(ctx, source, opts.Src, opts.Progress)
		if err != nil {
			return nil, err
		}
		rep.Cloned, rep.Clone = true, info
		if !hex40.MatchString(want) {
			if want, err = repo.Resolve(want); err != nil {
				os.RemoveAll(opts.Src)
				return nil, err
			}
		}
		if err := repo.Checkout(want); err != nil {
			os.RemoveAll(opts.Src)
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	start := time.Now()
	repo, err := gitsrc.Open(opts.Src)
	if err != nil {
		return nil, err
	}
	if !hex40.MatchString(want) {
		if want, err = repo.Resolve(want); err != nil {
			return nil, err
		}
	}
	head, err := repo.Head()
	if err != nil {
		return nil, err
	}
	rep.Commit = head
	if head != want {
		return nil, &CommitMismatchError{Src: opts.Src, Head: head, Want: want, FromFlag: opts.Commit != ""}
	}
	gitDir := repo.GitDir()
	if !opts.DryRun {
		unlock, err := lock(gitDir)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	root := safefs.Root{Dir: opts.Src}

	st, err := ReadState(gitDir)
	if err != nil {
		return nil, err
	}
	if st != nil {
		return rep, alreadyApplied(opts, rep, st, root)
	}
	changes, err := repo.Changes()
	if err != nil {
		return nil, err
	}
	var tracked []gitsrc.Change
	for _, c := range changes {
		if c.Untracked() {
			rep.Untracked = append(rep.Untracked, c.Path)
		} else {
			tracked = append(tracked, c)
		}
	}

	if r.Series == "" {
		if len(tracked) > 0 {
			return nil, &DirtyError{Src: opts.Src, Changes: tracked}
		}
		rep.Result = &patches.Result{}
		if opts.DryRun {
			return rep, nil
		}
		return rep, writeState(gitDir, newState(opts, rep, head))
	}
	choice, err := opts.Catalog.Resolve(r.Series, opts.Series, head, root, r.Skip)
	if err != nil {
		return nil, err
	}
	rep.Series, rep.Reason, rep.Patches = choice.Series, choice.Reason, choice.Patches

	if len(tracked) > 0 {
		fits := patches.Check(root, choice.Patches)
		if allApplied(fits) && onlySeriesFiles(tracked, choice.Patches) {
			rep.AlreadyApplied, rep.ByHand = true, true
			return rep, nil
		}
		return nil, &DirtyError{Src: opts.Src, Changes: tracked, Fits: touching(tracked, choice.Patches, fits)}
	}
	res, err := patches.Apply(root, choice.Patches)
	if err != nil {
		if fits := patches.Check(root, choice.Patches); allApplied(fits) {
			// A clean tree that already holds the series: the patches
			// are committed at this commit.
			rep.AlreadyApplied, rep.ByHand = true, true
			return rep, nil
		}
		return nil, fmt.Errorf("%w\nthe tree is unchanged. Run `arpatch patches check --repo %s --commit %s` to see which series fits this commit", err, opts.Src, head)
	}
	rep.Result = res
	if opts.DryRun {
		return rep, nil
	}
	var writes []safefs.Change
	for _, f := range res.Files {
		writes = append(writes, safefs.Change{Path: f.Path, Data: f.After, Mode: gitMode(f.Mode)})
	}
	if err := root.Write(writes); err != nil {
		return nil, fmt.Errorf("writing the patched files: %w", err)
	}
	if err := writeState(gitDir, newState(opts, rep, head)); err != nil {
		var undo []safefs.Change
		for _, f := range res.Files {
			undo = append(undo, safefs.Change{Path: f.Path, Data: f.Before})
		}
		if uerr := root.Write(undo); uerr != nil {
			return nil, fmt.Errorf("recording apply state: %v; restoring the files also failed: %v", err, uerr)
		}
		return nil, fmt.Errorf("recording apply state in %s: %w; the files were restored", StatePath(gitDir), err)
	}
	rep.ApplyTime = time.Since(start)
	return rep, nil
}

// dryRunClone reports what a real run would do with a missing Src, checking
// the series against the commit when the source is a local repository.
func dryRunClone(opts ApplyOptions, rep *ApplyReport, source, want string) (*ApplyReport, error) {
	rep.WouldClone = true
	rep.Commit = want
	if opts.Recipe.Series == "" || gitsrc.LocalGitDir(source) == "" {
		return rep, nil
	}
	repo, err := gitsrc.OpenAny(source)
	if err != nil {
		return nil, err
	}
	if !hex40.MatchString(want) {
		if want, err = repo.Resolve(want); err != nil {
			return nil, err
		}
		rep.Commit = want
	}
	tree, err := repo.TreeAt(want)
	if err != nil {
		return nil, err
	}
	choice, err := opts.Catalog.Resolve(opts.Recipe.Series, opts.Series, want, tree, opts.Recipe.Skip)
	if err != nil {
		return nil, err
	}
	rep.Series, rep.Reason, rep.Patches = choice.Series, choice.Reason, choice.Patches
	res, err := patches.Apply(tree, choice.Patches)
	if err != nil {
		return nil, err
	}
	rep.Result = res
	return rep, nil
}

// alreadyApplied handles a checkout that has apply state: the same recipe
// and series with undrifted files is a no-op; anything else is refused.
func alreadyApplied(opts ApplyOptions, rep *ApplyReport, st *State, root safefs.Root) error {
	if st.Recipe != opts.Recipe.Name {
		return fmt.Errorf("%s already has recipe %q applied (series %s); run `arpatch revert --src %s` first", opts.Src, st.Recipe, orNone(st.Series), opts.Src)
	}
	if opts.Series != "" && opts.Series != st.Series {
		return fmt.Errorf("%s has series %s applied, not %s; run `arpatch revert --src %s` first", opts.Src, orNone(st.Series), opts.Series, opts.Src)
	}
	drift, err := st.drift(root)
	if err != nil {
		return err
	}
	if len(drift) > 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "%s has series %s applied, but files changed since:", opts.Src, orNone(st.Series))
		for _, d := range drift {
			b.WriteString("\n  " + d.String())
		}
		fmt.Fprintf(&b, "\nnothing was changed. Keep your edits and commit them, or run `arpatch revert --src %s --force` to discard them", opts.Src)
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

func newState(opts ApplyOptions, rep *ApplyReport, commit string) *State {
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	st := &State{
		Schema:         StateSchema,
		Recipe:         opts.Recipe.Name,
		RecipeSource:   opts.Recipe.Source,
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
	for _, f := range rep.Result.Files {
		st.Files = append(st.Files, FileState{Path: f.Path, Op: f.Op.String(), Before: sum(f.Before), After: sum(f.After)})
	}
	for _, h := range rep.Result.Offsets() {
		st.Offsets = append(st.Offsets, Offset{Patch: h.Patch, Path: h.Path, Hunk: h.Hunk, Offset: h.Offset})
	}
	return st
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

func gitMode(m string) fs.FileMode {
	if m == "100755" {
		return 0o755
	}
	return 0o644
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
