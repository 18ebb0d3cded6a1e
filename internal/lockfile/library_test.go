package lockfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/lockedfile"
)

// Why internal/lockfile is not github.com/rogpeppe/go-internal/lockedfile
// (docs/libraries.md): lockedfile is a flock(2) on a file that stays, and
// knows nothing of the pid lock files arpatch has written (every release
// before this one, and each lock another holder is writing now). A lock
// held by a live arpatch through its pid file, the checkout's and the
// history's lock as an older arpatch takes them, is taken by lockedfile
// at once: two processes would change one checkout. Acquire refuses it,
// naming the pid. The same pid file, its process gone, Acquire takes
// over. (The flock variant was tried and reverted in 21de710 for this
// and for flock-less file systems and shared sticky directories.)
func TestLockedfileWouldTakeALiveArpatchsLock(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	cmd := holder(t, p) // a live process holding p the way arpatch does
	m := lockedfile.MutexAt(p)
	unlock, err := m.Lock()
	if err != nil {
		t.Fatalf("lockedfile: %v", err)
	}
	unlock() // lockedfile took a lock that a live process holds
	var held *HeldError
	if _, err := Acquire(p); !errors.As(err, &held) || held.PID == "" {
		t.Errorf("Acquire of a live holder's lock: %v, want HeldError", err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	release, err := Acquire(p)
	if err != nil {
		t.Fatalf("Acquire after the holder died: %v", err)
	}
	release()
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("released lock still there (%v): lockedfile's would stay", err)
	}
}
