package gitsrc

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Checkout checks out commit (40 hex) detached into the empty work tree of
// a fresh clone (nothing but .git in it). It reads the commit's trees
// (objectReader, go-git where that does not apply), creates every
// directory once, then decodes the blobs and writes the files on a pool of
// workers, with go-git's modes (0644, 0755, symlinks); submodule entries
// become empty directories, as git leaves them. Last it writes an index
// (version 2) whose entries carry each file's stat data and whose
// cache-tree extension holds every directory's tree hash, so status
// compares stat data instead of hashing the tree, and points HEAD at the
// commit.
//
// Errors: the commit is missing (naming the remote and the remedy), the
// work tree is not empty, a tree entry has a name git would refuse to
// check out (".", "..", ".git", a slash), or a file cannot be written;
// the error names the path. On error the files written so far remain: the
// caller checks out into a temporary directory it removes.
func (r *Repo) Checkout(commit string) error {
	h := plumbing.NewHash(commit)
	tree, err := r.commitTreeHash(h)
	if err != nil {
		return fmt.Errorf("commit %s is not in the repository cloned from %s; pass --repo with a mirror that has it", commit, r.remoteURL())
	}
	if err := emptyWorkTree(r.Dir); err != nil {
		return err
	}
	var dirs []string
	var files []*index.Entry
	var cache []index.TreeEntry
	if err := r.listTree(tree, "", "", &dirs, &files, &cache); err != nil {
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
	if err := r.writeIndex(files, cache); err != nil {
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
// (hash and mode; stat data filled when written) under tree h at prefix
// (slash paths), and the tree's cache-tree entries (git's TREE index
// extension, in pre-order: the tree's own name and hash, how many index
// entries it covers, how many subtrees it has).
func (r *Repo) listTree(h plumbing.Hash, prefix, name string, dirs *[]string, files *[]*index.Entry, cache *[]index.TreeEntry) error {
	ents, err := r.treeEntries(h)
	if err != nil {
		return fmt.Errorf("%s: %w", prefix, err)
	}
	k, before, subtrees := len(*cache), len(*files), 0
	*cache = append(*cache, index.TreeEntry{Path: name, Hash: h})
	for _, e := range ents {
		if !validName(e.Name) {
			return fmt.Errorf("tree %s holds an entry named %q, which git refuses to check out", prefix+"/", e.Name)
		}
		p := prefix + e.Name
		switch e.Mode {
		case filemode.Dir:
			subtrees++
			*dirs = append(*dirs, p)
			if err := r.listTree(e.Hash, p+"/", e.Name, dirs, files, cache); err != nil {
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
	(*cache)[k].Entries, (*cache)[k].Trees = len(*files)-before, subtrees
	return nil
}

// writeIndex writes the index (version 2, go-git's encoder) with git's
// cache-tree extension (TREE) holding the checked-out trees' hashes, so
// that status, and git's own, compare the index with HEAD without hashing
// it. Written to index.lock and renamed, as git does.
func (r *Repo) writeIndex(files []*index.Entry, cache []index.TreeEntry) error {
	var buf bytes.Buffer
	if err := index.NewEncoder(&buf).Encode(&index.Index{Version: 2, Entries: files}); err != nil {
		return err
	}
	b := buf.Bytes()[:buf.Len()-sha1.Size] // without go-git's checksum
	var ext []byte
	for _, t := range cache {
		ext = fmt.Appendf(ext, "%s\x00%d %d\n", t.Path, t.Entries, t.Trees)
		ext = append(ext, t.Hash[:]...)
	}
	b = append(b, "TREE"...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(ext)))
	b = append(b, ext...)
	sum := sha1.Sum(b)
	b = append(b, sum[:]...)
	p := filepath.Join(r.GitDir(), "index")
	f, err := os.OpenFile(p+".lock", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(p+".lock", p)
	}
	if err != nil {
		// A lock left behind would block every later git command.
		if rerr := os.Remove(p + ".lock"); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return fmt.Errorf("%w; %s.lock could not be removed (%v): remove it", err, p, rerr)
		}
	}
	return err
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
// data. A job is one directory's files, so that no two workers create
// files in one directory at once (they would contend for its lock in the
// kernel). The workers share the repository's objectReader, which is safe
// for concurrent use. The first error stops the rest.
func (r *Repo) writeFiles(files []*index.Entry) error {
	var jobs [][]*index.Entry
	job := map[string]int{} // directory -> its job
	for _, e := range files {
		d := parentDir(e.Name)
		i, ok := job[d]
		if !ok {
			i, job[d] = len(jobs), len(jobs)
			jobs = append(jobs, nil)
		}
		jobs[i] = append(jobs[i], e)
	}
	ch := make(chan []*index.Entry)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	var done atomic.Int64
	failed := func() bool { mu.Lock(); defer mu.Unlock(); return first != nil }
	for range checkoutWorkers() {
		wg.Go(func() {
			for job := range ch {
				for _, e := range job {
					if failed() {
						break
					}
					if err := r.writeEntry(e); err != nil {
						mu.Lock()
						if first == nil {
							first = fmt.Errorf("%s: %w", e.Name, err)
						}
						mu.Unlock()
					}
					if r.CheckoutProgress != nil {
						r.CheckoutProgress(int(done.Add(1)), len(files))
					}
				}
			}
		})
	}
	for _, job := range jobs {
		ch <- job
	}
	close(ch)
	wg.Wait()
	return first
}

func (r *Repo) writeEntry(e *index.Entry) error {
	full := filepath.Join(r.Dir, filepath.FromSlash(e.Name))
	if e.Mode == filemode.Submodule {
		return nil // its directory is made; git leaves it empty
	}
	blob, err := r.readBlob(e.Hash) // each blob once: no caching
	if err != nil {
		return err
	}
	if e.Mode != filemode.Symlink {
		perm := os.FileMode(0o644)
		if e.Mode == filemode.Executable {
			perm = 0o755
		}
		if err := createFile(e, full, blob, perm); err != nil {
			return err
		}
	} else {
		if err := os.Symlink(string(blob), full); err != nil {
			return err
		}
		fi, err := os.Lstat(full)
		if err != nil {
			return err
		}
		fillStat(e, fi)
	}
	if int64(e.Size) != int64(uint32(len(blob))) {
		return errors.New("wrote a size other than the blob's")
	}
	return nil
}

// treeEntries returns the entries of tree h, read with the objectReader
// (go-git's store where that reader does not apply), and kept: a tree is
// immutable by its hash, and commits near each other share most of
// theirs (patches check lists or reads at hundreds of commits). Callers
// must not modify the slice.
func (r *Repo) treeEntries(h plumbing.Hash) ([]object.TreeEntry, error) {
	r.treeMu.Lock()
	ents, ok := r.trees[h]
	r.treeMu.Unlock()
	if ok {
		return ents, nil
	}
	t := &object.Tree{}
	if typ, body, err := r.objects().read(h); err == nil && typ == plumbing.TreeObject {
		var o plumbing.MemoryObject
		o.SetType(plumbing.TreeObject)
		_, _ = o.Write(body) // a MemoryObject is a byte slice: Write cannot fail
		if err := t.Decode(&o); err != nil {
			return nil, fmt.Errorf("tree %s: %w", h, err)
		}
	} else if t, err = r.r.TreeObject(h); err != nil {
		return nil, fmt.Errorf("tree %s: %w", h, err)
	}
	r.treeMu.Lock()
	defer r.treeMu.Unlock()
	if r.trees == nil || len(r.trees) >= maxCachedTrees {
		r.trees = map[plumbing.Hash][]object.TreeEntry{}
	}
	r.trees[h] = t.Entries
	return t.Entries, nil
}

// maxCachedTrees bounds Repo's tree cache (SGLang's commits have about 700
// trees each; a tree's entries take a few hundred bytes to kilobytes).
const maxCachedTrees = 50000

// blob returns the bytes of blob h, read with the objectReader (go-git's
// store where that reader does not apply). Blobs up to 1 MiB are kept
// (16 MiB in all), as patches check reads the same files at many commits;
// the caller gets its own copy.
func (r *Repo) blob(h plumbing.Hash) ([]byte, error) {
	r.treeMu.Lock()
	b, ok := r.blobs[h]
	r.treeMu.Unlock()
	if ok {
		return bytes.Clone(b), nil
	}
	b, err := r.readBlob(h)
	if err != nil || len(b) > 1<<20 {
		return b, err
	}
	r.treeMu.Lock()
	defer r.treeMu.Unlock()
	if r.blobs == nil || r.blobBytes+len(b) > 16<<20 {
		r.blobs, r.blobBytes = map[plumbing.Hash][]byte{}, 0
	}
	r.blobs[h] = bytes.Clone(b)
	r.blobBytes += len(b)
	return b, nil
}

func (r *Repo) readBlob(h plumbing.Hash) ([]byte, error) {
	if typ, body, err := r.objects().read(h); err == nil && typ == plumbing.BlobObject {
		return body, nil
	}
	b, err := r.r.BlobObject(h)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", h, err)
	}
	rd, err := b.Reader()
	if err != nil {
		return nil, err
	}
	defer func() { _ = rd.Close() }() // read-only: Close has nothing to report
	return io.ReadAll(rd)
}
