package gitsrc

import (
	"bytes"
	"crypto/sha1"
	"fmt"
	"path"
	"sort"
	"strconv"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/index"
)

// indexTree is the tree of directories the index entries describe, with
// each directory's git tree hash.
type indexTree struct {
	files  map[string]*index.Entry
	dirs   map[string]*indexDir
	cached map[string]cachedTree // git's cache tree, valid directories by path; may be nil
}

type indexDir struct {
	kids    []string // names of files and subdirectories
	sum     plumbing.Hash
	done    bool
	entries int // index entries under it, once counted
	counted bool
}

// newIndexTree builds the tree of entries (with no cache tree: set
// cached for hash to use one).
func newIndexTree(entries []*index.Entry) *indexTree {
	it := &indexTree{files: make(map[string]*index.Entry, len(entries)), dirs: map[string]*indexDir{"": {}}}
	for _, e := range entries {
		it.files[e.Name] = e
		child := e.Name
		for {
			dir := path.Dir(child)
			if dir == "." {
				dir = ""
			}
			d, seen := it.dirs[dir]
			if !seen {
				d = &indexDir{}
				it.dirs[dir] = d
			}
			if n := len(d.kids); n == 0 || d.kids[n-1] != path.Base(child) {
				d.kids = append(d.kids, path.Base(child))
			}
			if seen || dir == "" {
				break
			}
			child = dir
		}
	}
	return it
}

func (it *indexTree) children(dir string) []string {
	d := it.dirs[dir]
	out := make([]string, len(d.kids))
	for i, k := range d.kids {
		out[i] = path.Join(dir, k)
	}
	return out
}

// eachFile calls fn for p when it is a file, or for every file under it.
func (it *indexTree) eachFile(p string, fn func(string)) {
	if _, ok := it.files[p]; ok {
		fn(p)
	}
	if _, ok := it.dirs[p]; ok {
		for _, c := range it.children(p) {
			it.eachFile(c, fn)
		}
	}
}

// hash returns the git tree hash of directory dir, as `git write-tree`
// would write it: entries in git's order (a directory sorts as its name
// followed by a slash), "<mode> <name>\0<20-byte hash>" each.
//
// A directory git's cache tree holds as valid, over as many entries as the
// index has under it, takes the cache tree's hash, as git's own diff of
// the index against HEAD does: after `git add` git invalidates only the
// directories above the added path, and hashing all of SGLang's 680 trees
// again took 5.6 ms.
func (it *indexTree) hash(dir string) plumbing.Hash {
	d := it.dirs[dir]
	if d.done {
		return d.sum
	}
	if c, ok := it.cached[dir]; ok && c.entries == it.count(dir) {
		d.sum, d.done = c.hash, true
		return d.sum
	}
	type ent struct {
		key, name, mode string
		sum             plumbing.Hash
	}
	ents := make([]ent, 0, len(d.kids))
	for _, k := range d.kids {
		p := path.Join(dir, k)
		if _, ok := it.dirs[p]; ok {
			ents = append(ents, ent{k + "/", k, "40000", it.hash(p)})
		}
		if e, ok := it.files[p]; ok {
			ents = append(ents, ent{k, k, strconv.FormatUint(uint64(e.Mode), 8), e.Hash})
		}
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].key < ents[j].key })
	var body bytes.Buffer
	for _, e := range ents {
		body.WriteString(e.mode + " " + e.name + "\x00")
		body.Write(e.sum[:])
	}
	d.sum = objectID(plumbing.TreeObject, body.Bytes())
	d.done = true
	return d.sum
}

// count returns the number of index entries under directory dir.
func (it *indexTree) count(dir string) int {
	d := it.dirs[dir]
	if !d.counted {
		for _, k := range d.kids {
			p := path.Join(dir, k)
			if _, ok := it.files[p]; ok {
				d.entries++
			}
			if _, ok := it.dirs[p]; ok {
				d.entries += it.count(p)
			}
		}
		d.counted = true
	}
	return d.entries
}

func objectID(t plumbing.ObjectType, body []byte) plumbing.Hash {
	h := sha1.New()
	fmt.Fprintf(h, "%s %d\x00", t, len(body))
	h.Write(body)
	var sum plumbing.Hash
	copy(sum[:], h.Sum(nil))
	return sum
}
