package checkout

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/arpatch/arpatch/internal/lockfile"
)

// lock takes .git/arpatch/lock so two arpatch runs never change one
// checkout at once. It returns the unlock function.
func lock(gitDir string) (func(), error) {
	unlock, err := lockfile.Acquire(filepath.Join(gitDir, "arpatch", "lock"))
	var he *lockfile.HeldError
	if errors.As(err, &he) {
		return nil, fmt.Errorf("%s: another arpatch (pid %s) is changing this checkout; wait for it to finish (remove the lock only if no arpatch runs)", he.Path, he.PID)
	}
	return unlock, err
}
