package gitsrc

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
)

// commitTreeHash returns the tree hash of commit h, read with the
// repository's objectReader. The error names the commit.
func (r *Repo) commitTreeHash(h plumbing.Hash) (plumbing.Hash, error) {
	t, body, err := r.objects().read(h)
	if err == nil && t == plumbing.CommitObject {
		if th, ok := parseTreeLine(body); ok {
			return th, nil
		}
	}
	c, err := r.r.CommitObject(h)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("%s: reading commit %s: %w", r.Dir, h, err)
	}
	return c.TreeHash, nil
}

func (r *Repo) objects() *objectReader {
	r.once.Do(func() {
		if gd := LocalGitDir(r.Dir); gd != "" {
			r.obj = &objectReader{dir: filepath.Join(gd, "objects")}
		} else {
			r.obj = &objectReader{} // finds nothing: go-git reads
		}
	})
	return r.obj
}

var errNotHere = errors.New("not stored here in a form this reader takes")

// objectReader reads single objects as git does: a loose object file, or
// a binary search in each pack's index (version 2, mapped once) and an
// inflate from the pack, deltas applied with go-git's PatchDelta over a
// bounded cache of delta bases. go-git's object store would first map
// every offset of the pack to its hash, tens of milliseconds and
// megabytes on SGLang's 225,000 objects, before the first deltified
// object. Every object read is checked against its hash; anything this
// reader does not take (an alternate object store, a pack index of
// another version) is errNotHere, and the caller asks go-git. Safe for
// concurrent use: each read takes its own pack file handle from a pool.
type objectReader struct {
	dir      string // objects/
	packOnce sync.Once
	packs    []*packFile
	mu       sync.Mutex // guards cache and size
	cache    map[baseKey][]byte
	size     int
}

type packFile struct {
	path    string
	idxOnce sync.Once
	idx     []byte // the .idx file, mapped; nil when unusable
	readers sync.Pool
}

type packReader struct {
	f    *os.File
	scan *packfile.Scanner
}

type baseKey struct {
	pack   *packFile
	offset int64
}

const baseCacheBytes = 32 << 20

// read returns the type and body of object h, or errNotHere.
func (o *objectReader) read(h plumbing.Hash) (plumbing.ObjectType, []byte, error) {
	if o.dir == "" {
		return plumbing.InvalidObject, nil, errNotHere
	}
	t, body, err := o.readAny(h)
	if err != nil {
		return t, nil, err
	}
	if objectID(t, body) != h {
		return t, nil, fmt.Errorf("object %s: its bytes hash to %s", h, objectID(t, body))
	}
	return t, body, nil
}

func (o *objectReader) readAny(h plumbing.Hash) (plumbing.ObjectType, []byte, error) {
	// Packs first, as git looks: a clone's objects are nearly all
	// packed, and a loose lookup is a failed open per object.
	if p, off := o.find(h); p != nil {
		return o.readPacked(p, off, 0)
	}
	hex := h.String()
	f, err := os.Open(filepath.Join(o.dir, hex[:2], hex[2:]))
	if err != nil {
		return plumbing.InvalidObject, nil, errNotHere
	}
	defer func() { _ = f.Close() }() // read-only: Close has nothing to report
	zr, err := zlib.NewReader(f)
	if err != nil {
		return plumbing.InvalidObject, nil, err
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return plumbing.InvalidObject, nil, err
	}
	head, body, ok := bytes.Cut(b, []byte{0})
	typ, _, _ := bytes.Cut(head, []byte{' '})
	t, err := plumbing.ParseObjectType(string(typ))
	if !ok || err != nil {
		return plumbing.InvalidObject, nil, fmt.Errorf("loose object %s: bad header %q", h, head)
	}
	return t, body, nil
}

// find returns the pack holding h and its offset there, or nil.
func (o *objectReader) find(h plumbing.Hash) (*packFile, int64) {
	o.packOnce.Do(func() {
		idxs, _ := filepath.Glob(filepath.Join(o.dir, "pack", "pack-*.idx"))
		sort.Strings(idxs)
		for _, idx := range idxs {
			o.packs = append(o.packs, &packFile{path: strings.TrimSuffix(idx, ".idx")})
		}
	})
	for _, p := range o.packs {
		p.idxOnce.Do(func() {
			b, err := readOnlyMap(p.path + ".idx")
			if err == nil && len(b) >= 8+256*4 && bytes.Equal(b[:8], []byte{0xff, 't', 'O', 'c', 0, 0, 0, 2}) {
				p.idx = b
				runtime.AddCleanup(p, releaseMap, b)
			} else if err == nil {
				releaseMap(b)
			}
		})
		if off, ok := idxOffset(p.idx, h); ok {
			return p, off
		}
	}
	return nil, 0
}

// readPacked resolves the object at off in p, applying deltas.
func (o *objectReader) readPacked(p *packFile, off int64, depth int) (plumbing.ObjectType, []byte, error) {
	if depth > 10000 {
		return plumbing.InvalidObject, nil, fmt.Errorf("%s.pack: delta chain at offset %d does not end", p.path, off)
	}
	pr, _ := p.readers.Get().(*packReader)
	if pr == nil {
		f, err := os.Open(p.path + ".pack")
		if err != nil {
			return plumbing.InvalidObject, nil, err
		}
		pr = &packReader{f: f, scan: packfile.NewScanner(f)}
	}
	oh, err := pr.scan.SeekObjectHeader(off)
	var buf bytes.Buffer
	if err == nil {
		_, _, err = pr.scan.NextObject(&buf)
	}
	if err != nil {
		_ = pr.f.Close() // read-only: the read error is the one to report
		return plumbing.InvalidObject, nil, fmt.Errorf("%s.pack at offset %d: %w", p.path, off, err)
	}
	p.readers.Put(pr)
	var bt plumbing.ObjectType
	var base []byte
	switch oh.Type {
	case plumbing.CommitObject, plumbing.TreeObject, plumbing.BlobObject, plumbing.TagObject:
		return oh.Type, buf.Bytes(), nil
	case plumbing.OFSDeltaObject:
		bt, base, err = o.base(p, oh.OffsetReference, depth)
	case plumbing.REFDeltaObject:
		bp, boff := o.find(oh.Reference)
		if bp == nil {
			return plumbing.InvalidObject, nil, errNotHere
		}
		bt, base, err = o.base(bp, boff, depth)
	default:
		return plumbing.InvalidObject, nil, fmt.Errorf("%s.pack at offset %d: object type %s", p.path, off, oh.Type)
	}
	if err != nil {
		return plumbing.InvalidObject, nil, err
	}
	body, err := packfile.PatchDelta(base, buf.Bytes())
	return bt, body, err
}

func (o *objectReader) base(p *packFile, off int64, depth int) (plumbing.ObjectType, []byte, error) {
	k := baseKey{p, off}
	o.mu.Lock()
	b, ok := o.cache[k]
	o.mu.Unlock()
	if ok {
		return plumbing.ObjectType(b[0]), b[1:], nil
	}
	t, body, err := o.readPacked(p, off, depth+1)
	if err != nil {
		return t, nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.size+len(body) > baseCacheBytes || o.cache == nil {
		o.cache, o.size = map[baseKey][]byte{}, 0
	}
	o.cache[k] = append([]byte{byte(t)}, body...)
	o.size += len(body) + 1
	return t, body, nil
}

// idxOffset finds h's offset in a pack index (version 2: magic, version,
// 256 fan-out counts, sorted hashes, CRCs, 4-byte offsets, 8-byte large
// offsets) by binary search.
func idxOffset(idx []byte, h plumbing.Hash) (int64, bool) {
	const hashes = 8 + 256*4
	if len(idx) < hashes {
		return 0, false
	}
	fan := func(i int) int { return int(binary.BigEndian.Uint32(idx[8+4*i:])) }
	n := fan(255)
	if len(idx) < hashes+n*28 {
		return 0, false
	}
	lo, hi := 0, fan(int(h[0]))
	if h[0] > 0 {
		lo = fan(int(h[0]) - 1)
	}
	i, found := sort.Find(hi-lo, func(i int) int {
		return bytes.Compare(h[:], idx[hashes+(lo+i)*20:hashes+(lo+i)*20+20])
	})
	if !found {
		return 0, false
	}
	i += lo
	off := int64(binary.BigEndian.Uint32(idx[hashes+n*24+i*4:]))
	if off&0x80000000 == 0 {
		return off, true
	}
	at := hashes + n*28 + int(off&0x7fffffff)*8
	if len(idx) < at+8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(idx[at:])), true
}

// parseTreeLine reads the "tree <hex>" line a commit object starts with.
func parseTreeLine(body []byte) (plumbing.Hash, bool) {
	line, _, _ := bytes.Cut(body, []byte{'\n'})
	hex, ok := bytes.CutPrefix(line, []byte("tree "))
	if !ok || !githash.Hash(hex).IsFull() {
		return plumbing.ZeroHash, false
	}
	return plumbing.NewHash(string(hex)), true
}

// indexCache holds the last index decoded in this process, by the SHA-1
// checksum git writes at the end of the file: status, the untracked-file
// guards and the kernel project's lookup each read the checkout's index.
var indexCache struct {
	sync.Mutex
	sum   [20]byte
	idx   *index.Index
	trees map[string]cachedTree // the cache tree's valid directories (decodeIndex)
}

// index returns the checkout's index, decoded by decodeIndex or, when the
// checksum at its end is that of the index decoded last, from indexCache
// (only those 20 bytes are read then); ModTime is the file's mtime now.
// Callers must not modify it. A checkout with no index has an empty one,
// as in go-git.
func (r *Repo) index() (*index.Index, error) {
	idx, _, err := r.indexAndTrees()
	return idx, err
}

// indexAndTrees is index with the cache tree's valid directories by
// path (nil when go-git decoded the index); callers must not modify them.
func (r *Repo) indexAndTrees() (*index.Index, map[string]cachedTree, error) {
	p := filepath.Join(r.GitDir(), "index")
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return &index.Index{Version: 2}, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the index of %s: %w", r.Dir, err)
	}
	defer func() { _ = f.Close() }() // read-only: Close has nothing to report
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	indexCache.Lock()
	defer indexCache.Unlock()
	if indexCache.idx != nil && !endsWith(f, fi.Size(), indexCache.sum) {
		indexCache.idx = nil
	}
	if indexCache.idx == nil {
		buf := bytes.NewBuffer(make([]byte, 0, fi.Size()+bytes.MinRead)) // one read, one allocation
		_, err = buf.ReadFrom(f)
		b := buf.Bytes()
		if err != nil || len(b) < 20 {
			return nil, nil, fmt.Errorf("reading the index of %s: %v (%d bytes)", r.Dir, err, len(b))
		}
		idx, trees, err := decodeIndex(b)
		if err != nil {
			return nil, nil, fmt.Errorf("reading the index of %s: %w", r.Dir, err)
		}
		indexCache.sum, indexCache.idx, indexCache.trees = [20]byte(b[len(b)-20:]), idx, trees
	}
	idx := *indexCache.idx
	idx.ModTime = fi.ModTime()
	return &idx, indexCache.trees, nil
}

// endsWith reports whether the file f, n bytes long, ends with sum.
func endsWith(f *os.File, n int64, sum [20]byte) bool {
	var b [20]byte
	if n < 20 {
		return false
	}
	_, err := f.ReadAt(b[:], n-20)
	return err == nil && b == sum
}
