package gitsrc

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
	"github.com/go-git/go-git/v5/plumbing/format/index"

	"github.com/arpatch/arpatch/internal/goroutine"
)

// Changes lists uncommitted changes, sorted by path, with the status
// letters go-git's Worktree.Status gives (untracked files one by one; a
// file git ignores is not listed). It works as `git status` does instead
// of hashing the tree:
//
//   - staged changes: the tree the index describes (from git's
//     cache-tree extension for every directory it holds as valid, else
//     hashed from the entries) is compared with HEAD's tree; only when
//     they differ are the two walked, skipping subtrees whose hashes
//     agree;
//   - work tree changes: each index entry's stat data (mode, size, mtime
//     with nanoseconds, and where recorded ctime, inode, uid, gid) is
//     compared with lstat; a file is hashed only when they differ or when
//     it is racily clean (its mtime is not before the index file's, so an
//     edit made as the index was written could hide behind equal stat
//     data), as git's racy-git rule says: to the nanosecond, as git built
//     with USE_NSEC compares them, for a file the index recorded on the
//     index's own file system (one clock, one granularity, so a fresh
//     checkout's files are not all suspects); in whole seconds, as git
//     without USE_NSEC compares them, for any other, since a work tree on
//     another file system than the index may keep coarser times
//     (Upstream: read-cache.c@v2.39.0 (is_racy_stat), git/git);
//   - untracked files: the directories are read as git reads them, with
//     .git/info/exclude and every .gitignore on the way (go-git's
//     pattern matcher); a directory the patterns ignore is not entered,
//     so a file in it is ignored even if a negated pattern names it, as
//     in git.
//
// Skip-worktree entries are not compared, as in git and go-git. An index
// this does not model (unmerged entries, intent-to-add entries,
// submodules) or an unborn HEAD is handed to go-git's full status. The
// error names the checkout; an unreadable file is reported, never taken
// for a change.
func (r *Repo) Changes() ([]Change, error) {
	idx, trees, err := r.indexAndTrees()
	if err != nil {
		return nil, err
	}
	head, herr := r.r.Head()
	if herr != nil || !statModelled(idx) {
		return r.goGitChanges()
	}
	headTree, err := r.commitTreeHash(head.Hash())
	if err != nil {
		return nil, err
	}
	root, err := openTreeRoot(r.Dir)
	if err != nil {
		return nil, fmt.Errorf("git status in %s: %w", r.Dir, err)
	}
	defer root.Close()
	s := &statusRun{dir: r.Dir, root: root, commonDir: LocalGitDir(r.Dir), idx: idx, indexDev: deviceOf(filepath.Join(r.GitDir(), "index")),
		tree: newIndexTree(idx.Entries), codes: map[string]*[2]byte{}}
	s.tree.cached = trees
	// The work tree is read while the trees are compared.
	var wg sync.WaitGroup
	var untracked []string
	var werr error
	wg.Add(1)
	goroutine.Go(func() {
		defer wg.Done()
		untracked, werr = s.untracked()
	})
	staged, serr := r.stagedChanges(s.tree, cachedRoot(idx), headTree)
	modified, merr := s.worktreeChanges()
	wg.Wait()
	if err := errors.Join(serr, merr, werr); err != nil {
		return nil, fmt.Errorf("git status in %s: %w", r.Dir, err)
	}
	// The letters as go-git's Worktree.Status sets them: staged changes
	// first, then the work tree's (an untracked path reads "??" even when
	// its deletion is staged).
	for _, ch := range staged {
		s.code(ch.Path)[0], s.code(ch.Path)[1] = ch.Staging, ' '
	}
	for _, ch := range modified {
		x := s.code(ch.Path)
		if x[0] == '?' {
			x[0] = ' '
		}
		x[1] = ch.Worktree
	}
	for _, p := range untracked {
		x := s.code(p)
		x[0], x[1] = '?', '?'
	}
	var out []Change
	for p, x := range s.codes {
		if x[0] == ' ' && x[1] == ' ' {
			continue
		}
		out = append(out, Change{Staging: x[0], Worktree: x[1], Path: p})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// goGitChanges is go-git's full status, which hashes every file.
func (r *Repo) goGitChanges() ([]Change, error) {
	w, err := r.r.Worktree()
	if err != nil {
		return nil, err
	}
	st, err := w.Status()
	if err != nil {
		return nil, fmt.Errorf("git status in %s: %w", r.Dir, err)
	}
	var out []Change
	for p, s := range st {
		if s.Staging == git.Unmodified && s.Worktree == git.Unmodified {
			continue
		}
		out = append(out, Change{Staging: byte(s.Staging), Worktree: byte(s.Worktree), Path: p})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// statModelled reports whether Changes can judge the index by stat data:
// no unmerged entries (stage 0 is merged; go-git's index.Merged is 1),
// no intent-to-add entries, no submodules.
func statModelled(idx *index.Index) bool {
	for _, e := range idx.Entries {
		if e.Stage != 0 || e.IntentToAdd || e.Mode == filemode.Submodule {
			return false
		}
	}
	return true
}

type statusRun struct {
	dir       string
	root      *treeRoot // dir, held open
	commonDir string    // the git directory holding info/exclude (the main one of a linked worktree)
	idx       *index.Index
	indexDev  uint32 // the index file's device (as entries record theirs), 0 when unknown
	// tree's maps are not changed once built, and the concurrent walks
	// (untracked, worktreeChanges, stagedChanges) read them; each
	// indexDir's sum and entries are filled in lazily by hash and count,
	// which only stagedChanges calls, on one goroutine.
	tree  *indexTree
	codes map[string]*[2]byte
}

func (s *statusRun) code(p string) *[2]byte {
	x, ok := s.codes[p]
	if !ok {
		x = &[2]byte{'?', '?'}
		s.codes[p] = x
	}
	return x
}

// stagedChanges compares HEAD's tree with the tree the index describes:
// nothing to read when their hashes agree, else only the subtrees that
// differ. Changes carry Staging 'A', 'D' or 'M'.
func (r *Repo) stagedChanges(it *indexTree, cached, headTree plumbing.Hash) ([]Change, error) {
	if cached == headTree || it.hash("") == headTree {
		return nil, nil
	}
	var out []Change
	var diff func(dir string, tree plumbing.Hash) error
	add := func(code byte, p string) { out = append(out, Change{Staging: code, Path: p}) }
	diff = func(dir string, treeHash plumbing.Hash) error {
		// hash, not the sum field: with the cache tree, hash("") may
		// not have gone below a directory it took from the cache.
		if _, ok := it.dirs[dir]; ok && it.hash(dir) == treeHash {
			return nil
		}
		ents, err := r.treeEntries(treeHash)
		if err != nil {
			return err
		}
		inTree := map[string]bool{}
		for _, te := range ents {
			p := path.Join(dir, te.Name)
			inTree[p] = true
			_, idxDir := it.dirs[p]
			idxFile := it.files[p]
			switch {
			case te.Mode == filemode.Dir && idxDir:
				if err := diff(p, te.Hash); err != nil {
					return err
				}
			case te.Mode == filemode.Dir:
				if err := r.allFiles(te.Hash, p, func(f string) { add('D', f) }); err != nil {
					return err
				}
				if idxFile != nil {
					add('A', p)
				}
			case idxFile != nil:
				if idxFile.Hash != te.Hash || idxFile.Mode != te.Mode {
					add('M', p)
				}
			default:
				add('D', p)
				if idxDir {
					it.eachFile(p, func(f string) { add('A', f) })
				}
			}
		}
		for _, child := range it.children(dir) {
			if !inTree[child] {
				it.eachFile(child, func(f string) { add('A', f) })
			}
		}
		return nil
	}
	return out, diff("", headTree)
}

// cachedRoot returns the tree hash git's cache-tree extension records
// for the whole index, when it is valid (git marks a tree it has not
// recomputed since an index change with -1 entries; go-git drops the
// extension when it writes an index) and covers every entry; else the
// zero hash.
func cachedRoot(idx *index.Index) plumbing.Hash {
	if c := idx.Cache; c != nil && len(c.Entries) > 0 && c.Entries[0].Path == "" && c.Entries[0].Entries == len(idx.Entries) {
		return c.Entries[0].Hash
	}
	return plumbing.ZeroHash
}

// allFiles calls fn with the path of every file under the tree treeHash
// at prefix (depth first, in tree order; a submodule counts as a file).
func (r *Repo) allFiles(treeHash plumbing.Hash, prefix string, fn func(string)) error {
	ents, err := r.treeEntries(treeHash)
	if err != nil {
		return err
	}
	for _, e := range ents {
		p := path.Join(prefix, e.Name)
		if e.Mode != filemode.Dir {
			fn(p)
		} else if err := r.allFiles(e.Hash, p, fn); err != nil {
			return err
		}
	}
	return nil
}

// worktreeChanges compares every index entry with the work tree: stat
// data first (fstatat relative to the open root on a pool of workers, as
// git's preloaded index lstats from inside the tree), content only for
// entries whose stat data differ or are racily clean. Changes carry
// Worktree 'M' or 'D'.
func (s *statusRun) worktreeChanges() ([]Change, error) {
	// A directory holds its entries only when it and every directory
	// above it is a real directory, not a file or a symlink now. The root
	// is the checkout the user named (--src): it may be reached through a
	// symlink, so it is stat'ed, not lstat'ed.
	dirs := make([]string, 0, len(s.tree.dirs))
	for d := range s.tree.dirs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs) // parents first
	isDir := make([]bool, len(dirs))
	parallel(len(dirs), func(i int) {
		st, err := s.root.lstat(dirs[i])
		isDir[i] = err == nil && st.mode.IsDir()
	})
	realDir := make(map[string]bool, len(dirs))
	for i, d := range dirs {
		realDir[d] = isDir[i] && (d == "" || realDir[parentDir(d)])
	}
	const (
		clean = iota
		deleted
		suspect
	)
	es := s.idx.Entries
	verdict := make([]int, len(es))
	stats := make([]*fileStat, len(es)) // a suspect's, nil for the rest
	errs := make([]error, len(es))
	parallel(len(es), func(i int) {
		e := es[i]
		if e.SkipWorktree {
			return
		}
		if !realDir[parentDir(e.Name)] {
			verdict[i] = deleted
			return
		}
		st, err := s.root.lstat(e.Name)
		switch {
		case err == nil && st.mode.IsDir(), errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
			verdict[i] = deleted
		case err != nil:
			errs[i] = err
		case !statClean(e, st, s.idx.ModTime, s.indexDev):
			c := st // only a suspect's stat data escapes to the heap
			verdict[i], stats[i] = suspect, &c
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var out []Change
	var suspects []*index.Entry
	var sstats []fileStat
	for i, e := range es {
		switch verdict[i] {
		case deleted:
			out = append(out, Change{Worktree: 'D', Path: e.Name})
		case suspect:
			suspects, sstats = append(suspects, e), append(sstats, *stats[i])
		}
	}
	changed, err := hashDiffers(s.dir, suspects, sstats)
	if err != nil {
		return nil, err
	}
	for _, e := range changed {
		out = append(out, Change{Worktree: 'M', Path: e.Name})
	}
	return out, nil
}

// parentDir is the slash path of p's directory, "" at the top.
func parentDir(p string) string {
	if d := path.Dir(p); d != "." {
		return d
	}
	return ""
}

// parallel calls fn(0..n-1) on checkoutWorkers goroutines, in chunks.
func parallel(n int, fn func(i int)) {
	chunk := max((n+checkoutWorkers()-1)/checkoutWorkers(), 64)
	var wg sync.WaitGroup
	for start := 0; start < n; start += chunk {
		wg.Go(func() {
			for i := start; i < min(start+chunk, n); i++ {
				fn(i)
			}
		})
	}
	wg.Wait()
}

// fileStat is the stat data status compares with an index entry: mode
// (as os.Lstat gives it), size in bytes, mtime, and on Linux ctime, inode,
// uid and gid (zero elsewhere, and then not compared).
type fileStat struct {
	mode          fs.FileMode
	size          int64
	mtime, ctime  time.Time
	ino, uid, gid uint32
}

// dirEntry is one name in a directory and its type bits (fs.ModeDir,
// fs.ModeSymlink, ...; zero for a regular file).
type dirEntry struct {
	name string
	typ  fs.FileMode
}

// statClean reports whether st matches the stat data the index recorded
// for e and the entry is not racily clean, so that its content need not
// be read: racily clean to the nanosecond when the index recorded e on
// the index file's device (indexDev, 0 when unknown), else in whole
// seconds. Fields the index left zero (ctime, inode, uid, gid from go-git
// on other systems) are not compared.
func statClean(e *index.Entry, st fileStat, indexTime time.Time, indexDev uint32) bool {
	mode, err := filemode.NewFromOSFileMode(st.mode)
	if err != nil || mode != e.Mode || uint32(st.size) != e.Size || !st.mtime.Equal(e.ModifiedAt) {
		return false
	}
	switch {
	case indexTime.IsZero():
		return false
	case indexDev != 0 && e.Dev == indexDev:
		if !e.ModifiedAt.Before(indexTime) {
			return false // racily clean, to the nanosecond: hash it
		}
	case e.ModifiedAt.Unix() >= indexTime.Unix():
		return false // racily clean, in whole seconds: hash it
	}
	if !e.CreatedAt.IsZero() && !st.ctime.IsZero() && !e.CreatedAt.Equal(st.ctime) {
		return false
	}
	if e.Inode != 0 && st.ino != 0 && e.Inode != st.ino {
		return false
	}
	if (e.UID != 0 || e.GID != 0) && (e.UID != st.uid || e.GID != st.gid) {
		return false
	}
	return true
}

// hashDiffers hashes the suspects' files (regular files by content,
// symlinks by target) on a worker pool and returns those whose blob hash
// or mode differs from the index's, in index order.
func hashDiffers(root string, es []*index.Entry, sts []fileStat) ([]*index.Entry, error) {
	differs := make([]bool, len(es))
	errs := make([]error, len(es))
	parallel(len(es), func(i int) { differs[i], errs[i] = contentDiffers(root, es[i], sts[i]) })
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var out []*index.Entry
	for i, e := range es {
		if differs[i] {
			out = append(out, e)
		}
	}
	return out, nil
}

func contentDiffers(root string, e *index.Entry, st fileStat) (bool, error) {
	mode, err := filemode.NewFromOSFileMode(st.mode)
	if err != nil || mode != e.Mode {
		return true, nil
	}
	full := filepath.Join(root, filepath.FromSlash(e.Name))
	h := sha1.New()
	if st.mode&fs.ModeSymlink != 0 {
		target, err := os.Readlink(full)
		if err != nil {
			return false, err
		}
		fmt.Fprintf(h, "blob %d\x00%s", len(target), target)
	} else {
		f, err := os.Open(full)
		if err != nil {
			return false, err
		}
		defer func() { _ = f.Close() }() // read-only: Close has nothing to report
		// The size from this fstat, not the lstat before: the file may
		// have changed between them.
		fi, err := f.Stat()
		if err != nil {
			return false, err
		}
		fmt.Fprintf(h, "blob %d\x00", fi.Size())
		if n, err := io.Copy(h, f); err != nil {
			return false, err
		} else if n != fi.Size() {
			return true, nil // changing under us
		}
	}
	return !bytes.Equal(h.Sum(nil), e.Hash[:]), nil
}

// untracked lists the files in the work tree that the index does not hold
// and the ignore patterns do not exclude, sorted. A directory that holds
// tracked files is entered without matching it; an untracked one is
// matched and, when ignored, not entered. A file is ignored when a
// pattern matches it or, as git never re-includes a file under an
// excluded directory, any directory above it (checked only when a negated
// pattern is in force: otherwise the directory's pattern matches the file
// too).
func (s *statusRun) untracked() ([]string, error) {
	base, neg := readIgnoreFile(filepath.Join(s.commonDir, "info", "exclude"), nil)
	var out []string
	buf := make([]byte, 32<<10)
	var key []byte
	var walk func(dir []string, ps []gitignore.Pattern, neg bool) error
	walk = func(dir []string, ps []gitignore.Pattern, neg bool) error {
		dirRel := strings.Join(dir, "/")
		ents, err := s.root.readDir(dirRel, buf)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // gone meanwhile
			}
			return err
		}
		for _, d := range ents {
			if d.name == ".gitignore" && !d.typ.IsDir() {
				more, n := readIgnoreFile(s.root.path(path.Join(dirRel, ".gitignore")), dir)
				ps, neg = append(ps[:len(ps):len(ps)], more...), neg || n
			}
		}
		m := gitignore.NewMatcher(ps)
		for _, d := range ents {
			name := d.name
			if name == ".git" || d.typ&fs.ModeSocket != 0 {
				continue
			}
			// The slash path, built in key: the index lookups with
			// string(key) do not allocate, nor does a tracked file.
			key = key[:0]
			if len(dir) > 0 {
				key = append(append(key, dirRel...), '/')
			}
			key = append(key, name...)
			if d.typ.IsDir() {
				_, tracked := s.tree.dirs[string(key)]
				if p := append(dir[:len(dir):len(dir)], name); tracked || !m.Match(p, true) {
					if err := walk(p, ps, neg); err != nil {
						return err
					}
				}
				continue
			}
			if _, tracked := s.tree.files[string(key)]; !tracked && !ignored(m, append(dir[:len(dir):len(dir)], name), neg) {
				out = append(out, string(key))
			}
		}
		return nil
	}
	err := walk(nil, base, neg)
	sort.Strings(out)
	return out, err
}

// ignored reports whether m excludes the file at p, or, when a negated
// pattern is in force, any directory above it.
func ignored(m gitignore.Matcher, p []string, neg bool) bool {
	if m.Match(p, false) {
		return true
	}
	for k := 1; neg && k < len(p); k++ {
		if m.Match(p[:k], true) {
			return true
		}
	}
	return false
}

// readIgnoreFile reads the patterns of one ignore file as go-git does
// (lines not starting with '#' and not blank), for paths under domain,
// and reports whether one is negated ("!..."); a missing or unreadable
// file has none.
func readIgnoreFile(file string, domain []string) (ps []gitignore.Pattern, negated bool) {
	f, err := os.Open(file)
	if err != nil {
		return nil, false
	}
	defer func() { _ = f.Close() }() // read-only: Close has nothing to report
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := sc.Text(); !strings.HasPrefix(l, "#") && strings.TrimSpace(l) != "" {
			ps = append(ps, gitignore.ParsePattern(l, domain))
			negated = negated || strings.HasPrefix(l, "!")
		}
	}
	return ps, negated
}
