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
