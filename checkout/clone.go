package checkout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/lockfile"
	prog "github.com/arpatch/arpatch/internal/progress"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/patches"
)

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
	tmp, err := makeCloneTemp(parent, dst)
	if err != nil {
		return gitsrc.CloneInfo{}, err
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
	var files atomic.Int64
	show := func(n, total int) {}
	if progress != nil {
		// As git clone: a count of the files checked out, on the
		// terminal the clone's progress goes to (4,303 files take
		// seconds).
		c := prog.New(progress, "files")
		show = func(n, total int) { c.Set("checking out", n, total) }
		defer func() { c.Done(err == nil) }()
	}
	repo.CheckoutProgress = func(n, total int) { files.Store(int64(total)); show(n, total) }
	start := time.Now()
	if err := repo.Checkout(want); err != nil {
		return info, err
	}
	// The checkout is the clone's other half (seconds for thousands of
	// files, where a local clone's objects take milliseconds): said
	// apart, so that "cloned in 4ms" is not all it took.
	info.Checkout, info.Files = time.Since(start), int(files.Load())
	if ctx.Err() != nil {
		return info, fmt.Errorf("clone %s: interrupted; nothing was kept", source)
	}
	return info, moveClone(tmp, dst)
}

// makeCloneTemp makes the directory a clone to dst goes into first, in
// parent, named by clonePrefix, this pid and a random suffix, having
// removed the stale ones (StaleClones) of processes that are gone.
func makeCloneTemp(parent, dst string) (string, error) {
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
	for {
		tmp := filepath.Join(parent, prefix+strconv.Itoa(os.Getpid())+"-"+strconv.FormatUint(rand.Uint64(), 36))
		err := os.Mkdir(tmp, 0o777)
		if err == nil {
			return tmp, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
}

// moveClone renames the finished clone tmp to dst: over dst when it is an
// empty directory (the checkout takes its mode), else to the missing dst.
func moveClone(tmp, dst string) error {
	if fi, err := os.Lstat(dst); err == nil {
		// An empty directory: the checkout takes its mode, and
		// rename(2) replaces it only while it is still empty (os.Rename
		// refuses any directory).
		if err := os.Chmod(tmp, fi.Mode().Perm()); err != nil {
			return err
		}
		if err := syscall.Rename(tmp, dst); err != nil {
			return fmt.Errorf("clone into %s: %w (did something create files in it meanwhile?)", dst, err)
		}
		return nil
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("clone into %s: %w (did another arpatch create it meanwhile?)", dst, err)
	}
	return nil
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
