package checkout

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

// lock takes .git/arpatch/lock so two arpatch runs never change one
// checkout at once. The lock file appears whole, holding its owner's pid
// (written to a temp file, then hard-linked into place, which fails if the
// lock exists), so a second run never sees an empty lock and mistakes it
// for a stale one. A lock whose pid no longer runs is taken over. It
// returns the unlock function.
func lock(gitDir string) (func(), error) {
	dir := filepath.Join(gitDir, "arpatch")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	p := filepath.Join(dir, "lock")
	tmp, err := os.CreateTemp(dir, ".lock-*")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(tmp, "%d\n", os.Getpid())
	tmp.Close()
	defer os.Remove(tmp.Name())
	for attempt := 0; attempt < 2; attempt++ {
		err := os.Link(tmp.Name(), p)
		if err == nil {
			return func() { os.Remove(p) }, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		b, _ := os.ReadFile(p)
		pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
		if perr != nil || processAlive(pid) {
			return nil, fmt.Errorf("%s: another arpatch (pid %s) is changing this checkout; wait for it to finish (remove the lock only if no arpatch runs)", p, strings.TrimSpace(string(b)))
		}
		os.Remove(p) // its owner died
	}
	return nil, fmt.Errorf("%s: could not take the lock; remove it if no arpatch is running", p)
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
