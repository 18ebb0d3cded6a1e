package gitsrc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Checkout checks out commit (40 hex) detached into the empty work tree of
// a fresh clone (nothing but .git in it). It reads the commit's trees with
// go-git, creates every directory once, then decodes the blobs from the
// object store and writes the files on a pool of workers, with go-git's
// modes (0644, 0755, symlinks); submodule entries become empty
// directories, as git leaves them. Last it writes an index (version 2)
// whose entries carry each file's stat data, so status compares stat data
// instead of hashing the tree, and points HEAD at the commit.
//
// Errors: the commit is missing (naming the remote and the remedy), the
// work tree is not empty, a tree entry has a name git would refuse to
// check out (".", "..", ".git", a slash), or a file cannot be written;
// the error names the path. On error the files written so far remain: the
// caller checks out into a temporary directory it removes.
func (r *Repo) Checkout(commit string) error {
	h := plumbing.NewHash(commit)
	c, err := r.r.CommitObject(h)
	if err != nil {
		return fmt.Errorf("commit %s is not in the repository cloned from %s; pass --repo with a mirror that has it", commit, r.remoteURL())
	}
	if err := emptyWorkTree(r.Dir); err != nil {
		return err
	}
	tree, err := c.Tree()
	if err != nil {
		return fmt.Errorf("check out %s in %s: %w", commit, r.Dir, err)
	}
	var dirs []string
	var files []*index.Entry
	if err := r.listTree(tree, "", &dirs, &files); err != nil {
		return fmt.Errorf("check out %s in %s: %w", commit, r.Dir, err)
	}
	for _, d := range dirs {
		if err := os.Mkdir(filepath.Join(r.Dir, filepath.FromSlash(d)), 0o755); err != nil {
			return fmt.Errorf("check out %s: %w", commit, err)
		}
	}
	if err := r.writeFiles(files); err != nil {
		return fmt.Errorf("check out %s in %s: %w", commit, r.Dir, err)
	}
	// The index goes last: its mtime, later than every file's, is what
	// tells status which entries' stat data it can trust (racy git).
	if err := r.r.Storer.SetIndex(&index.Index{Version: 2, Entries: files}); err != nil {
		return fmt.Errorf("check out %s: writing the index of %s: %w", commit, r.Dir, err)
	}
	if err := r.r.Storer.SetReference(plumbing.NewHashReference(plumbing.HEAD, h)); err != nil {
		return fmt.Errorf("check out %s: setting HEAD in %s: %w", commit, r.Dir, err)
	}
	return nil
}

// emptyWorkTree refuses a work tree holding anything but .git: Checkout
// writes with O_EXCL and never removes.
func emptyWorkTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Name() != ".git" {
			return fmt.Errorf("check out into %s: the work tree is not empty (%s); check out into a fresh clone", dir, e.Name())
		}
	}
	return nil
}

// listTree appends the directories (parents first) and the file entries
// (hash and mode; stat data filled when written) under t, slash paths.
func (r *Repo) listTree(t *object.Tree, prefix string, dirs *[]string, files *[]*index.Entry) error {
	for _, e := range t.Entries {
		if !validName(e.Name) {
			return fmt.Errorf("tree %s holds an entry named %q, which git refuses to check out", prefix+"/", e.Name)
		}
		p := prefix + e.Name
		switch e.Mode {
		case filemode.Dir:
			*dirs = append(*dirs, p)
			sub, err := r.r.TreeObject(e.Hash)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			if err := r.listTree(sub, p+"/", dirs, files); err != nil {
				return err
			}
		case filemode.Submodule:
			*dirs = append(*dirs, p)
			*files = append(*files, &index.Entry{Name: p, Hash: e.Hash, Mode: e.Mode})
		case filemode.Regular, filemode.Deprecated, filemode.Executable, filemode.Symlink:
			*files = append(*files, &index.Entry{Name: p, Hash: e.Hash, Mode: e.Mode})
		default:
			return fmt.Errorf("%s: unsupported mode %s", p, e.Mode)
		}
	}
	return nil
}

// validName reports whether a tree entry name is one git checks out: not
// empty, ".", ".." or .git (any case), and without a slash or NUL.
func validName(n string) bool {
	return n != "" && n != "." && n != ".." && !strings.EqualFold(n, ".git") && !strings.ContainsAny(n, "/\x00")
}

// checkoutWorkers is how many files are written at once: blob decoding is
// CPU work and file creation waits on the kernel, so twice the cores.
func checkoutWorkers() int {
	return min(max(2*runtime.GOMAXPROCS(0), 2), 16)
}

// writeFiles writes every entry's blob on a worker pool and fills its stat
// data. go-git's object storage opens a pack file per lookup and locks its
// shared cache, so the workers share it. The first error stops the rest.
func (r *Repo) writeFiles(files []*index.Entry) error {
	jobs := make(chan *index.Entry)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	failed := func() bool { mu.Lock(); defer mu.Unlock(); return first != nil }
	for range checkoutWorkers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64<<10)
			for e := range jobs {
				if failed() {
					continue
				}
				if err := r.writeEntry(e, buf); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("%s: %w", e.Name, err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, e := range files {
		jobs <- e
	}
	close(jobs)
	wg.Wait()
	return first
}

func (r *Repo) writeEntry(e *index.Entry, buf []byte) error {
	full := filepath.Join(r.Dir, filepath.FromSlash(e.Name))
	if e.Mode == filemode.Submodule {
		return nil // its directory is made; git leaves it empty
	}
	obj, err := r.r.Storer.EncodedObject(plumbing.BlobObject, e.Hash)
	if err != nil {
		return err
	}
	rd, err := obj.Reader()
	if err != nil {
		return err
	}
	defer rd.Close()
	if e.Mode == filemode.Symlink {
		target, err := io.ReadAll(rd)
		if err != nil {
			return err
		}
		if err := os.Symlink(string(target), full); err != nil {
			return err
		}
	} else {
		perm := os.FileMode(0o644)
		if e.Mode == filemode.Executable {
			perm = 0o755
		}
		f, err := os.OpenFile(full, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if err != nil {
			return err
		}
		_, err = io.CopyBuffer(f, rd, buf)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	fi, err := os.Lstat(full)
	if err != nil {
		return err
	}
	if uint64(fi.Size()) != uint64(obj.Size()) {
		return errors.New("wrote a size other than the blob's")
	}
	fillStat(e, fi)
	return nil
}
