package checkout

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/lockfile"
)

// lock takes .git/arpatch/lock so two arpatch runs never change one
// checkout at once. It returns the unlock function.
func lock(gitDir string) (func(), error) {
	unlock, err := lockfile.Acquire(lockPath(gitDir))
	var he *lockfile.HeldError
	if errors.As(err, &he) {
		return nil, fmt.Errorf("%s: another arpatch (pid %s) is changing or building this checkout; wait for it to finish (remove the lock only if no arpatch runs as that pid)", he.Path, he.PID)
	}
	return unlock, err
}

// Lock takes the checkout's lock (the one apply and revert take) for a
// reader that needs the tree to hold still, such as a build: while it is
// held, apply and revert on src are refused. It returns the unlock
// function, or an error naming the pid that holds the lock.
func Lock(src string) (func(), error) {
	repo, err := gitsrc.Open(src)
	if err != nil {
		return nil, err
	}
	return lock(repo.GitDir())
}

// lockPath is the checkout lock's path in the git directory gitDir.
func lockPath(gitDir string) string { return filepath.Join(gitDir, "arpatch", "lock") }

// holder returns the pid of the live process, other than this one, that
// holds the checkout lock in gitDir (an apply, revert or build at work),
// or 0 when none does: no lock, or its pid is gone (lockfile.ReadPID,
// lockfile.Alive). This process's own pid is 0: a build that took the lock
// reads a tree that holds still.
func holder(gitDir string) int {
	pid, ok := lockfile.ReadPID(lockPath(gitDir))
	if !ok || pid == os.Getpid() || !lockfile.Alive(pid) {
		return 0
	}
	return pid
}
