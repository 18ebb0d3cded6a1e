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
// (cacheTrees), which go-git's Tree cannot give once git has invalidated
// a directory; nil when go-git decoded the file or it has no cache tree.
func decodeIndex(b []byte) (*index.Index, map[string]cachedTree, error) {
	if idx, tree, ok := decodeIndexFast(b); ok {
		if trees, ok := cacheTrees(tree); ok {
			return idx, trees, nil
		}
		return idx, nil, nil
	}
	idx := &index.Index{}
	return idx, nil, index.NewDecoder(bytes.NewReader(b)).Decode(idx)
}

// decodeIndexFast decodes b when it is a well-formed version 2 or 3
// index with only a TREE extension and a matching SHA-1 trailer, and
// returns the TREE extension's body (nil when there is none); ok is false
// for anything else. The entries share one backing array.
func decodeIndexFast(b []byte) (idx *index.Index, tree []byte, ok bool) {
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
		h := body[off:]
		if len(h) < 62 {
			return nil, nil, false
		}
		e := &ents[i]
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
				return nil, nil, false
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
				return nil, nil, false
			}
			consumed = nameLen + 1
		} else if len(h) < read+consumed {
			return nil, nil, false
		}
		e.Name = text[off+read : off+read+nameLen]
		// NUL padding to a multiple of 8, less the NUL a long name took.
		pad := 8 - (read+nameLen)%8 - (consumed - nameLen)
		off += read + consumed + max(pad, 0)
		if off > len(body) {
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
		t, ok := decodeCacheTree(body[off : off+int(size)])
		if !ok {
			return nil, nil, false
		}
		idx.Cache, tree = t, body[off:off+int(size)]
		off += int(size)
	}
	return idx, tree, off == len(body)
}

// decodeCacheTree decodes a TREE extension's body as go-git does: for
// each directory its path, NUL, entry count, space, subtree count,
// newline and, unless the count is negative (invalidated), the tree's
// 20-byte hash; invalidated directories are left out.
func decodeCacheTree(b []byte) (*index.Tree, bool) {
	t := &index.Tree{}
	for len(b) > 0 {
		var e index.TreeEntry
		p, rest, ok := bytes.Cut(b, []byte{0})
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
		var err1, err2 error
		e.Path = string(p)
		e.Entries, err1 = strconv.Atoi(string(count))
		e.Trees, err2 = strconv.Atoi(string(trees))
		if err1 != nil || err2 != nil {
			return nil, false
		}
		b = rest
		if e.Entries < 0 {
			continue
		}
		if len(b) < 20 {
			return nil, false
		}
		copy(e.Hash[:], b[:20])
		b = b[20:]
		t.Entries = append(t.Entries, e)
	}
	return t, true
}

// cachedTree is a directory git's cache tree holds as valid: the number
// of index entries under it and the hash of its tree.
type cachedTree struct {
	entries int
	hash    plumbing.Hash
}

// cacheTrees reads a TREE extension's body into its valid directories by
// slash path ("" for the root). The body lists the directories depth
// first, each as its name, NUL, entry count, space, subdirectory count,
// newline and, unless the count is negative (invalidated, as git marks
// every directory above a changed entry), the tree's 20-byte hash; an
// invalidated directory is left out, its subdirectories are not. ok is
// false for a malformed body. (go-git's Tree drops an invalidated
// directory with its subdirectory count, so the paths of those below it
// cannot be told from it.)
func cacheTrees(b []byte) (map[string]cachedTree, bool) {
	out := map[string]cachedTree{}
	var node func(prefix string) bool
	node = func(prefix string) bool {
		name, rest, ok := bytes.Cut(b, []byte{0})
		if !ok {
			return false
		}
		count, rest, ok := bytes.Cut(rest, []byte{' '})
		if !ok {
			return false
		}
		trees, rest, ok := bytes.Cut(rest, []byte{'\n'})
		if !ok {
			return false
		}
		n, err1 := strconv.Atoi(string(count))
		k, err2 := strconv.Atoi(string(trees))
		if err1 != nil || err2 != nil || k < 0 {
			return false
		}
		p := string(name)
		if prefix != "" {
			p = prefix + "/" + p
		}
		b = rest
		if n >= 0 {
			if len(b) < 20 {
				return false
			}
			out[p] = cachedTree{entries: n, hash: plumbing.Hash(b[:20])}
			b = b[20:]
		}
		for range k {
			if !node(p) {
				return false
			}
		}
		return true
	}
	if len(b) == 0 {
		return nil, true
	}
	if !node("") || len(b) != 0 {
		return nil, false
	}
	return out, true
}
