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

// lock takes .git/arpatch/lock with O_EXCL so two arpatch runs never change
// one checkout at once. A lock left by a process that no longer exists is
// taken over. It returns the unlock function.
func lock(gitDir string) (func(), error) {
	dir := filepath.Join(gitDir, "arpatch")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	p := filepath.Join(dir, "lock")
	for attempt := 0; attempt < 2; attempt++ {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintf(f, "%d\n", os.Getpid())
			f.Close()
			return func() { os.Remove(p) }, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		b, _ := os.ReadFile(p)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if pid > 0 && processAlive(pid) {
			return nil, fmt.Errorf("%s: another arpatch (pid %d) is changing this checkout; wait for it to finish", p, pid)
		}
		os.Remove(p) // stale
	}
	return nil, fmt.Errorf("%s: could not take the lock; remove it if no arpatch is running", p)
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
