//go:build linux

package gitsrc

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-git/go-git/v5/plumbing/format/index"
	"golang.org/x/sys/unix"
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
	e.ModifiedAt = time.Unix(st.Mtim.Unix())
	e.CreatedAt = time.Unix(st.Ctim.Unix())
	e.Dev, e.Inode = uint32(st.Dev), uint32(st.Ino)
	e.UID, e.GID = st.Uid, st.Gid
}

// deviceOf is the device of the file at path, 32 bits as the index
// records an entry's, or 0 when it cannot be had.
func deviceOf(path string) uint32 {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return 0
	}
	return uint32(st.Dev)
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

// treeRoot is a work tree's top directory held open, so that status
// stats and lists what is under it by paths relative to it (fstatat,
// openat), as git does from inside the work tree: the kernel walks only
// the path within the tree, not the directories above it, and no
// os.FileInfo is built per file.
type treeRoot struct {
	dir string // as the caller named it: errors name dir/rel
	fd  int
}

// openTreeRoot opens dir (through a symlink, as os.Open does). The error
// is an *fs.PathError naming dir.
func openTreeRoot(dir string) (*treeRoot, error) {
	fd, err := retryEINTR(func() (int, error) { return unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0) })
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return &treeRoot{dir: dir, fd: fd}, nil
}

// Close closes the root's descriptor.
func (t *treeRoot) Close() { _ = unix.Close(t.fd) } // a directory opened read-only: nothing to report

func (t *treeRoot) path(rel string) string { return filepath.Join(t.dir, filepath.FromSlash(rel)) }

// lstat returns the stat data of rel, a slash path under the root, not
// following a final symlink; "" is the root itself. The error is an
// *fs.PathError naming the full path (errors.Is fs.ErrNotExist when
// rel is missing).
func (t *treeRoot) lstat(rel string) (fileStat, error) {
	var st unix.Stat_t
	_, err := retryEINTR(func() (int, error) {
		if rel == "" {
			return 0, unix.Fstat(t.fd, &st)
		}
		return 0, unix.Fstatat(t.fd, rel, &st, unix.AT_SYMLINK_NOFOLLOW)
	})
	if err != nil {
		return fileStat{}, &fs.PathError{Op: "lstat", Path: t.path(rel), Err: err}
	}
	return fileStat{
		mode:  osMode(st.Mode),
		size:  st.Size,
		mtime: time.Unix(st.Mtim.Unix()),
		ctime: time.Unix(st.Ctim.Unix()),
		ino:   uint32(st.Ino),
		uid:   st.Uid,
		gid:   st.Gid,
	}, nil
}

// osMode turns a stat mode into an fs.FileMode as os.Lstat does
// (os/stat_linux.go, fillFileStatFromSys).
func osMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	}
	if m&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// readDir lists the directory rel (a slash path under the root, "" for
// the root) in the order the file system gives, without "." and "..",
// with each entry's type from the directory itself (one fstatat for an
// entry whose type the file system leaves unknown; an entry gone
// meanwhile is left out), as os.ReadDir does but unsorted. buf is the
// getdents buffer, reused across calls. The error is an *fs.PathError
// naming the full path.
func (t *treeRoot) readDir(rel string, buf []byte) ([]dirEntry, error) {
	name := rel
	if name == "" {
		name = "."
	}
	fd, err := retryEINTR(func() (int, error) {
		return unix.Openat(t.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: t.path(rel), Err: err}
	}
	defer func() { _ = unix.Close(fd) }() // read-only: Close has nothing to report
	var out []dirEntry
	for {
		n, err := retryEINTR(func() (int, error) { return unix.Getdents(fd, buf) })
		if err != nil {
			return nil, &fs.PathError{Op: "readdirent", Path: t.path(rel), Err: err}
		}
		if n <= 0 {
			return out, nil
		}
		// struct linux_dirent64: d_ino u64, d_off s64, d_reclen u16,
		// d_type u8, d_name NUL-terminated (getdents64(2)).
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				break
			}
			ino, typ, nm := binary.NativeEndian.Uint64(b[0:8]), b[18], b[19:reclen]
			b = b[reclen:]
			if i := indexNUL(nm); i >= 0 {
				nm = nm[:i]
			}
			if ino == 0 || string(nm) == "." || string(nm) == ".." {
				continue
			}
			d := dirEntry{name: string(nm)}
			switch typ {
			case unix.DT_DIR:
				d.typ = fs.ModeDir
			case unix.DT_REG:
			case unix.DT_LNK:
				d.typ = fs.ModeSymlink
			case unix.DT_SOCK:
				d.typ = fs.ModeSocket
			case unix.DT_FIFO:
				d.typ = fs.ModeNamedPipe
			case unix.DT_CHR:
				d.typ = fs.ModeDevice | fs.ModeCharDevice
			case unix.DT_BLK:
				d.typ = fs.ModeDevice
			default: // DT_UNKNOWN: ask the inode
				var st unix.Stat_t
				if _, err := retryEINTR(func() (int, error) { return 0, unix.Fstatat(fd, d.name, &st, unix.AT_SYMLINK_NOFOLLOW) }); err != nil {
					if errors.Is(err, unix.ENOENT) {
						continue
					}
					return nil, &fs.PathError{Op: "lstat", Path: t.path(rel + "/" + d.name), Err: err}
				}
				d.typ = osMode(st.Mode).Type()
			}
			out = append(out, d)
		}
	}
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

// retryEINTR calls fn until it fails with something other than EINTR.
func retryEINTR(fn func() (int, error)) (int, error) {
	for {
		n, err := fn()
		if !errors.Is(err, unix.EINTR) {
			return n, err
		}
	}
}
