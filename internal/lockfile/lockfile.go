// Package lockfile is a pid lock file that two processes cannot both
// take. The holder holds the file's flock(2), which the kernel drops when
// the holder exits however it exits, and names itself in it (its pid and
// a newline): a taker decides only while holding the flock itself, so it
// never reads a lock its holder is still writing, and a lock whose holder
// died is taken over in place. A pid the file names that still runs holds
// it too (a lock written by something that takes no flock: an arpatch
// before this one, or a hand-made pid file); one that no longer runs, or
// a file that is not a pid, holds nothing. It also reads and writes the
// pid files builds and servers leave, and tells whether a recorded
// process or process group still runs. Linux and other systems with
// flock(2).
package lockfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// HeldError is a lock another live process holds.
type HeldError struct {
	Path string
	PID  string
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%s: held by pid %s (if no arpatch runs as that pid, the pid was reused: remove %s)", e.Path, e.PID, e.Path)
}

// Acquire takes the lock at path, creating its directory and the file.
// It returns the release function, which removes the file; a *HeldError
// when another live process holds the lock; or an error naming path when
// the directory or file cannot be made, locked or written. Taking over a
// dead holder's lock makes no new file.
func Acquire(path string) (func(), error) { return acquire(path, false) }

// AcquireKept is Acquire whose release empties the file and leaves it
// there, for a lock taken again and again in a place nobody lists (the
// next Acquire or AcquireKept of path then makes no new file).
func AcquireKept(path string) (func(), error) { return acquire(path, true) }

func acquire(path string, keep bool) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	// Each try that fails because the file was removed under it saw a
	// holder let go: others are taking turns, so it tries again.
	for attempt := 0; attempt < 100; attempt++ {
		// 0666 less the umask, as git makes its lock files: a lock that
		// stays (AcquireKept) is writable by whoever may write what it
		// guards.
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
		readOnly := false
		if errors.Is(err, fs.ErrPermission) {
			// A lock file this user cannot write (another user's, kept):
			// it is read, and replaced if free.
			f, err = os.Open(path)
			readOnly = true
		}
		if err != nil {
			return nil, err
		}
		holder, err := flockOrHolder(f)
		if err != nil {
			_ = f.Close() // the flock error is what to report
			return nil, fmt.Errorf("%s: taking the lock (flock): %w", path, err)
		}
		if holder != "" {
			_ = f.Close() // read-only use
			return nil, &HeldError{Path: path, PID: holder}
		}
		// A holder's release, or a taker of a stale lock, may have
		// removed the file between our open and our flock: the lock is
		// the file at path.
		if !atPath(f, path) {
			_ = f.Close() // held nothing
			continue
		}
		if pid, ok := readPIDAt(f); ok && Alive(pid) {
			_ = f.Close() // held nothing
			return nil, &HeldError{Path: path, PID: strconv.Itoa(pid)}
		}
		if readOnly {
			// Free, but it cannot hold our pid: removed while we hold it
			// (a taker that opened it too finds it gone), and the next
			// try makes this user's own.
			err := os.Remove(path)
			_ = f.Close()
			if err != nil {
				return nil, fmt.Errorf("%s: this user cannot write the lock, nor replace it: %w", path, err)
			}
			continue
		}
		err = f.Truncate(0)
		if err == nil {
			_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
		if err != nil { // a lock without its pid holds nothing once we close it
			_ = f.Close()
			return nil, fmt.Errorf("%s: writing the lock: %w", path, err)
		}
		return func() { release(f, path, keep) }, nil
	}
	return nil, fmt.Errorf("%s: could not take the lock; remove it if nothing holds it", path)
}

// release gives up the lock held through f: it empties the file (keep)
// or removes it, then closes f, which drops the flock. Removal happens
// while the flock is still held, so a taker that opened the file before
// finds, once it holds it, that it is no longer the file at path. A file
// that cannot be emptied is removed; one that cannot be removed names
// this pid, which no longer runs once we exit, and so holds nothing then.
func release(f *os.File, path string, keep bool) {
	if !keep || f.Truncate(0) != nil {
		if atPath(f, path) {
			_ = os.Remove(path)
		}
	}
	_ = f.Close()
}

// tryFlock takes f's flock(2) without waiting: false when another open
// file holds it.
func tryFlock(f *os.File) (bool, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
			if ferr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return false, err
	}
	if errors.Is(ferr, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return ferr == nil, ferr
}

// holderWait is how long flockOrHolder waits for a holder to name itself.
var holderWait = time.Second

// flockOrHolder takes f's flock, or says who holds it: the pid in the
// file ("" when the flock is ours). A holder writes its pid just after
// taking the flock and empties the file just before letting go, so while
// the file names nobody it tries again, for up to holderWait, then names
// the holder "?".
func flockOrHolder(f *os.File) (string, error) {
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		taken, err := tryFlock(f)
		if err != nil || taken {
			return "", err
		}
		if pid, ok := readPIDAt(f); ok {
			return strconv.Itoa(pid), nil
		}
		if time.Since(start) > holderWait {
			return "?", nil
		}
	}
}

// atPath reports whether f is the file at path now.
func atPath(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// readPIDAt reads the pid f holds from its start.
func readPIDAt(f *os.File) (int, bool) {
	b := make([]byte, 32)
	n, err := f.ReadAt(b, 0)
	if err != nil && err != io.EOF {
		return 0, false
	}
	return parsePID(b[:n])
}

// parsePID reads a pid file's content: a number, blanks around it allowed.
func parsePID(b []byte) (int, bool) {
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil
}

// Alive reports whether pid is a running process. A zombie (exited, not
// yet reaped by its parent) is not: it holds nothing any more.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	state, _, ok := procStat(pid)
	return !ok || state != 'Z' // without /proc, kill(0) is all there is
}

// procStat reads the state letter and process group of pid from
// /proc/PID/stat.
func procStat(pid int) (state byte, pgrp int, ok bool) {
	return statFile("/proc/" + strconv.Itoa(pid) + "/stat")
}

// statFile reads the state letter and process group from a stat file
// (/proc/PID/stat or /proc/PID/task/TID/stat: "pid (comm) state ppid
// pgrp ...", comm may hold ')').
func statFile(path string) (state byte, pgrp int, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 3 {
		return 0, 0, false
	}
	pgrp, err = strconv.Atoi(f[2])
	return f[0][0], pgrp, err == nil
}

// ReadPID reads the process id a pid file (or lock) holds; ok is false
// when the file is missing or holds no number.
func ReadPID(path string) (pid int, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	return parsePID(b)
}

// WritePID records a process (or process group) id in path.
func WritePID(path string, pid int) error {
	return os.WriteFile(path, []byte(strconv.Itoa(pid)+"\n"), 0o644)
}

// LiveGroup returns the process group that the pid file at path records
// when a process of it still runs (GroupRuns), else 0: the trace of a run
// killed before it could stop its children.
func LiveGroup(path string) int {
	if g, ok := ReadPID(path); ok && GroupRuns(g) {
		return g
	}
	return 0
}

// GroupRuns reports whether a process of process group g still runs.
// Zombies do not count: they hold nothing any more, and an orphan's is
// reaped only when init gets to it (once a second on some hosts). A
// process whose main thread has exited reads Z in /proc/PID/stat while
// its other threads may still run (and hold a server's socket): it counts
// as running while a thread in /proc/PID/task is not a zombie.
func GroupRuns(g int) bool {
	if g <= 1 {
		return false
	}
	if err := syscall.Kill(-g, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return true // without /proc, kill(0) is all there is
	}
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if state, pgrp, ok := procStat(pid); ok && pgrp == g && (state != 'Z' || threadRuns(pid)) {
			return true
		}
	}
	return false
}

// threadRuns reports whether a thread of process pid is not a zombie
// (state Z) or dead (X).
func threadRuns(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, t := range tasks {
		if state, _, ok := statFile(dir + t.Name() + "/stat"); ok && state != 'Z' && state != 'X' {
			return true
		}
	}
	return false
}
