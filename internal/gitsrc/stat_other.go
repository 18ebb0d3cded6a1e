//go:build !linux

package gitsrc

import (
	"os"
	"path/filepath"

	"github.com/go-git/go-git/v5/plumbing/format/index"
)

// fillStat records fi's size and mtime in e; elsewhere than Linux the
// other stat fields stay zero and status does not compare them.
func fillStat(e *index.Entry, fi os.FileInfo) {
	e.Size = uint32(fi.Size())
	e.ModifiedAt = fi.ModTime()
}

// deviceOf is 0 elsewhere than Linux: entries record no device there,
// and status compares racy times in whole seconds.
func deviceOf(string) uint32 { return 0 }

// createFile writes data to a new file at path (O_EXCL, perm before the
// umask) and records its size and mtime in e.
func createFile(e *index.Entry, path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	var fi os.FileInfo
	if err == nil {
		fi, err = f.Stat()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		fillStat(e, fi)
	}
	return err
}

// treeRoot is a work tree's top directory; elsewhere than Linux, status
// stats and lists what is under it by full paths.
type treeRoot struct{ dir string }

// openTreeRoot checks that dir is a directory. The error is an
// *fs.PathError naming dir.
func openTreeRoot(dir string) (*treeRoot, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	_ = f.Close() // read-only: Close has nothing to report
	return &treeRoot{dir: dir}, nil
}

// Close does nothing: no descriptor is held.
func (t *treeRoot) Close() {}

func (t *treeRoot) path(rel string) string { return filepath.Join(t.dir, filepath.FromSlash(rel)) }

// lstat returns the stat data of rel (a slash path under the root; ""
// is the root itself, stat'ed through a symlink), size, mode and mtime
// only. The error is os.Lstat's.
func (t *treeRoot) lstat(rel string) (fileStat, error) {
	stat := os.Lstat
	if rel == "" {
		stat = os.Stat
	}
	fi, err := stat(t.path(rel))
	if err != nil {
		return fileStat{}, err
	}
	return fileStat{mode: fi.Mode(), size: fi.Size(), mtime: fi.ModTime()}, nil
}

// readDir lists the directory rel (a slash path under the root, "" for
// the root), as os.ReadDir does; buf is not used here.
func (t *treeRoot) readDir(rel string, _ []byte) ([]dirEntry, error) {
	ents, err := os.ReadDir(t.path(rel))
	out := make([]dirEntry, len(ents))
	for i, d := range ents {
		out[i] = dirEntry{name: d.Name(), typ: d.Type()}
	}
	return out, err
}
