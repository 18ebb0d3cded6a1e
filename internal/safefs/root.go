// Package safefs reads and writes files under one root directory without
// ever leaving it: a path that is absolute, climbs out with "..", or passes
// through a symlink is refused before anything is read or written. Writes
// are atomic per file (temp file in the same directory, fsync, rename) and
// all-or-nothing per group: a failure part way restores every file already
// written, so the tree is byte-identical to before.
package safefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// Root is a directory that file operations stay inside.
type Root struct {
	Dir string
}

// PathError is a path refused before any I/O.
type PathError struct {
	Path   string
	Reason string
}

func (e *PathError) Error() string {
	return fmt.Sprintf("%s: refused: %s", e.Path, e.Reason)
}

// resolve maps a slash-separated relative path to a path under the root,
// refusing absolute paths, "..", and any existing component that is a
// symlink. The last component may be missing.
func (r Root) resolve(rel string) (string, error) {
	if rel == "" || path.IsAbs(rel) || strings.Contains(rel, "\\") {
		return "", &PathError{rel, "not a relative slash-separated path"}
	}
	if c := path.Clean(rel); c != rel || c == ".." || strings.HasPrefix(c, "../") {
		return "", &PathError{rel, "leaves the tree or is not clean"}
	}
	cur := r.Dir
	for _, part := range strings.Split(rel, "/") {
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			// Absent, or under a file (ENOTDIR): no symlink on the way.
			return filepath.Join(r.Dir, filepath.FromSlash(rel)), nil
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return "", &PathError{rel, "goes through the symlink " + cur}
		}
	}
	return cur, nil
}

// ReadFile reads a file under the root. A missing file gives an error
// wrapping fs.ErrNotExist, one under a path that is a file too (it wraps
// syscall.ENOTDIR as well: "not a directory"); a refused path a
// *PathError.
func (r Root) ReadFile(rel string) ([]byte, error) {
	p, err := r.resolve(rel)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, absent(err)
	}
	if !fi.Mode().IsRegular() {
		return nil, &PathError{rel, "not a regular file"}
	}
	return os.ReadFile(p)
}

// DirExists reports whether rel is a directory under the root, resolved
// as ReadFile resolves it: a refused path (a symlink on the way, "..")
// is none.
func (r Root) DirExists(rel string) bool {
	p, err := r.resolve(rel)
	if err != nil {
		return false
	}
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// Mode returns the permission bits of a regular file under the root.
func (r Root) Mode(rel string) (fs.FileMode, error) {
	p, err := r.resolve(rel)
	if err != nil {
		return 0, err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return 0, absent(err)
	}
	return fi.Mode().Perm(), nil
}

// Change is one file to write (Data not nil) or delete (Data nil).
type Change struct {
	Path string
	Data []byte
	// Mode, when not zero, is set on the file; zero keeps an existing
	// file's mode and gives a new one 0644.
	Mode fs.FileMode
}

type undo struct {
	abs     string
	existed bool
	data    []byte
	mode    fs.FileMode
}

// Faults, when set (by tests, in this package and in those that build on
// it), is called before each step of Root.Write: op is "write" for a
// change and "restore" for the rollback of one; an error it returns fails
// that step as the file system would.
var Faults func(op, rel string) error

func fault(op, rel string) error {
	if Faults == nil {
		return nil
	}
	return Faults(op, rel)
}

// WriteError is a Root.Write that failed part way. Restored says whether
// every file already changed was put back; when it is false (the rollback
// failed too, e.g. the disk is full), some files hold the new bytes and
// the caller must keep whatever record it has of them.
type WriteError struct {
	Err        error // the write that failed
	Restored   bool
	RestoreErr error  // why the rollback failed, when it did
	Paths      string // the group's paths, for messages
}

func (e *WriteError) Error() string {
	if e.Restored {
		return fmt.Sprintf("%v; the tree was restored to its state before the write", e.Err)
	}
	return fmt.Sprintf("%v; restoring the tree also failed: %v (files: %s)", e.Err, e.RestoreErr, e.Paths)
}

func (e *WriteError) Unwrap() error { return e.Err }

// Write applies every change or none. Paths are checked first; then each
// file is written to a temp file next to it, fsynced and renamed into place.
// If any step fails, files already changed are put back byte for byte and
// created directories removed, and the returned error says so. It returns
// a *PathError for a refused path.
// absent makes an ENOTDIR (a path under a file) an error that wraps
// fs.ErrNotExist too: no file is there.
func absent(err error) error {
	if errors.Is(err, syscall.ENOTDIR) && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w (%w)", fs.ErrNotExist, err)
	}
	return err
}

func (r Root) Write(changes []Change) error {
	plan := make([]undo, len(changes))
	for i, c := range changes {
		abs, err := r.resolve(c.Path)
		if err != nil {
			return err
		}
		u := undo{abs: abs}
		if fi, err := os.Lstat(abs); err == nil {
			if !fi.Mode().IsRegular() {
				return &PathError{c.Path, "not a regular file"}
			}
			if u.data, err = os.ReadFile(abs); err != nil {
				return err
			}
			u.existed, u.mode = true, fi.Mode().Perm()
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		plan[i] = u
	}
	var made, removed []string
	done := 0
	var err error
	for i, c := range changes {
		if err = fault("write", c.Path); err != nil {
			break
		}
		u := plan[i]
		if c.Data == nil {
			if u.existed {
				if err = os.Remove(u.abs); err != nil {
					break
				}
				removed = append(removed, pruneEmpty(r.Dir, filepath.Dir(u.abs))...)
			}
		} else {
			var dirs []string
			dirs, err = Mkdirs(filepath.Dir(u.abs))
			made = append(made, dirs...)
			if err != nil {
				break
			}
			mode := c.Mode
			if mode == 0 && u.existed {
				mode = u.mode
			}
			if mode == 0 {
				mode = 0o644
			}
			if err = writeAtomic(u.abs, c.Data, mode); err != nil {
				break
			}
		}
		done = i + 1
	}
	if err == nil {
		return nil
	}
	// Put back the directories pruning removed, outermost first, so that
	// rollback can restore the files that were in them.
	var rerr error
	for i := len(removed) - 1; i >= 0; i-- {
		if merr := os.Mkdir(removed[i], 0o755); merr != nil && !errors.Is(merr, fs.ErrExist) && rerr == nil {
			rerr = merr
		}
	}
	if berr := rollback(plan[:done+boolInt(done < len(plan))], changes, made); berr != nil && rerr == nil {
		rerr = berr
	}
	if rerr != nil {
		return &WriteError{Err: err, RestoreErr: rerr, Paths: listPaths(changes)}
	}
	return &WriteError{Err: err, Restored: true}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func rollback(plan []undo, changes []Change, made []string) error {
	var first error
	for i := len(plan) - 1; i >= 0; i-- {
		u := plan[i]
		err := fault("restore", changes[i].Path)
		switch {
		case err != nil:
		case u.existed:
			cur, rerr := os.ReadFile(u.abs)
			if rerr != nil || string(cur) != string(u.data) {
				err = writeAtomic(u.abs, u.data, u.mode)
			} else {
				err = os.Chmod(u.abs, u.mode)
			}
		default:
			// A file that did not exist is gone when removing it says it
			// is not there, or that it cannot be there (a parent is a
			// file, the name is too long): the write that failed made
			// nothing.
			if rerr := os.Remove(u.abs); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && !errors.Is(rerr, syscall.ENOTDIR) && !errors.Is(rerr, syscall.ENAMETOOLONG) {
				err = rerr
			}
		}
		if err != nil && first == nil {
			first = err
		}
	}
	for i := len(made) - 1; i >= 0; i-- {
		// Only succeeds when empty, which is what we want: a directory
		// that still holds something is not ours to take.
		_ = os.Remove(made[i])
	}
	return first
}

// pruneEmpty removes dir and its parents below root while they are empty,
// as git does when the last file of a directory goes, and returns the
// directories it removed, innermost first.
func pruneEmpty(root, dir string) []string {
	var out []string
	for d := dir; d != root && strings.HasPrefix(d, root+string(filepath.Separator)); d = filepath.Dir(d) {
		if os.Remove(d) != nil {
			break
		}
		out = append(out, d)
	}
	return out
}

// Mkdirs creates dir and its missing parents (mode 0o755 less the umask),
// returning those it created, outermost first, so that a caller that
// fails later can remove exactly those (innermost first, with os.Remove,
// which leaves one that is no longer empty) and none that existed. On an
// error it returns the ones it created before it, and the os.Mkdir error.
func Mkdirs(dir string) ([]string, error) {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		missing = append([]string{d}, missing...)
		if filepath.Dir(d) == d {
			break
		}
	}
	for i, d := range missing {
		if err := os.Mkdir(d, 0o755); err != nil {
			return missing[:i], err
		}
	}
	return missing, nil
}

// writeAtomic writes data to a temp file in path's directory, fsyncs it,
// sets its mode and renames it over path.
func writeAtomic(p string, data []byte, mode fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".arpatch-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, mode)
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		// The error that matters is err; the temp is a hidden
		// .NAME.arpatch-* file that holds nothing of the user's.
		_ = os.Remove(tmp)
		return err
	}
	// Best effort: fsync the directory so the rename survives a crash.
	// Some filesystems refuse fsync on a directory (EINVAL); by then the
	// file itself is synced and renamed, so that is not a failed write.
	if d, derr := os.Open(filepath.Dir(p)); derr == nil {
		_ = d.Sync()
		_ = d.Close() // read-only handle: nothing to flush
	}
	return nil
}

// WriteFile writes one file outside any Root, for state, cache and report
// files, by where p leads:
//   - nothing, or a regular file: atomically (temp, fsync, rename), making
//     p's missing directories;
//   - a symlink: atomically at the file it resolves to (made when it is
//     dangling), so the link stays a link and its target gets the bytes,
//     as the shell's > does;
//   - a FIFO or a character device (/dev/stdout, /dev/null, a process
//     substitution): written directly, since a rename would replace the
//     device node or pipe instead of writing to it;
//   - anything else (a directory, a socket, a block device): refused with
//     an error naming p and what it is. Nothing is written then.
func WriteFile(p string, data []byte, mode fs.FileMode) error {
	stream, err := writable(p)
	if err != nil {
		return err
	}
	if stream {
		return writeStream(p, data)
	}
	target, err := resolveLinks(p)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	return writeAtomic(target, data, mode)
}

// writable judges what p leads to for WriteFile and CanWrite: stream is
// true for a FIFO or character device; err refuses anything else that is
// not a regular file (or nothing).
func writable(p string) (stream bool, err error) {
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		// Nothing there: CanWrite names the ancestor that is no directory.
		return false, nil
	case err != nil:
		return false, err
	case fi.Mode()&(fs.ModeNamedPipe|fs.ModeCharDevice) != 0:
		return true, nil
	case fi.IsDir():
		return false, fmt.Errorf("%s is a directory", p)
	case !fi.Mode().IsRegular():
		return false, fmt.Errorf("%s is %s: arpatch writes a file there (or to a FIFO or character device); name a file path", p, kindOf(fi.Mode()))
	}
	return false, nil
}

// writeStream writes data to an existing FIFO or character device.
func writeStream(p string, data []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// resolveLinks follows p while it is a symlink, also when the last link is
// dangling, and returns the path it ends at: p itself when p is no link.
// It gives up after 40 links (Linux's MAXSYMLINKS) with an error.
func resolveLinks(p string) (string, error) {
	for range 40 {
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return p, nil
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			return p, nil
		}
		dest, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(dest) {
			dest = filepath.Join(filepath.Dir(p), dest)
		}
		p = dest
	}
	return "", fmt.Errorf("%s: too many levels of symbolic links", p)
}

// kindOf names a non-regular file's type for a refusal.
func kindOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "a special file"
}

// CanWrite checks, without writing, that WriteFile(p) could write p: p is
// a regular file, a FIFO, a character device or nothing (WriteFile's
// rule), and the nearest existing ancestor of the file it resolves to is a
// directory. Long runs call it before they start, so that a report path
// mistake does not cost the run.
func CanWrite(p string) error {
	stream, err := writable(p)
	if err != nil || stream {
		return err
	}
	target, err := resolveLinks(p)
	if err != nil {
		return err
	}
	return dirBelow(p, filepath.Dir(target))
}

// CanWriteIn checks, without writing, that files could be placed in the
// directory dir (made when missing): dir is a directory, or missing with
// a directory as its nearest existing ancestor. The error names dir.
func CanWriteIn(dir string) error {
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	return dirBelow(dir, dir)
}

// dirBelow checks that the nearest existing of dir and its ancestors is a
// directory; errors name p.
func dirBelow(p, dir string) error {
	for ; ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("%s: %s is not a directory", p, dir)
			}
			return nil
		}
		// ENOTDIR: a file above; the loop reaches it and names it.
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) || filepath.Dir(dir) == dir {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
}

func listPaths(cs []Change) string {
	var p []string
	for _, c := range cs {
		p = append(p, c.Path)
	}
	return strings.Join(p, ", ")
}
