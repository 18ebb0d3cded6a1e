package lockfile

import (
	"bufio"
	"errors"

	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"testing"
	"time"
)

// holdEnv makes this test binary take the lock at its value with Acquire,
// say "held" and wait to be killed: another process that holds a lock.
const holdEnv = "ARPATCH_LOCKFILE_HOLD"

func init() {
	p := os.Getenv(holdEnv)
	if p == "" {
		return
	}
	if _, err := Acquire(p); err != nil {
		_, _ = os.Stdout.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	_, _ = os.Stdout.WriteString("held\n")
	for { // until killed (a bare select{} would be a deadlock, and exit)
		time.Sleep(time.Hour)
	}
}

// holder starts a process that holds the lock at p, and returns it once
// it does.
func holder(t *testing.T, p string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), holdEnv+"="+p)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("holder said %q, %v", line, err)
	}
	return cmd
}

// A lock another process holds is refused with its pid; once that process
// is killed (SIGKILL: it releases nothing, and its lock stays), the lock
// is taken over and names this process.
func TestHolderKilledIsTakenOver(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.lock")
	h := holder(t, p)
	var held *HeldError
	if _, err := Acquire(p); !errors.As(err, &held) || held.PID != strconv.Itoa(h.Process.Pid) {
		t.Fatalf("Acquire of a held lock: %v", err)
	}
	if err := h.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = h.Wait() // "signal: killed" is the expected error
	release, err := Acquire(p)
	if err != nil {
		t.Fatalf("Acquire after the holder died: %v", err)
	}
	defer release()
	if pid, ok := ReadPID(p); !ok || pid != os.Getpid() {
		t.Errorf("lock after takeover names %d", pid)
	}
}

// A lock file naming a live process that is no arpatch (a hand-made pid
// file, or a pid reused since) is held; when that pid is not an
// arpatch's (it was reused), the remedy the message prints, removing the
// file, frees it.
func TestPIDOnlyLockAndItsRemedy(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.lock")
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	if err := WritePID(p, other.Process.Pid); err != nil {
		t.Fatal(err)
	}
	_, err := Acquire(p)
	var held *HeldError
	if !errors.As(err, &held) || held.PID != strconv.Itoa(other.Process.Pid) {
		t.Fatalf("Acquire of a pid-only lock: %v", err)
	}
	want := p + ": held by pid " + held.PID + " (if no arpatch runs as that pid, the pid was reused: remove " + p + ")"
	if err.Error() != want {
		t.Fatalf("message %q\nwant %q", err, want)
	}
	if err := os.Remove(p); err != nil { // the remedy, as printed
		t.Fatal(err)
	}
	release, err := Acquire(p)
	if err != nil {
		t.Fatalf("after the remedy: %v", err)
	}
	release()
}
