//go:build !linux

package gitsrc

import (
	"os"

	"github.com/go-git/go-git/v5/plumbing/format/index"
)

// fillStat records fi's size and mtime in e; elsewhere than Linux the
// other stat fields stay zero and status does not compare them.
func fillStat(e *index.Entry, fi os.FileInfo) {
	e.Size = uint32(fi.Size())
	e.ModifiedAt = fi.ModTime()
}

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
