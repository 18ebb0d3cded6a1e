package gitsrc

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"strconv"
	"time"
	"unsafe"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
)

// decodeIndex decodes the bytes of a git index file into what go-git's
// index.Decoder gives. The common case, version 2 or 3 with no extension
// but the cache tree (TREE), which is what git and go-git write unless
// configured otherwise, is decoded here in one pass over the bytes:
// go-git reads each entry's twelve fields through reflection, 5-8 ms of a
// 9 ms `arpatch status` start on SGLang's 4,303 entries. Everything else
// (version 4's prefix-compressed names, other extensions, a checksum
// that does not match, a malformed file) goes to go-git's decoder, so
// those answers and errors stay the library's. The entries' names share
// b's memory: the caller must not modify b afterwards.
//
// Upstream: git Documentation/gitformat-index.txt (the format);
// go-git plumbing/format/index/decoder.go (the values it decodes to,
// which this matches field for field).
//
// It also returns the cache tree's valid directories by path
// (treesByPath), which go-git's Tree cannot give once git has invalidated
// a directory; nil when go-git decoded the file or it has no cache tree.
func decodeIndex(b []byte) (*index.Index, map[string]cachedTree, error) {
	if idx, nodes, ok := decodeIndexFast(b); ok {
		if trees, ok := treesByPath(nodes); ok {
			return idx, trees, nil
		}
		return idx, nil, nil
	}
	idx := &index.Index{}
	return idx, nil, index.NewDecoder(bytes.NewReader(b)).Decode(idx)
}

// decodeIndexFast decodes b when it is a well-formed version 2 or 3
// index with only a TREE extension and a matching SHA-1 trailer, and
// returns the TREE extension's directories in their order (none when
// there is no extension); ok is false for anything else. The entries
// share one backing array.
func decodeIndexFast(b []byte) (idx *index.Index, tree []cacheTreeNode, ok bool) {
	be := binary.BigEndian
	if len(b) < 12+20 || string(b[:4]) != "DIRC" {
		return nil, nil, false
	}
	body := b[:len(b)-20]
	if sha1.Sum(body) != [20]byte(b[len(body):]) {
		return nil, nil, false
	}
	version := be.Uint32(b[4:8])
	if version != 2 && version != 3 {
		return nil, nil, false
	}
	n := be.Uint32(b[8:12])
	if uint64(n)*62 > uint64(len(body)) {
		return nil, nil, false
	}
	idx = &index.Index{Version: version}
	if n > 0 {
		idx.Entries = make([]*index.Entry, n)
	}
	ents := make([]index.Entry, n)
	// The names are slices of b, not one allocation each: b is not
	// modified after (see decodeIndex).
	text := unsafe.String(unsafe.SliceData(body), len(body))
	off := 12
	for i := range ents {
		e := &ents[i]
		if off, ok = decodeEntry(body, text, off, e); !ok {
			return nil, nil, false
		}
		idx.Entries[i] = e
	}
	// Extensions: a 4-byte signature and a 4-byte length each.
	for len(body)-off >= 8 {
		sig, size := string(body[off:off+4]), be.Uint32(body[off+4:off+8])
		off += 8
		if sig != "TREE" || uint64(size) > uint64(len(body)-off) {
			return nil, nil, false
		}
		nodes, ok := parseCacheTree(body[off : off+int(size)])
		if !ok {
			return nil, nil, false
		}
		idx.Cache, tree = goGitTree(nodes), nodes
		off += int(size)
	}
	return idx, tree, off == len(body)
}

// decodeEntry decodes the index entry at body[off:] into e, its name a
// slice of text (body as a string), and returns the offset of the next
// entry; ok is false when the entry runs past body.
func decodeEntry(body []byte, text string, off int, e *index.Entry) (next int, ok bool) {
	be := binary.BigEndian
	h := body[off:]
	if len(h) < 62 {
		return 0, false
	}
	// ctime s, ns; mtime s, ns; dev; ino; mode; uid; gid; size; sha-1; flags
	if s, ns := be.Uint32(h[0:]), be.Uint32(h[4:]); s != 0 || ns != 0 {
		e.CreatedAt = time.Unix(int64(s), int64(ns))
	}
	if s, ns := be.Uint32(h[8:]), be.Uint32(h[12:]); s != 0 || ns != 0 {
		e.ModifiedAt = time.Unix(int64(s), int64(ns))
	}
	e.Dev, e.Inode = be.Uint32(h[16:]), be.Uint32(h[20:])
	e.Mode = filemode.FileMode(be.Uint32(h[24:]))
	e.UID, e.GID, e.Size = be.Uint32(h[28:]), be.Uint32(h[32:]), be.Uint32(h[36:])
	copy(e.Hash[:], h[40:60])
	flags := be.Uint16(h[60:])
	e.Stage = index.Stage(flags>>12) & 0x3
	read := 62
	if flags&0x4000 != 0 { // extended flags, as go-git reads them in any version
		if len(h) < 64 {
			return 0, false
		}
		x := be.Uint16(h[62:])
		e.IntentToAdd, e.SkipWorktree = x&(1<<13) != 0, x&(1<<14) != 0
		read += 2
	}
	nameLen := int(flags & 0xfff)
	consumed := nameLen
	if nameLen == 0xfff { // longer than the field holds: NUL-terminated
		nameLen = bytes.IndexByte(h[read:], 0)
		if nameLen < 0 {
			return 0, false
		}
		consumed = nameLen + 1
	} else if len(h) < read+consumed {
		return 0, false
	}
	e.Name = text[off+read : off+read+nameLen]
	// NUL padding to a multiple of 8, less the NUL a long name took.
	pad := 8 - (read+nameLen)%8 - (consumed - nameLen)
	off += read + consumed + max(pad, 0)
	return off, off <= len(body)
}

// cacheTreeNode is one directory of a TREE extension's body, in the
// body's order (depth first): its name (the last path component; "" for
// the root), its entry count (negative: invalidated, and then no hash)
// and its subdirectory count.
type cacheTreeNode struct {
	name           string
	entries, trees int
	hash           plumbing.Hash
}

// parseCacheTree reads a TREE extension's body, the one walk over it
// that both goGitTree and treesByPath use: for each directory its name,
// NUL, entry count, space, subdirectory count, newline and, unless the
// entry count is negative (invalidated, as git marks every directory
// above a changed entry), the tree's 20-byte hash. ok is false when a
// directory's fields do not parse or its hash is cut short.
func parseCacheTree(b []byte) ([]cacheTreeNode, bool) {
	var out []cacheTreeNode
	for len(b) > 0 {
		name, rest, ok := bytes.Cut(b, []byte{0})
		if !ok {
			return nil, false
		}
		count, rest, ok := bytes.Cut(rest, []byte{' '})
		if !ok {
			return nil, false
		}
		trees, rest, ok := bytes.Cut(rest, []byte{'\n'})
		if !ok {
			return nil, false
		}
		n, err1 := strconv.Atoi(string(count))
		k, err2 := strconv.Atoi(string(trees))
		if err1 != nil || err2 != nil {
			return nil, false
		}
		node := cacheTreeNode{name: string(name), entries: n, trees: k}
		b = rest
		if n >= 0 {
			if len(b) < 20 {
				return nil, false
			}
			node.hash = plumbing.Hash(b[:20])
			b = b[20:]
		}
		out = append(out, node)
	}
	return out, true
}

// goGitTree is the cache tree as go-git's decoder gives it: the valid
// directories in order, each with its name (not its path), counts and
// hash; invalidated directories are left out.
func goGitTree(nodes []cacheTreeNode) *index.Tree {
	t := &index.Tree{}
	for _, n := range nodes {
		if n.entries >= 0 {
			t.Entries = append(t.Entries, index.TreeEntry{Path: n.name, Entries: n.entries, Trees: n.trees, Hash: n.hash})
		}
	}
	return t
}

// cachedTree is a directory git's cache tree holds as valid: the number
// of index entries under it and the hash of its tree.
type cachedTree struct {
	entries int
	hash    plumbing.Hash
}

// treesByPath gives the cache tree's valid directories by slash path
// ("" for the root), following the subdirectory counts: an invalidated
// directory is left out, its subdirectories are not. ok is false when the
// counts do not describe one tree over all of nodes (a negative count, a
// directory missing, one left over). None for no nodes. (go-git's Tree
// drops an invalidated directory with its subdirectory count, so the
// paths of those below it cannot be told from it.)
func treesByPath(nodes []cacheTreeNode) (map[string]cachedTree, bool) {
	if len(nodes) == 0 {
		return nil, true
	}
	out := map[string]cachedTree{}
	i := 0
	var walk func(prefix string) bool
	walk = func(prefix string) bool {
		if i == len(nodes) {
			return false
		}
		n := nodes[i]
		i++
		if n.trees < 0 {
			return false
		}
		p := n.name
		if prefix != "" {
			p = prefix + "/" + p
		}
		if n.entries >= 0 {
			out[p] = cachedTree{entries: n.entries, hash: n.hash}
		}
		for range n.trees {
			if !walk(p) {
				return false
			}
		}
		return true
	}
	if !walk("") || i != len(nodes) {
		return nil, false
	}
	return out, true
}
