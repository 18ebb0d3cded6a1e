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
// is killed (SIGKILL: it releases nothing), the lock is taken over in
// place, with no new file.
func TestHolderKilledIsTakenOver(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.lock")
	h := holder(t, p)
	var held *HeldError
	if _, err := Acquire(p); !errors.As(err, &held) || held.PID != strconv.Itoa(h.Process.Pid) {
		t.Fatalf("Acquire of a held lock: %v", err)
	}
	before, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
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
	after, err := os.Stat(p)
	if err != nil || !os.SameFile(before, after) {
		t.Errorf("the takeover made a new file (%v)", err)
	}
	if pid, ok := ReadPID(p); !ok || pid != os.Getpid() {
		t.Errorf("lock after takeover names %d", pid)
	}
}

// A holder that has taken the flock but not yet written its pid holds the
// lock: an empty lock is never mistaken for a stale one.
func TestLockBeingWrittenIsHeld(t *testing.T) {
	defer func(d time.Duration) { holderWait = d }(holderWait)
	holderWait = 20 * time.Millisecond
	p := filepath.Join(t.TempDir(), "x.lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if ok, err := tryFlock(f); !ok || err != nil {
		t.Fatalf("flock: %v %v", ok, err)
	}
	var held *HeldError
	if _, err := Acquire(p); !errors.As(err, &held) || held.PID != "?" {
		t.Fatalf("Acquire of a lock being written: %v", err)
	}
	// Its pid written, the message names it.
	if _, err := f.WriteAt([]byte("4242\n"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(p); !errors.As(err, &held) || held.PID != "4242" {
		t.Fatalf("Acquire of a lock being written: %v", err)
	}
}

// AcquireKept's release leaves the file, empty; taking it again reuses
// that file, and it is held meanwhile.
func TestAcquireKept(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.lock")
	release, err := AcquireKept(p)
	if err != nil {
		t.Fatal(err)
	}
	var held *HeldError
	if _, err := AcquireKept(p); !errors.As(err, &held) || held.PID != strconv.Itoa(os.Getpid()) {
		t.Fatalf("second AcquireKept: %v", err)
	}
	release()
	first, err := os.Stat(p)
	if err != nil || first.Size() != 0 {
		t.Fatalf("after release: %v, %d bytes", err, first.Size())
	}
	release, err = Acquire(p)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := os.Stat(p); err != nil || !os.SameFile(first, again) {
		t.Errorf("taking a kept lock again made a new file (%v)", err)
	}
	release()
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("Acquire's release left the lock: %v", err)
	}
}

// A lock file naming a live process that took no flock (a hand-made pid
// file, an older arpatch's lock) is held; when that pid is not an
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
// is "LOCK WITNESS N"; it tries N times to take LOCK (AcquireKept) and,
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
		release, err := AcquireKept(f[0])
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
// holder or told who is. The lock is kept (AcquireKept): each release
// empties it, so each taker finds a file that names nobody and only the
// flock keeps them apart (without it this test fails, 6 runs of 6), and
// the churn makes no new files.
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

// A free lock this user cannot write (another user's, kept) is replaced
// by one of this user's, which names this process. (Run as root, which
// may write any file, the lock is simply taken: the outcome is the same.)
func TestUnwritableFreeLockIsReplaced(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.lock")
	if err := os.WriteFile(p, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	release, err := AcquireKept(p)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if pid, ok := ReadPID(p); !ok || pid != os.Getpid() {
		t.Errorf("the lock names %d, want this process", pid)
	}
}
