package checkout

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/goroutine"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/internal/sglkernel"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/patches"
)

// StatusReport describes a checkout.
type StatusReport struct {
	Src  string `json:"src"`
	Head string `json:"head"`
	// Holder is the pid of another live arpatch that holds the
	// checkout's lock (.git/arpatch/lock): an apply, revert or build in
	// progress, so the state and files may be changing under this
	// report. It is 0 when none does.
	Holder int    `json:"holder_pid,omitempty"`
	State  *State `json:"state"` // nil when arpatch applied nothing here
	// Drift lists recorded files whose bytes changed since apply.
	Drift []FileDrift `json:"drift"`
	// Other lists uncommitted changes to files the series did not touch.
	Other []gitsrc.Change `json:"other_changes"`
	// Untracked lists untracked files git does not ignore.
	Untracked []string `json:"untracked"`
	// Hidden lists the paths in Other whose index entries are marked
	// assume-unchanged: git status and git stash do not see their edits
	// until the bit is cleared, so the remedy clears it first.
	Hidden []string `json:"hidden"`
	// SkipWorktree lists index entries marked skip-worktree, whose edits
	// git status does not show (git update-index --skip-worktree).
	SkipWorktree []string `json:"skip_worktree"`
	// Kernel is the tree's sgl-kernel project (sglkernel.InCheckout):
	// sgl-kernel/ or python/sglang/kernels/aot/. It is nil when the tree
	// has none or more than one, and KernelErr says why; the guards on
	// what reaches a build then have nothing to guard (the build itself
	// refuses such a tree with KernelErr).
	Kernel    *sglkernel.Project `json:"kernel"`
	KernelErr error              `json:"-"`
	// PackageExtra lists files in the project's wheel packages
	// (Kernel.Packages, e.g. sgl-kernel/python/sgl_kernel) that git does
	// not track, ignored ones included: the wheel would package them.
	PackageExtra []string `json:"package_extra"`
	// SeriesChanged lists patches whose sha256 in this arpatch's series
	// differs from the one applied (arpatch or the series was updated).
	SeriesChanged []string `json:"series_changed"`
}

// Edits lists the drifted files that hold bytes neither apply nor
// upstream wrote: what `arpatch revert` refuses to throw away without
// --force.
func (s *StatusReport) Edits() []FileDrift { return edits(s.Drift) }

// Buildable reports whether arpatch build would take the tree (see
// BuildProblem).
func (s *StatusReport) Buildable() bool { return s.BuildProblem() == nil }

// BuildProblem returns why arpatch build would refuse the tree, or nil: no
// apply state; drift, an unfinished apply or revert, or a moved HEAD; other
// tracked changes; and what would reach the wheel unrecorded (untracked
// files under the sgl-kernel project's directory, untracked or ignored
// files in its Python package, skip-worktree entries hiding edits). The
// error names the files and the remedy.
func (s *StatusReport) BuildProblem() error {
	src := s.Src
	switch {
	case s.State == nil:
		return fmt.Errorf("%s has no apply state: arpatch builds only trees it applied, so that every input is recorded; %s", src, ApplyFirst(src))
	case !s.Clean():
		var d []string
		for _, x := range s.Drift {
			d = append(d, x.String())
		}
		if s.Head != s.State.Commit {
			d = append(d, "HEAD moved to "+s.Head)
		}
		return fmt.Errorf("%s changed since apply (%s); the build would not match its recorded inputs. Run `%s`", src, strings.Join(d, ", "), sh("arpatch", "status", "--src", src))
	case len(s.Other) > 0:
		return fmt.Errorf("%s has uncommitted changes to files the series did not touch (%s); they would go into the build unrecorded. %s", src, s.Other[0].Path, s.otherRemedy())
	}
	// The project directory is what the build reads, and its Python
	// package goes into the wheel whole; a skip-worktree entry hides
	// edits from git status.
	if s.Kernel == nil {
		return nil
	}
	kd := s.Kernel.String()
	if u := s.KernelUntracked(); len(u) > 0 {
		return fmt.Errorf("%s has untracked files under %s (%s); they could go into the build unrecorded. %s", src, kd, strings.Join(firstN(u, 3), ", "), s.untrackedRemedy())
	}
	if len(s.PackageExtra) > 0 {
		return fmt.Errorf("%s has files git does not track under %s (%s), which the wheel would package unrecorded (ignored files too). %s", src, strings.Join(s.Kernel.Packages, ", "), strings.Join(firstN(s.PackageExtra, 3), ", "), s.packageRemedy())
	}
	if sw := s.KernelSkipWorktree(); len(sw) > 0 {
		return fmt.Errorf("%s has skip-worktree entries under %s (%s), whose edits git status cannot see; %s", src, kd, strings.Join(firstN(sw, 3), ", "), s.skipRemedy())
	}
	return nil
}

// Remedies says, one sentence each, how to clear what keeps a tree that
// is as apply wrote it from building: tracked changes apply did not make,
// untracked files under the kernel project, files the wheel's package does
// not track, skip-worktree entries. Each command names the files, quoted,
// and runs as printed: a plain `git stash` would stash the patched files
// too (undoing the apply) and leave untracked files where they are.
func (s *StatusReport) Remedies() []string {
	var out []string
	if len(s.Other) > 0 {
		out = append(out, s.otherRemedy())
	}
	if len(s.KernelUntracked()) > 0 {
		out = append(out, s.untrackedRemedy())
	}
	if len(s.PackageExtra) > 0 {
		out = append(out, s.packageRemedy())
	}
	if len(s.KernelSkipWorktree()) > 0 {
		out = append(out, s.skipRemedy())
	}
	return out
}

// setAside is the git stash that takes only paths, leaving the patched
// files as apply wrote them; flag adds untracked (-u) or ignored (--all)
// files.
func (s *StatusReport) setAside(flag string, paths []string) string {
	w := []string{"git", "-C", s.Src, "stash", "push"}
	// git reads the paths after -- as pathspecs: "cs*" would also take
	// the patched custom_all_reduce.cuh, ":name" is magic. Such names are
	// given literally.
	if slices.ContainsFunc(paths, func(p string) bool { return strings.ContainsAny(p, "*?[\\") || strings.HasPrefix(p, ":") }) {
		w = []string{"git", "--literal-pathspecs", "-C", s.Src, "stash", "push"}
	}
	if flag != "" {
		w = append(w, flag)
	}
	return shellq.Join(append(append(w, "--"), paths...))
}

func (s *StatusReport) otherRemedy() string {
	var ps []string
	for _, c := range s.Other {
		ps = append(ps, c.Path)
	}
	return unhideFirst(s.Src, s.Hidden, "commit them, or set only them aside with `"+s.setAside("", ps)+"` (a plain git stash would stash the patched files too, undoing the apply)")
}

// hiddenChanges lists the paths of changes whose index entries are
// marked assume-unchanged (gitsrc.Repo.AssumeUnchanged): git status and
// git stash do not see their edits until the bit is cleared. It returns
// the error reading the index.
func hiddenChanges(repo *gitsrc.Repo, changes []gitsrc.Change) ([]string, error) {
	if len(changes) == 0 {
		return nil, nil
	}
	au, err := repo.AssumeUnchanged()
	if err != nil {
		return nil, err
	}
	var hidden []string
	for _, c := range changes {
		if slices.Contains(au, c.Path) {
			hidden = append(hidden, c.Path)
		}
	}
	return hidden, nil
}

// unhideFirst returns remedy (a sentence in lower case) as the remedy
// for changes of which hidden are edits git cannot see: when there are
// such edits, it says so first and gives the command that clears the bits
// hiding them (both assume-unchanged and skip-worktree; clearing a bit
// that is not set does nothing), "then " remedy; else remedy capitalised.
func unhideFirst(src string, hidden []string, remedy string) string {
	if len(hidden) == 0 {
		return strings.ToUpper(remedy[:1]) + remedy[1:]
	}
	return "git status and git stash cannot see the edits to " + strings.Join(hidden, ", ") + " (assume-unchanged): clear the bit (`" +
		unhide(src, hidden) + "`), then " + remedy
}

// unhide is the shell command that clears the bits hiding edits to paths
// from git status and git stash in the checkout at src: two runs of git
// update-index, since one run given both --no-skip-worktree and
// --no-assume-unchanged applies only the last to the paths after them.
func unhide(src string, paths []string) string {
	return sh(append([]string{"git", "-C", src, "update-index", "--no-skip-worktree", "--"}, paths...)...) + " && " +
		sh(append([]string{"git", "-C", src, "update-index", "--no-assume-unchanged", "--"}, paths...)...)
}

func (s *StatusReport) untrackedRemedy() string {
	return "Remove them, or set only them aside with `" + s.setAside("--include-untracked", s.KernelUntracked()) + "` (a plain git stash would stash the patched files instead, undoing the apply, and leave these)"
}

func (s *StatusReport) packageRemedy() string {
	return "Remove them, or set only them aside with `" + s.setAside("--all", s.PackageExtra) + "` (--all takes ignored files too; a plain git stash would stash the patched files instead)"
}

func (s *StatusReport) skipRemedy() string {
	sw := s.KernelSkipWorktree()
	return "run `" + shellq.Join(append([]string{"git", "-C", s.Src, "update-index", "--no-skip-worktree", "--"}, sw...)) + "` and `" + shellq.Join([]string{"arpatch", "status", "--src", s.Src}) + "`"
}

// KernelUntracked lists the untracked files under the sgl-kernel
// project's directory (none when the tree has no single project).
func (s *StatusReport) KernelUntracked() []string { return s.underKernel(s.Untracked) }

// KernelSkipWorktree lists the skip-worktree entries under the sgl-kernel
// project's directory.
func (s *StatusReport) KernelSkipWorktree() []string { return s.underKernel(s.SkipWorktree) }

func (s *StatusReport) underKernel(paths []string) []string {
	if s.Kernel == nil {
		return nil
	}
	return under(paths, s.Kernel.Prefix())
}

func firstN(xs []string, n int) []string {
	if len(xs) <= n {
		return xs
	}
	return append(append([]string(nil), xs[:n]...), fmt.Sprintf("and %d more", len(xs)-n))
}

func under(paths []string, prefix string) []string {
	var out []string
	for _, p := range paths {
		if strings.HasPrefix(p, prefix) {
			out = append(out, p)
		}
	}
	return out
}

// Clean reports whether the checkout is exactly what a finished apply left.
func (s *StatusReport) Clean() bool {
	return s.State != nil && !s.State.Incomplete && !s.State.Reverting && len(s.Drift) == 0 && s.Head == s.State.Commit
}

// Status reads the checkout's apply state and compares it with the tree.
// cat may be nil; when given, patch hashes are compared with its series.
// Holder names another live arpatch holding the checkout's lock, whose
// apply or revert may be changing the files this report reads.
func Status(src string, cat *patches.Catalog) (*StatusReport, error) {
	repo, err := gitsrc.Open(src)
	if err != nil {
		return nil, err
	}
	rep := &StatusReport{Src: src, Holder: holder(repo.GitDir())}
	if rep.Head, err = repo.Head(); err != nil {
		return nil, err
	}
	// The work tree's changes are read while the state is judged (which
	// reads the recorded files at the state's commit and patches them in
	// memory), through a repository of their own.
	changesDone := alongside(src, (*gitsrc.Repo).Changes)
	st, err := readTrusted(repo, src, cat)
	changes, cerr := changesDone()
	if err != nil {
		return nil, err
	}
	rep.State = st
	if cerr != nil {
		return nil, cerr
	}
	recorded := map[string]bool{}
	if st != nil {
		for _, f := range st.Files {
			recorded[f.Path] = true
		}
		if rep.Drift, err = st.drift(safefs.Root{Dir: src}); err != nil {
			return nil, err
		}
		if cat != nil && st.Series != "" {
			if s, err := cat.Get(st.Series); err == nil {
				have := map[string]string{}
				for _, p := range s.Patches {
					have[p.File] = p.SHA256
				}
				for _, p := range st.Patches {
					if have[p.Name] != p.SHA256 {
						rep.SeriesChanged = append(rep.SeriesChanged, p.Name)
					}
				}
			}
		}
	}
	for _, c := range changes {
		switch {
		case c.Untracked():
			rep.Untracked = append(rep.Untracked, c.Path)
		case !recorded[c.Path]:
			rep.Other = append(rep.Other, c)
		}
	}
	if rep.Hidden, err = hiddenChanges(repo, rep.Other); err != nil {
		return nil, err
	}
	if rep.SkipWorktree, err = repo.SkipWorktree(); err != nil {
		return nil, err
	}
	tracked, err := repo.Tracked()
	if err != nil {
		return nil, err
	}
	if k, err := sglkernel.InTracked(src, tracked); err != nil {
		rep.KernelErr = err
	} else {
		rep.Kernel = &k
		for _, pkg := range k.Packages {
			extra, err := untrackedUnder(src, pkg, tracked)
			if err != nil {
				return nil, err
			}
			rep.PackageExtra = append(rep.PackageExtra, extra...)
		}
	}
	return rep, nil
}

// untrackedUnder lists the files under dir (relative to the checkout src)
// that tracked (the index) does not hold, ignored ones included, but for
// .pyc files in __pycache__: what a wheel build that packages dir whole
// would take in unrecorded. A missing dir has none.
func untrackedUnder(src, dir string, tracked map[string]bool) ([]string, error) {
	root := filepath.Join(src, dir)
	if _, err := os.Stat(root); err != nil {
		return nil, nil
	}
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if filepath.Base(filepath.Dir(p)) == "__pycache__" && strings.HasSuffix(p, ".pyc") {
			return nil // bytecode Python writes next to tracked sources
		}
		rel, _ := filepath.Rel(src, p)
		if rel = filepath.ToSlash(rel); !tracked[rel] {
			out = append(out, rel)
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// ApplyFirst is the remedy for a tree arpatch did not apply: the apply
// commands that record it at the commit it is at (--commit HEAD), with the
// pcie recipe's series or with none (baseline), shell-quoted.
func ApplyFirst(src string) string {
	return fmt.Sprintf("run `%s` first (the pcie series at this commit), or `%s` (no patches)",
		shellq.Join([]string{"arpatch", "apply", "--src", src, "--commit", "HEAD"}),
		shellq.Join([]string{"arpatch", "apply", "--src", src, "--recipe", "baseline", "--commit", "HEAD"}))
}

// alongside runs fn on its own goroutine with a repository of its own,
// opened at src (go-git's repository is not safe for concurrent use),
// and returns a func that waits for fn and gives its result, or the error
// opening the repository. The func may be called more than once.
func alongside[T any](src string, fn func(*gitsrc.Repo) (T, error)) func() (T, error) {
	var v T
	var err error
	done := make(chan struct{})
	goroutine.Go(func() {
		defer close(done)
		var own *gitsrc.Repo
		if own, err = gitsrc.Open(src); err == nil {
			v, err = fn(own)
		}
	})
	return func() (T, error) {
		<-done
		return v, err
	}
}
