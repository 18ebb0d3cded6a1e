//go:build linux

package gitsrc

import (
	"errors"
	"os"
	"syscall"
	"time"

	"github.com/go-git/go-git/v5/plumbing/format/index"
)

// fillStat records fi's stat data in e as git's index keeps it: size and
// mtime, and on Linux ctime, device, inode, uid and gid (32 bits each, as
// the index format stores them).
func fillStat(e *index.Entry, fi os.FileInfo) {
	e.Size = uint32(fi.Size())
	e.ModifiedAt = fi.ModTime()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		fillStatT(e, st)
	}
}

func fillStatT(e *index.Entry, st *syscall.Stat_t) {
	e.Size = uint32(st.Size)
	e.ModifiedAt = time.Unix(st.Mtim.Sec, st.Mtim.Nsec)
	e.CreatedAt = time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
	e.Dev, e.Inode = uint32(st.Dev), uint32(st.Ino)
	e.UID, e.GID = st.Uid, st.Gid
}

// createFile writes data to a new file at path (O_EXCL, perm before the
// umask) and records its stat data in e, with raw system calls: an
// os.File would also set descriptor flags and try to register it with
// the poller, three more calls for each file of a checkout.
func createFile(e *index.Entry, path string, data []byte, perm os.FileMode) error {
	fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	for b := data; len(b) > 0 && err == nil; {
		var n int
		n, err = syscall.Write(fd, b)
		b = b[max(n, 0):]
		if errors.Is(err, syscall.EINTR) {
			err = nil
		}
	}
	var st syscall.Stat_t
	if err == nil {
		err = syscall.Fstat(fd, &st) // the last write set mtime and ctime
	}
	if cerr := syscall.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	fillStatT(e, &st)
	return nil
}
