// Package testrepo makes small fixture git repositories for arpatch's
// tests, with go-git and fixed author and time, so the same files always
// give the same commit hash. Fixtures are trees the tests write, shaped
// like upstream SGLang; they never hold upstream code. A Snapshot
// (SnapshotTree) fingerprints a tree, for a test to prove a command left
// it byte-identical or made it as git makes it.
package testrepo

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/util"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/arpatch/arpatch/internal/gitsrc/gitdir"
)

var sig = &object.Signature{Name: "arpatch fixture", Email: "fixture@arpatch.invalid", When: time.Date(2026, 4, 3, 12, 0, 0, 0, time.UTC)}

// Init makes dir (with the files already in it) a git repository and
// commits everything. It returns the 40-hex commit. The git directory
// holds only what git and go-git read (gitdir.Create), not go-git
// PlainInit's empty objects/info and refs/tags: a fixture made per test
// costs fewer inodes.
func Init(dir string) (string, error) {
	if err := gitdir.Create(filepath.Join(dir, ".git"), nil); err != nil {
		return "", err
	}
	return Commit(dir, "fixture: initial tree")
}

// Commit stages every change in dir (additions, edits, deletions) and
// commits it, returning the 40-hex commit. The objects the commit adds go
// into one new pack (objects/pack/pack-*.pack and .idx, undeltified), not
// one loose file and directory each as go-git writes them: a fixture
// repository is packed, as a mirror or a fresh clone is, and making it
// creates two files per commit. Objects already in the repository are not
// written again; past maxPacks packs, all objects go into one. The commit
// hash is the same either way. It returns go-git's error opening,
// staging or committing, or the error writing the pack, naming dir.
func Commit(dir, msg string) (string, error) {
	r, err := git.PlainOpen(dir)
	if err != nil {
		return "", fmt.Errorf("%s: opening the repository: %w", dir, err)
	}
	w, err := r.Worktree()
	if err != nil {
		return "", fmt.Errorf("%s: opening the repository: %w", dir, err)
	}
	opened, ok := r.Storer.(*filesystem.Storage)
	if !ok {
		return "", fmt.Errorf("%s: not a repository on disk", dir)
	}
	fs := filesystem.NewStorage(wholeIndexes{opened.Filesystem()}, cache.NewObjectLRUDefault())
	ps := &packingStorage{Storage: fs, added: map[plumbing.Hash]plumbing.EncodedObject{}}
	if r, err = git.Open(ps, w.Filesystem); err != nil {
		return "", fmt.Errorf("%s: opening the repository: %w", dir, err)
	}
	if w, err = r.Worktree(); err != nil {
		return "", fmt.Errorf("%s: opening the repository: %w", dir, err)
	}
	h, err := commitAll(w, msg)
	if err != nil {
		return "", fmt.Errorf("%s: %w", dir, err)
	}
	if _, err := writePack(fs, ps, ps.order, 0); err != nil {
		return "", fmt.Errorf("%s: packing commit %s: %w", dir, h, err)
	}
	packs, err := filepath.Glob(filepath.Join(dir, ".git", "objects", "pack", "pack-*.pack"))
	if err == nil && len(packs) > maxPacks {
		err = repack(dir, 0)
	}
	if err != nil {
		return "", fmt.Errorf("%s: repacking after commit %s: %w", dir, h, err)
	}
	return h.String(), nil
}

// commitAll stages every change in w's work tree and commits it with
// msg, as the fixture author at the fixture time (sig), so that Commit
// and History.Change give the same files and message the same commit. It
// returns go-git's error staging or committing, saying which.
func commitAll(w *git.Worktree, msg string) (plumbing.Hash, error) {
	if err := w.AddWithOptions(&git.AddOptions{All: true}); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("staging: %w", err)
	}
	h, err := w.Commit(msg, &git.CommitOptions{Author: sig, Committer: sig, AllowEmptyCommits: true})
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("committing: %w", err)
	}
	return h, nil
}

// maxPacks is the most packs Commit leaves in a repository; past it, it
// puts every object into one, as `git gc --auto` does past
// gc.autoPackLimit. go-git reads the index of every pack (with a read
// call per fan-out entry, 256 each) whenever it first reads an object,
// so a pack per commit in a repository of 80 commits made committing and
// reading it dearer than loose objects.
const maxPacks = 8

// wholeIndexes is a repository's file system from which pack indexes
// are read whole: go-git's index decoder reads the 256 fan-out entries
// one read call each, every time it opens a repository's objects.
type wholeIndexes struct{ billy.Filesystem }

func (fs wholeIndexes) Open(name string) (billy.File, error) {
	if path.Ext(name) != ".idx" {
		return fs.Filesystem.Open(name)
	}
	b, err := util.ReadFile(fs.Filesystem, name)
	if err != nil {
		return nil, err
	}
	return &readOnlyFile{Reader: bytes.NewReader(b), name: name}, nil
}

// readOnlyFile is a file read from memory.
type readOnlyFile struct {
	*bytes.Reader
	name string
}

func (f *readOnlyFile) Name() string              { return f.name }
func (f *readOnlyFile) Write([]byte) (int, error) { return 0, os.ErrPermission }
func (f *readOnlyFile) Truncate(int64) error      { return os.ErrPermission }
func (f *readOnlyFile) Close() error              { return nil }
func (f *readOnlyFile) Lock() error               { return nil }
func (f *readOnlyFile) Unlock() error             { return nil }

// packingStorage is a repository's storage that keeps the objects set in
// it in memory (in order, each once, leaving out those the repository
// already has) until Commit writes them as one pack.
type packingStorage struct {
	*filesystem.Storage
	added map[plumbing.Hash]plumbing.EncodedObject
	order []plumbing.Hash
}

func (s *packingStorage) SetEncodedObject(o plumbing.EncodedObject) (plumbing.Hash, error) {
	if o.Type() == plumbing.OFSDeltaObject || o.Type() == plumbing.REFDeltaObject {
		return plumbing.ZeroHash, plumbing.ErrInvalidType
	}
	h := o.Hash()
	if _, ok := s.added[h]; !ok && s.Storage.HasEncodedObject(h) != nil {
		s.added[h] = o
		s.order = append(s.order, h)
	}
	return h, nil
}

func (s *packingStorage) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if o, ok := s.added[h]; ok {
		if t != plumbing.AnyObject && o.Type() != t {
			return nil, plumbing.ErrObjectNotFound
		}
		return o, nil
	}
	return s.Storage.EncodedObject(t, h)
}

func (s *packingStorage) HasEncodedObject(h plumbing.Hash) error {
	if _, ok := s.added[h]; ok {
		return nil
	}
	return s.Storage.HasEncodedObject(h)
}

func (s *packingStorage) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	if o, ok := s.added[h]; ok {
		return o.Size(), nil
	}
	return s.Storage.EncodedObjectSize(h)
}

func (s *packingStorage) IterEncodedObjects(t plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	stored, err := s.Storage.IterEncodedObjects(t)
	if err != nil {
		return nil, err
	}
	var added []plumbing.EncodedObject
	for _, h := range s.order {
		if o := s.added[h]; t == plumbing.AnyObject || o.Type() == t {
			added = append(added, o)
		}
	}
	return storer.NewMultiEncodedObjectIter([]storer.EncodedObjectIter{storer.NewEncodedObjectSliceIter(added), stored}), nil
}

// writePack writes the objects hashes (read from objs) as one pack into
// the repository's storage fs, deltified within a window of window
// objects (0: none), and returns the pack's checksum, which names it
// (pack-<checksum>.pack). No objects, no pack: it returns the zero hash.
func writePack(fs *filesystem.Storage, objs storer.EncodedObjectStorer, hashes []plumbing.Hash, window uint) (plumbing.Hash, error) {
	if len(hashes) == 0 {
		return plumbing.ZeroHash, nil
	}
	w, err := fs.PackfileWriter()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	sum, err := packfile.NewEncoder(w, objs, false).Encode(hashes, window)
	if err != nil {
		_ = w.Close() // the encoder's error is the one to report
		return plumbing.ZeroHash, err
	}
	return sum, w.Close()
}

// WriteFiles writes files (slash paths relative to dir) with their
// contents, creating directories.
func WriteFiles(dir string, files map[string]string) error {
	for p, c := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Change writes files into dir (content "" removes the file) and commits
// everything as Commit does, returning the 40-hex commit.
func Change(dir, msg string, files map[string]string) (string, error) {
	write := map[string]string{}
	for p, c := range files {
		if c == "" {
			if err := os.Remove(filepath.Join(dir, filepath.FromSlash(p))); err != nil {
				return "", err
			}
			continue
		}
		write[p] = c
	}
	if err := WriteFiles(dir, write); err != nil {
		return "", err
	}
	return Commit(dir, msg)
}

// KernelPyproject is a pyproject.toml shaped like upstream's sgl-kernel
// project's (sgl-kernel/ and, from 2026-07-29, python/sglang/kernels/aot/):
// built by scikit-build-core, distribution sglang-kernel, wheel package
// python/sgl_kernel. A fixture tree needs it next to CMakeLists.txt and
// the allreduce translation unit for arpatch to find its project.
const KernelPyproject = `[build-system]
requires = ["scikit-build-core>=0.10", "torch>=2.8.0", "wheel"]
build-backend = "scikit_build_core.build"

[project]
name = "sglang-kernel"
version = "0.4.1"

[tool.scikit-build]
cmake.build-type = "Release"
wheel.packages = ["python/sgl_kernel"]
`

// Pack puts every object of the repository at dir into one pack (go-git's
// pack encoder, which deltifies within a window of 10) and removes the
// loose objects and the other packs, as `git gc` leaves a repository.
// (go-git's RepackObjects cannot: its object walker fails on a tree
// holding a symlink.) It returns go-git's error reading or writing the
// objects, or the error removing a file.
func Pack(dir string) error { return repack(dir, 10) }

// repack is Pack with deltas searched within a window of window objects
// (0: none).
func repack(dir string, window uint) error {
	r, fs, err := openStorage(dir)
	if err != nil {
		return err
	}
	var hashes []plumbing.Hash
	seen := map[plumbing.Hash]bool{}
	iter, err := r.Storer.IterEncodedObjects(plumbing.AnyObject)
	if err != nil {
		return err
	}
	if err := iter.ForEach(func(o plumbing.EncodedObject) error {
		if h := o.Hash(); !seen[h] {
			seen[h] = true
			hashes = append(hashes, h)
		}
		return nil
	}); err != nil {
		return err
	}
	sum, err := writePack(fs, fs, hashes, window)
	if err != nil {
		return err
	}
	loose, err := filepath.Glob(filepath.Join(dir, ".git", "objects", "[0-9a-f][0-9a-f]"))
	if err != nil {
		return err
	}
	for _, d := range loose {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	return removePacks(dir, "pack-"+sum.String())
}

// Unpack writes every object of the repository at dir loose (a file per
// object in a directory per first byte, as go-git writes them) and
// removes its packs: the repository a test needs that reads loose
// objects or removes one. It returns go-git's error reading or writing
// the objects, or the error removing a pack file.
func Unpack(dir string) error {
	_, fs, err := openStorage(dir)
	if err != nil {
		return err
	}
	iter, err := fs.IterEncodedObjects(plumbing.AnyObject)
	if err != nil {
		return err
	}
	if err := iter.ForEach(func(o plumbing.EncodedObject) error {
		_, err := fs.SetEncodedObject(o)
		return err
	}); err != nil {
		return err
	}
	return removePacks(dir, "")
}

func openStorage(dir string) (*git.Repository, *filesystem.Storage, error) {
	r, err := git.PlainOpen(dir)
	if err != nil {
		return nil, nil, err
	}
	fs, ok := r.Storer.(*filesystem.Storage)
	if !ok {
		return nil, nil, fmt.Errorf("%s: not a repository on disk", dir)
	}
	return r, fs, nil
}

// removePacks removes the files of every pack in dir's repository but
// the one named keep ("pack-<checksum>"; "" keeps none).
func removePacks(dir, keep string) error {
	files, err := filepath.Glob(filepath.Join(dir, ".git", "objects", "pack", "pack-*"))
	if err != nil {
		return err
	}
	for _, f := range files {
		if base := filepath.Base(f); keep == "" || strings.TrimSuffix(base, filepath.Ext(base)) != keep {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	return nil
}

// Upstream's tree at 84118acf, measured with git ls-tree: 4,303 files
// (4,192 regular, 108 executable, 3 symlinks) in 679 directories,
// 46,953,592 bytes; files per path depth 1..9 and size quantiles below.
var (
	sizedFilesAtDepth = []int{8, 73, 533, 974, 957, 690, 659, 114, 295}
	sizedDirsAtLevel  = []int{10, 40, 120, 160, 140, 110, 60, 39}
	// size quantiles: fraction of files, size in bytes (median 4.6 KB,
	// 90th percentile 24.5 KB, 99th 78 KB).
	sizedQuantiles = [][2]float64{{0, 40}, {0.1, 600}, {0.25, 1800}, {0.5, 4635}, {0.75, 11000}, {0.9, 24546}, {0.99, 78174}, {1, 400000}}
	sizedWords     = strings.Fields("def self return import from torch tensor if else for in range not None True False class x y size dim world_size rank buffer ptr kernel launch stage reduce allreduce cuda stream int float bf16 half assert raise with as lambda = == + - * ( ) [ ] : , . -> # TODO")
)

// WriteSized writes into dir a tree shaped like upstream SGLang's at
// 84118acf (see the figures above): the same number of files at each
// path depth, in about as many directories, with sizes spread like
// upstream's and text that compresses like source code. It is the same
// for every call. It returns the number of files written (3 of them
// symlinks).
func WriteSized(dir string) (int, error) {
	rng := rand.New(rand.NewSource(0x84118acf))
	levels := [][]string{{""}}
	for l, n := range sizedDirsAtLevel {
		var ds []string
		for i := range n {
			parent := levels[l][i%len(levels[l])]
			ds = append(ds, path.Join(parent, fmt.Sprintf("pkg%d_%03d", l+1, i)))
		}
		levels = append(levels, ds)
	}
	count := 0
	for depth, n := range sizedFilesAtDepth {
		dirs := levels[depth]
		for i := range n {
			p := path.Join(dirs[i%len(dirs)], fmt.Sprintf("mod%04d.py", count))
			full := filepath.Join(dir, filepath.FromSlash(p))
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				return count, err
			}
			mode := os.FileMode(0o644)
			if count%40 == 7 && count/40 < 108 {
				mode = 0o755
			}
			var err error
			if count < 3 {
				err = os.Symlink("../common.py", full) // dangling, as git allows
			} else {
				err = os.WriteFile(full, sizedText(rng, sizedSize(rng.Float64())), mode)
			}
			if err != nil {
				return count, err
			}
			count++
		}
	}
	return count, nil
}

func sizedSize(u float64) int {
	q := sizedQuantiles
	for i := 1; i < len(q); i++ {
		if u <= q[i][0] {
			f := (u - q[i-1][0]) / (q[i][0] - q[i-1][0])
			return int(q[i-1][1] + f*(q[i][1]-q[i-1][1]))
		}
	}
	return int(q[len(q)-1][1])
}

func sizedText(rng *rand.Rand, n int) []byte {
	b := make([]byte, 0, n+80)
	for len(b) < n {
		indent := 4 * rng.Intn(4)
		for range indent {
			b = append(b, ' ')
		}
		for w := 3 + rng.Intn(8); w > 0; w-- {
			b = append(b, sizedWords[rng.Intn(len(sizedWords))]...)
			b = append(b, ' ')
		}
		b[len(b)-1] = '\n'
	}
	return b[:n]
}
