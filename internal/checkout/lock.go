package checkout

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/lockfile"
)

// lock takes .git/arpatch/lock so two arpatch runs never change one
// checkout at once. It returns the unlock function.
func lock(gitDir string) (func(), error) {
	unlock, err := lockfile.Acquire(filepath.Join(gitDir, "arpatch", "lock"))
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
