package testrepo

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// Snapshot is a tree's fingerprint, for a test to prove that something
// left the tree as it was, or made it as another tool makes it: each path
// under the directory (relative, slash-separated; directories included)
// mapped to its entry, as SnapshotEntry formats it.
type Snapshot map[string]string

// SnapshotOptions says what SnapshotTree records beyond each path's type,
// permission bits and content.
type SnapshotOptions struct {
	// WithGit walks .git too; without it .git and everything under it are
	// left out, except the Extra paths.
	WithGit bool
	// Extra names paths (slash-separated, relative to the directory) to
	// record even where the walk leaves them out (a file under .git, such
	// as .git/arpatch/state.json); a missing one is recorded as "absent".
	Extra []string
	// ModTime records each regular file's modification time (nanoseconds
	// since the epoch). Directories' times are never recorded.
	ModTime bool
}

// SnapshotTree walks dir and returns its Snapshot: for each path,
// SnapshotEntry of what os.Lstat says (a symlink is not followed) and of
// the file's bytes. It returns the first error walking, reading a file or
// a link, with the path.
func SnapshotTree(dir string, o SnapshotOptions) (Snapshot, error) {
	s := Snapshot{}
	add := func(rel string, fi fs.FileInfo) error {
		p := filepath.Join(dir, rel)
		rel = filepath.ToSlash(rel)
		var body []byte
		var err error
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			var target string
			target, err = os.Readlink(p)
			body = []byte(target)
		case fi.Mode().IsRegular():
			body, err = os.ReadFile(p)
		}
		if err != nil {
			return err
		}
		var mtime int64
		if o.ModTime && fi.Mode().IsRegular() {
			mtime = fi.ModTime().UnixNano()
		}
		s[rel] = SnapshotEntry(fi.Mode(), body, mtime)
		return nil
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == ".git" && !o.WithGit {
			return fs.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return add(rel, fi)
	})
	if err != nil {
		return nil, err
	}
	for _, rel := range o.Extra {
		fi, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(rel)))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			s[rel] = "absent"
		case err != nil:
			return nil, err
		default:
			if err := add(filepath.FromSlash(rel), fi); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// SnapshotEntry formats one path's entry: the mode as fs.FileMode.String
// writes it (type and permission bits), then for a symlink " -> " and its
// target (body), for a regular file its size in bytes, its modification
// time in nanoseconds when mtime is not 0, and the sha256 of body in hex.
// A directory's entry is its mode alone.
func SnapshotEntry(mode fs.FileMode, body []byte, mtime int64) string {
	switch {
	case mode&fs.ModeSymlink != 0:
		return mode.String() + " -> " + string(body)
	case mode.IsRegular():
		sum := sha256.Sum256(body)
		if mtime != 0 {
			return fmt.Sprintf("%v %d %d %s", mode, len(body), mtime, hex.EncodeToString(sum[:]))
		}
		return fmt.Sprintf("%v %d %s", mode, len(body), hex.EncodeToString(sum[:]))
	}
	return mode.String()
}

// Diff returns the paths whose entries differ between s and t, a path in
// only one of them included, sorted; nil when the two are the same.
func (s Snapshot) Diff(t Snapshot) []string {
	var out []string
	for p, v := range s {
		if w, ok := t[p]; !ok || w != v {
			out = append(out, p)
		}
	}
	for p := range t {
		if _, ok := s[p]; !ok {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Hash returns the sha256, in hex, of every path and entry in path order:
// equal for two Snapshots exactly when they hold the same entries.
func (s Snapshot) Hash() string {
	paths := make([]string, 0, len(s))
	for p := range s {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	h := sha256.New()
	for _, p := range paths {
		fmt.Fprintf(h, "%q %q\n", p, s[p])
	}
	return hex.EncodeToString(h.Sum(nil))
}
