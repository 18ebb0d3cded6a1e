package gitsrc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// AssumeUnchanged lists the index entries marked assume-unchanged (`git
// update-index --assume-unchanged`), sorted. git status and git stash do
// not look at their files, so an edit there is invisible to both, while
// Changes (go-git, which does not read the bit) lists it: the remedy for
// such an edit clears the bit first. go-git's index decoder drops the bit,
// so this reads the index file itself (versions 2, 3 and 4).
// Upstream: Documentation/gitformat-index.txt@v2.39.0 (the "assume-valid"
// flag, 0x8000 of an entry's 16-bit flags).
func (r *Repo) AssumeUnchanged() ([]string, error) {
	b, err := os.ReadFile(filepath.Join(r.GitDir(), "index"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the index of %s: %w", r.Dir, err)
	}
	out, err := assumeValid(b)
	if err != nil {
		return nil, fmt.Errorf("reading the index of %s: %w", r.Dir, err)
	}
	sort.Strings(out)
	return out, nil
}

// assumeValid returns the names of the entries of index file b whose
// assume-valid flag is set.
func assumeValid(b []byte) ([]string, error) {
	const (
		header    = 12
		entryHead = 62 // stat data (40), object id (20), flags (2)
		valid     = 0x8000
		extended  = 0x4000
		nameMask  = 0xfff
	)
	malformed := errors.New("malformed index")
	if len(b) < header || string(b[:4]) != "DIRC" {
		return nil, malformed
	}
	version := binary.BigEndian.Uint32(b[4:8])
	if version < 2 || version > 4 {
		return nil, fmt.Errorf("index version %d is not 2, 3 or 4", version)
	}
	n := binary.BigEndian.Uint32(b[8:12])
	var out []string
	var prev []byte
	p := header
	for range n {
		if p+entryHead > len(b) {
			return nil, malformed
		}
		flags := binary.BigEndian.Uint16(b[p+60 : p+62])
		q := p + entryHead
		if flags&extended != 0 {
			q += 2
		}
		var name []byte
		if version == 4 {
			// The name is the previous one less a varint's count of
			// bytes from its end, plus a NUL-terminated suffix.
			strip, k := 0, 0
			for {
				if q >= len(b) {
					return nil, malformed
				}
				c := b[q]
				q++
				if k > 0 {
					strip++
				}
				strip = strip<<7 | int(c&0x7f)
				k++
				if c&0x80 == 0 {
					break
				}
			}
			end := bytes.IndexByte(b[q:], 0)
			if end < 0 || strip > len(prev) {
				return nil, malformed
			}
			name = append(append([]byte{}, prev[:len(prev)-strip]...), b[q:q+end]...)
			q += end + 1
		} else {
			l := int(flags & nameMask)
			if l == nameMask {
				l = bytes.IndexByte(b[q:], 0)
			}
			if l < 0 || q+l > len(b) {
				return nil, malformed
			}
			name = b[q : q+l]
			// 1 to 8 NULs pad the entry to a multiple of 8 bytes.
			q = p + (q+l-p+8)/8*8
		}
		if flags&valid != 0 {
			out = append(out, string(name))
		}
		prev, p = name, q
	}
	return out, nil
}
