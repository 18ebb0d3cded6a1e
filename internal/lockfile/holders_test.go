package lockfile

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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

// churnEnv makes this test binary a taker of a contended lock: its value
// is "LOCK WITNESS N"; it tries N times to take LOCK (Acquire) and,
// each time it holds it, takes a POSIX record lock on WITNESS for a
// while, which fails when another process is inside at the same time. It
// prints "overlap" for each such time, then "took K".
const churnEnv = "ARPATCH_LOCKFILE_CHURN"

func init() {
	v := os.Getenv(churnEnv)
	if v == "" {
		return
	}
	f := strings.Fields(v)
	w, err := os.OpenFile(f[1], os.O_RDWR, 0)
	if err != nil {
		panic(err)
	}
	n, _ := strconv.Atoi(f[2])
	took := 0
	for i := 0; i < n; i++ {
		release, err := Acquire(f[0])
		var held *HeldError
		if errors.As(err, &held) {
			continue
		}
		if err != nil {
			panic(err)
		}
		took++
		lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: 0, Len: 1}
		if err := syscall.FcntlFlock(w.Fd(), syscall.F_SETLK, &lk); err != nil {
			_, _ = os.Stdout.WriteString("overlap\n")
		}
		time.Sleep(200 * time.Microsecond)
		lk.Type = syscall.F_UNLCK
		_ = syscall.FcntlFlock(w.Fd(), syscall.F_SETLK, &lk)
		release()
	}
	_, _ = os.Stdout.WriteString("took " + strconv.Itoa(took) + "\n")
	os.Exit(0)
}

// Three processes take and release one lock as fast as they can, 100
// times each: never two holders at once (a record lock on a witness file,
// which only one process can hold, says so), and each is either the
// holder or told who is. Each release removes the lock, so takers often
// find it gone between their failed link and their read of it; a taker
// that then removed the path as a lock holding nothing removed another's
// fresh lock (27f57cb's Acquire did: overlaps in 1 to 2 runs of 30).
func TestNeverTwoHolders(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	witness := filepath.Join(dir, "witness")
	if err := os.WriteFile(witness, []byte("w"), 0o644); err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for i := 0; i < 3; i++ {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), churnEnv+"="+filepath.Join(dir, "x.lock")+" "+witness+" 100")
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	took := 0
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("taker %d: %v: %s", i, err, outs[i])
		}
		if strings.Contains(outs[i].String(), "overlap") {
			t.Errorf("taker %d held the lock while another did:\n%s", i, outs[i])
		}
		var k int
		if _, err := fmt.Sscanf(outs[i].String(), "took %d", &k); err != nil {
			t.Fatalf("taker %d said %q", i, outs[i])
		}
		took += k
	}
	if took == 0 {
		t.Error("nobody took the lock")
	}
}
