package checkout

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/lockfile"
	prog "github.com/arpatch/arpatch/internal/progress"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/internal/shellq"
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
	// Committed is set when the tree is clean but its commit already holds
	// some of the patches.
	Committed bool
	// Hidden are the changed paths whose index entries are marked
	// assume-unchanged: git status and git stash do not see them until
	// the bit is cleared, which the remedy does first.
	Hidden []string
}

func (e *DirtyError) Error() string {
	var b strings.Builder
	applied := 0
	for _, f := range e.Fits {
		if f.Fit == patches.FitApplied {
			applied++
		}
	}
	if e.Committed {
		fmt.Fprintf(&b, "%s is at a commit that already holds part of the series (merged upstream, or committed by hand):", e.Src)
		for _, f := range e.Fits {
			fmt.Fprintf(&b, "\n  %s: %s", f.Patch, fitWords(f.Fit))
		}
		b.WriteString("\nnothing was changed. Use a series made for this commit (arpatch patches check), or skip the patches it already holds with the recipe's skip list")
		return b.String()
	}
	if applied > 0 && applied < len(e.Fits) {
		fmt.Fprintf(&b, "%s is half-applied: arpatch has no state for it and will not guess which bytes are yours:", e.Src)
		for _, f := range e.Fits {
			fmt.Fprintf(&b, "\n  %s: %s", f.Patch, fitWords(f.Fit))
		}
		b.WriteString("\nuncommitted changes:")
	} else {
		fmt.Fprintf(&b, "%s has uncommitted changes:", e.Src)
	}
	for _, c := range e.Changes {
		b.WriteString("\n  " + c.String())
	}
	b.WriteString("\nnothing was changed. ")
	b.WriteString(unhideFirst(e.Src, e.Hidden, fmt.Sprintf("stash them (`%s`), or drop them (`%s`; this loses them), then run apply again",
		sh("git", "-C", e.Src, "stash"), sh("git", "-C", e.Src, "reset", "--hard"))))
	return b.String()
}

func fitWords(f patches.Fit) string {
	switch f {
	case patches.FitApplied:
		return "applied"
	case patches.FitConflict:
		return "partly applied or changed: neither it nor its reverse applies"
	}
	return "not applied"
}

// CommitMismatchError is a checkout at another commit than the one asked
// for. Missing: the checkout does not hold the commit asked for, so it
// must be fetched before it can be checked out.
type CommitMismatchError struct {
	Src, Head, Want string
	FromFlag        bool
	Missing         bool
	// Applied names the series arpatch applied to Src at Head: its files
	// hold the patches, so git checkout would refuse to move, and the
	// remedy reverts first.
	Applied string
}

func (e *CommitMismatchError) Error() string {
	src := "the recipe pins"
	fix := fmt.Sprintf("Check out the pin (`%s`) or, to patch this commit, pass --commit %s", sh("git", "-C", e.Src, "checkout", "--detach", e.Want), e.Head)
	if e.FromFlag {
		src = "--commit asks for"
		fix = fmt.Sprintf("Check it out first (`%s`)", sh("git", "-C", e.Src, "checkout", "--detach", e.Want))
	}
	if e.Missing {
		fix = fmt.Sprintf("%s does not hold commit %s: fetch it (`%s`), check it out (`%s`), then run apply again. If the fetch does not bring it, origin has no such commit: check the hash",
			e.Src, e.Want, sh("git", "-C", e.Src, "fetch", "origin"), sh("git", "-C", e.Src, "checkout", "--detach", e.Want))
		if !e.FromFlag {
			fix += fmt.Sprintf(", or, to patch this commit, pass --commit %s", e.Head)
		}
	}
	if e.Applied != "" {
		// git checkout refuses to move a tree whose files the series
		// changed: revert them to upstream's first.
		fetch := ""
		if e.Missing {
			fetch = fmt.Sprintf(", fetch it (`%s`)", sh("git", "-C", e.Src, "fetch", "origin"))
		}
		fix = fmt.Sprintf("Series %s is applied there, so git checkout would refuse to move: revert it (`%s`)%s, check out %s (`%s`), then run apply again",
			e.Applied, sh("arpatch", "revert", "--src", e.Src), fetch, e.Want, sh("git", "-C", e.Src, "checkout", "--detach", e.Want))
	}
	return fmt.Sprintf("%s is at commit %s, but %s %s; nothing was changed. %s", e.Src, e.Head, src, e.Want, fix)
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
	series := alongside(opts.Src, func(own *gitsrc.Repo) (*preparedSeries, error) {
		return prepareSeries(opts, own, root, head)
	})
	defer func() { _, _ = series() }() // nothing runs on after Apply returns
	tree, err := readWorkTree(repo, head, root)
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

// cloneTarget reports whether src is to be cloned into: missing, or an
// empty directory (which git clone takes too).
func cloneTarget(src string) (bool, error) {
	fi, err := os.Lstat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return emptyDir(src, fi), nil
}

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
		e := &CommitMismatchError{Src: opts.Src, Head: head, Want: want, FromFlag: opts.Commit != "", Missing: !repo.HasCommit(want)}
		if st, err := ReadState(repo.GitDir()); err == nil && st != nil && st.Commit == head && st.Series != "" {
			e.Applied = st.Series
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
		return nil, &DirtyError{Src: opts.Src, Changes: tree.tracked, Hidden: tree.hidden}
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
// (patches.CheckResult, with the index's paths). The error is the first
// failed step's, ready to print; the steps before it are kept in p.
func prepareSeries(opts ApplyOptions, repo *gitsrc.Repo, root safefs.Root, head string) (*preparedSeries, error) {
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
	if err := patches.CheckResult(listedRoot{root, listed}, res, choice.Patches); err != nil {
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

// clonePrefix is how the name of a clone's temp directory beside dst
// starts: ".NAME.arpatch-clone-", then the cloning process's pid, "-"
// and a random suffix.
func clonePrefix(dst string) string { return "." + filepath.Base(dst) + ".arpatch-clone-" }

// StaleClones returns the temp directories beside dst (the --src of a
// clone) that a clone left when its process was killed before it could
// remove them (SIGKILL, a power cut): those named by clonePrefix whose pid
// no longer runs (lockfile.Alive). A live clone's is not listed. The paths
// are dst's directory joined with each name, in name order; none is an
// empty list.
func StaleClones(dst string) []string {
	prefix := clonePrefix(dst)
	all, _ := filepath.Glob(filepath.Join(filepath.Dir(dst), prefix+"*"))
	var stale []string
	for _, d := range all {
		pid, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), prefix), "-")
		if n, err := strconv.Atoi(pid); err == nil && !lockfile.Alive(n) {
			stale = append(stale, d)
		}
	}
	return stale
}

// emptyDir reports whether dst, whose Lstat is fi, is a directory with
// nothing in it: git clone's other destination.
func emptyDir(dst string, fi fs.FileInfo) bool {
	if !fi.IsDir() {
		return false
	}
	ents, err := os.ReadDir(dst)
	return err == nil && len(ents) == 0
}

// cloneInto clones source and checks out want in a temp directory beside
// dst, then renames it to dst, which is missing or an empty directory
// (replaced, its mode kept, as git clone keeps it): a clone that fails or
// is interrupted leaves dst as it was and removes the parent directories
// it created, and two runs cloning to one dst cannot mix.
func cloneInto(ctx context.Context, source, dst, want string, progress io.Writer) (_ gitsrc.CloneInfo, err error) {
	parent := filepath.Dir(dst)
	made, err := safefs.Mkdirs(parent)
	defer func() {
		for i := len(made) - 1; err != nil && i >= 0; i-- {
			_ = os.Remove(made[i]) // fails only when not empty: then it is not ours
		}
	}()
	if err != nil {
		return gitsrc.CloneInfo{}, err
	}
	// Temp dirs carry the pid of their clone: one whose process is gone
	// (killed with SIGKILL, a power cut) is removed here.
	prefix := clonePrefix(dst)
	for _, d := range StaleClones(dst) {
		// Best effort: a stale clone that stays only costs disk, and
		// the next clone tries again.
		_ = os.RemoveAll(d)
	}
	// Clone takes the empty directory: made here with the mode git
	// gives a checkout (0o777 less the umask, as git/git
	// builtin/clone.c@v2.39.5 cmd_clone's mkdir(work_tree, 0777);
	// os.MkdirTemp's is 0o700),
	// not made, removed and made again by Clone. Renamed to dst on
	// success. A temp that fails to go is swept by the next clone
	// (above), once this pid is gone.
	var tmp string
	for {
		tmp = filepath.Join(parent, prefix+strconv.Itoa(os.Getpid())+"-"+strconv.FormatUint(rand.Uint64(), 36))
		err := os.Mkdir(tmp, 0o777)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			return gitsrc.CloneInfo{}, err
		}
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	repo, info, err := gitsrc.Clone(ctx, source, tmp, progress)
	if err != nil {
		return info, err
	}
	if !githash.Hash(want).IsFull() {
		full, err := repo.Resolve(want)
		var pe *gitsrc.PrefixError
		if errors.As(err, &pe) {
			// The clone is temporary: name the repository the user gave.
			pe.Dir = source
		}
		if err != nil {
			return info, err
		}
		want = full
	}
	if progress != nil {
		// As git clone: a count of the files checked out, on the
		// terminal the clone's progress goes to (4,303 files take
		// seconds).
		c := prog.New(progress, "files")
		repo.CheckoutProgress = func(n, total int) { c.Set("checking out", n, total) }
		defer func() { c.Done(err == nil) }()
	}
	if err := repo.Checkout(want); err != nil {
		return info, err
	}
	if ctx.Err() != nil {
		return info, fmt.Errorf("clone %s: interrupted; nothing was kept", source)
	}
	if fi, err := os.Lstat(dst); err == nil {
		// An empty directory: the checkout takes its mode, and
		// rename(2) replaces it only while it is still empty (os.Rename
		// refuses any directory).
		if err := os.Chmod(tmp, fi.Mode().Perm()); err != nil {
			return info, err
		}
		if err := syscall.Rename(tmp, dst); err != nil {
			return info, fmt.Errorf("clone into %s: %w (did something create files in it meanwhile?)", dst, err)
		}
		return info, nil
	}
	if err := os.Rename(tmp, dst); err != nil {
		return info, fmt.Errorf("clone into %s: %w (did another arpatch create it meanwhile?)", dst, err)
	}
	return info, nil
}

// sameAsHead checks the checkout against commit head before any write,
// for what git status does not show: every mode a patch header claims
// (old mode, deleted file mode, an index line's mode) is head's, else an
// error names the patch and file and runs checkCmd as the remedy; no
// file the series creates is there already (untracked or ignored), else
// an error gives the mv that moves it away; and every file the series
// touches holds head's bytes: one that differs only by CRLF line endings
// gets lineEndingError, others (an edit hidden by skip-worktree or
// assume-unchanged) an error with the git update-index command that
// clears the bits. Patching over any of them would record the user's
// bytes as upstream's.
func sameAsHead(repo *gitsrc.Repo, head string, root safefs.Root, ps []*patches.Patch, checkCmd string) error {
	tree, err := repo.TreeAt(head)
	if err != nil {
		return err
	}
	var differ, extra, eol []string
	for _, p := range ps {
		for _, fc := range p.Diff.Changes {
			// One rule for every header that claims the old mode (old
			// mode, deleted file mode, index ... MODE): the commit must
			// have it. git apply only warns; arpatch refuses by name.
			have := tree.Mode(fc.Path)
			check := "`" + checkCmd + "`"
			switch {
			case fc.OldMode != "" && have != fc.OldMode:
				return fmt.Errorf("patch %s changes the mode of %s from %s, but commit %s has it as %s; nothing was changed. Use a series made for this commit (%s)",
					p.Name, fc.Path, fc.OldMode, githash.Hash(head).Short(), cmp.Or(have, "(none)"), check)
			case fc.ModeClaim != "" && have != "" && have != fc.ModeClaim:
				return fmt.Errorf("patch %s says %s has mode %s (%q), but commit %s has it as %s; nothing was changed (git apply would only warn \"has type %s, expected %s\"; arpatch refuses a wrong mode claim in any header, as for \"old mode\"). Use a series made for this commit (%s)",
					p.Name, fc.Path, fc.ModeClaim, fc.ModeClaimBy, githash.Hash(head).Short(), have, strings.TrimLeft(have, "0"), strings.TrimLeft(fc.ModeClaim, "0"), check)
			}
		}
	}
	if err := pathKinds(tree, head, root.Dir, ps, checkCmd); err != nil {
		return err
	}
	for p := range seriesFiles(ps) {
		want, werr := tree.ReadFile(p)
		got, gerr := root.ReadFile(p)
		if errors.Is(werr, fs.ErrNotExist) && errors.Is(gerr, fs.ErrNotExist) {
			continue
		}
		var pe *safefs.PathError
		if errors.As(gerr, &pe) {
			return gerr
		}
		if gerr != nil && !errors.Is(gerr, fs.ErrNotExist) {
			return fmt.Errorf("%s: %s cannot be read: %s; nothing was changed. Fix that (its permissions), then apply", root.Dir, p, cause(gerr))
		}
		if werr != nil && !errors.Is(werr, fs.ErrNotExist) {
			return fmt.Errorf("%s: %v; nothing was changed. The series was made for another tree: `%s` shows which series fits commit %s", root.Dir, werr, checkCmd, githash.Hash(head).Short())
		}
		switch {
		case errors.Is(werr, fs.ErrNotExist) && gerr == nil:
			extra = append(extra, p)
		case werr == nil && gerr == nil && !bytes.Equal(want, got) && bytes.Equal(crlf(want), got):
			eol = append(eol, p)
		case werr != nil || gerr != nil || !bytes.Equal(want, got):
			differ = append(differ, p)
		}
	}
	if len(eol) > 0 && len(differ) == 0 {
		return lineEndingError(root.Dir, head, eol)
	}
	differ = append(differ, eol...)
	if len(extra) > 0 {
		sort.Strings(extra)
		return fmt.Errorf("%s: the series creates %s, but the tree already has a file there that commit %s does not (untracked or ignored); nothing was changed. Move it away (`%s`), then apply",
			root.Dir, strings.Join(extra, ", "), githash.Hash(head).Short(), shellq.Join([]string{"mv", filepath.Join(root.Dir, extra[0]), filepath.Join(root.Dir, extra[0]) + ".mine"}))
	}
	if len(differ) == 0 {
		return nil
	}
	sort.Strings(differ)
	return fmt.Errorf("%s: these files differ from commit %s although git status does not list them (skip-worktree or assume-unchanged bits hide the edit): %s; nothing was changed. Clear the bits (`%s`), then stash or restore the edits",
		root.Dir, githash.Hash(head).Short(), strings.Join(differ, ", "), unhide(root.Dir, differ))
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
	if !githash.Hash(want).IsFull() {
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
		return nil, withCheck(err, opts.Catalog, source, want)
	}
	rep.Series, rep.Reason, rep.Patches = choice.Series, choice.Reason, choice.Patches
	res, err := patches.ApplyChecked(tree, choice.Patches)
	if err != nil {
		return nil, err
	}
	rep.Result = res
	return rep, nil
}

// alreadyApplied handles a checkout that has apply state: the same recipe
// and the same patches (names and sha256) with undrifted files at the
// commit they were applied at is a no-op; a moved HEAD, an interrupted
// apply, another recipe, another patch set or drift is refused, naming
// what differs.
func alreadyApplied(opts ApplyOptions, rep *ApplyReport, st *State, root safefs.Root, head string) error {
	if head != st.Commit {
		return movedHead(opts.Src, head, st)
	}
	if st.Reverting {
		return fmt.Errorf("%s: a revert of series %s was interrupted part way (the state says reverting); run `%s` to finish it, then apply again", opts.Src, cmp.Or(st.Series, "(none)"), sh("arpatch", "revert", "--src", opts.Src))
	}
	if st.Incomplete {
		return fmt.Errorf("%s: an apply of series %s was interrupted part way (the state says incomplete); run `%s` to restore upstream's bytes, then apply again", opts.Src, cmp.Or(st.Series, "(none)"), sh("arpatch", "revert", "--src", opts.Src))
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
		fmt.Fprintf(&b, "\nnothing was changed. Run `%s` (add --force to discard the edits above; save them first with git diff), then apply again", sh("arpatch", "revert", "--src", opts.Src))
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

func gitMode(m string) fs.FileMode {
	if m == "100755" {
		return 0o755
	}
	return 0o644
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

// movedHead is the refusal apply and revert share for a checkout whose
// HEAD is not the commit its state was applied at.
func movedHead(src, head string, st *State) error {
	return fmt.Errorf("%s is at commit %s, but series %s was applied at %s; nothing was changed. Check that commit out again (`%s`), then revert or apply",
		src, head, cmp.Or(st.Series, "(none)"), st.Commit, sh("git", "-C", src, "checkout", "--detach", st.Commit))
}

// crlf returns b with every LF that has no CR before it turned into CRLF,
// as git's core.autocrlf=true writes a text file on checkout.
func crlf(b []byte) []byte {
	out := make([]byte, 0, len(b)+bytes.Count(b, []byte("\n")))
	for i, c := range b {
		if c == '\n' && (i == 0 || b[i-1] != '\r') {
			out = append(out, '\r')
		}
		out = append(out, c)
	}
	return out
}

// lineEndings returns a *lineEndingError when every one of the tracked
// changes is a file holding HEAD's text with CRLF where HEAD has LF: what
// a checkout by git with core.autocrlf=true looks like. Otherwise nil.
func lineEndings(repo *gitsrc.Repo, head string, root safefs.Root, changes []gitsrc.Change) error {
	tree, err := repo.TreeAt(head)
	if err != nil {
		return nil
	}
	var paths []string
	for _, c := range changes {
		want, werr := tree.ReadFile(c.Path)
		got, gerr := root.ReadFile(c.Path)
		if werr != nil || gerr != nil || bytes.Equal(want, got) || !bytes.Equal(crlf(want), got) {
			return nil
		}
		paths = append(paths, c.Path)
	}
	return lineEndingError(root.Dir, head, paths)
}

// lineEndingError is the refusal for files git converted to CRLF on
// checkout. The remedy rewrites those files from HEAD, which loses
// nothing: it is given only when the conversion is all that differs. It
// drops their index entries first: `git checkout HEAD -- PATH` keeps an
// entry whose blob is HEAD's, with its stat data, and skips a file that
// stat data calls clean, as a converted file is once the index is no
// longer racy, so the CRLF would stay (seen with git 2.39.5 after
// `git update-index --refresh`; refusals.txtar makes that case).
func lineEndingError(src, head string, paths []string) error {
	sort.Strings(paths)
	return fmt.Errorf("%s: these files hold commit %s's text with CRLF line endings where the commit has LF: %s. Git converted them when it checked them out (core.autocrlf=true, or a .gitattributes eol/text rule); the patches are written against the commit's bytes, so nothing was changed. "+
		"Turn the conversion off for this checkout and write those files again (the conversion is the only difference, so nothing is lost): `%s`, then `%s`, then `%s`, then apply",
		src, githash.Hash(head).Short(), strings.Join(paths, ", "), sh("git", "-C", src, "config", "core.autocrlf", "false"),
		sh(append([]string{"git", "-C", src, "rm", "-q", "--cached", "--"}, paths...)...), sh(append([]string{"git", "-C", src, "checkout", "HEAD", "--"}, paths...)...))
}

// listedRoot is a checkout read through safefs that can list its tracked
// files, so that the built-in rule finds the dispatch header wherever the
// tree keeps it (patches.Lister).
type listedRoot struct {
	safefs.Root
	tracked []string // sorted (gitsrc.Repo.TrackedPaths)
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
