// Package lockfile is a pid lock file that two processes cannot both take:
// the file appears whole (written to a temp file, then hard-linked into
// place, which fails when the lock exists), so nobody ever reads an empty
// lock and mistakes it for a stale one; a lock whose pid no longer runs is
// taken over. It also reads and writes the pid files builds and servers
// leave, and tells whether a recorded process or process group still runs.
package lockfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// HeldError is a lock another live process holds.
type HeldError struct {
	Path string
	PID  string
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%s: held by pid %s (if no arpatch runs as that pid, the pid was reused: remove %s)", e.Path, e.PID, e.Path)
}

// Acquire takes the lock at path, creating its directory: a temp file
// holding this process's pid (decimal, newline), hard-linked to path. It
// returns the release function, which removes path; a *HeldError when a
// live process holds the lock; or the error of making the directory, of
// writing the temp file or of the link, or of removing a dead holder's
// lock, naming path where the os error does not.
func Acquire(path string) (func(), error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(dir, ".lock-*")
	if err != nil {
		return nil, err
	}
	// The temp file only carries the pid into the link; one left behind
	// (hidden, named .lock-*) holds nothing.
	defer func() { _ = os.Remove(tmp.Name()) }()
	_, err = fmt.Fprintf(tmp, "%d\n", os.Getpid())
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil { // a lock without its pid would look stale to the next run
		return nil, fmt.Errorf("%s: writing the lock: %w", path, err)
	}
	for attempt, gone := 0, 0; attempt < 2; {
		err := os.Link(tmp.Name(), path)
		if err == nil {
			// A lock that fails to go names this pid, which no longer runs
			// once we exit: the next Acquire takes it over.
			return func() { _ = os.Remove(path) }, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) && gone < 100 {
			// Released between the link and the read: link again. Never
			// remove it here: the path may by now be another taker's.
			gone++
			continue
		}
		attempt++
		// A lock appears whole (by link), so one that is not a pid was
		// written by something else: it holds nothing.
		if pid, ok := parsePID(b); err == nil && ok && Alive(pid) {
			return nil, &HeldError{Path: path, PID: strconv.Itoa(pid)}
		}
		// Its owner died, or it is not a lock.
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: a stale lock (no live pid) could not be removed: %w", path, err)
		}
	}
	return nil, fmt.Errorf("%s: could not take the lock; remove it if nothing holds it", path)
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

// parsePID reads a pid file's content: a decimal number, blanks around it
// allowed; ok is false for anything else.
func parsePID(b []byte) (pid int, ok bool) {
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil
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
