package lockfile

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/arpatch/arpatch/internal/procgroup"
)

func TestAcquire(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "x.lock")
	release, err := Acquire(p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if string(b) != strconv.Itoa(os.Getpid())+"\n" {
		t.Errorf("lock holds %q", b)
	}
	// Held by a live process (this one): refused with the pid.
	var held *HeldError
	if _, err := Acquire(p); !errors.As(err, &held) || held.PID != strconv.Itoa(os.Getpid()) || held.Path != p {
		t.Fatalf("second Acquire: %v", err)
	}
	release()
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("release left the lock: %v", err)
	}
	// A lock whose process is gone is taken over.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skip("no `true` for a dead pid")
	}
	if err := os.WriteFile(p, []byte(strconv.Itoa(dead.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	release, err = Acquire(p)
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	release()
	// A lock that is not a pid (written by something else) holds nothing.
	if err := os.WriteFile(p, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	release, err = Acquire(p)
	if err != nil {
		t.Fatalf("garbage lock: %v", err)
	}
	release()
	// No temp files are left beside the lock.
	ents, _ := os.ReadDir(filepath.Dir(p))
	if len(ents) != 0 {
		t.Errorf("left %d files", len(ents))
	}
}

func TestAlive(t *testing.T) {
	if !Alive(os.Getpid()) || Alive(0) || Alive(-1) {
		t.Error("Alive is wrong about this process or a non-pid")
	}
}

// A process group whose only member is a zombie runs nothing.
func TestLiveGroup(t *testing.T) {
	p := filepath.Join(t.TempDir(), "g.pgid")
	cmd := procgroup.Command(context.Background(), 0, "sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	g := cmd.PGID()
	if err := WritePID(p, g); err != nil {
		t.Fatal(err)
	}
	if LiveGroup(p) != g || !GroupRuns(g) {
		t.Errorf("a running group reads as gone")
	}
	if GroupRuns(0) || GroupRuns(1) || GroupRuns(-g) {
		t.Errorf("a group id that names no group of ours (0, init's, negative) runs")
	}
	if err := syscall.Kill(-g, syscall.SIGKILL); err != nil { // and not Wait: the leader must stay a zombie
		t.Fatal(err)
	}
	for i := 0; i < 100 && Alive(g); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if LiveGroup(p) != 0 || GroupRuns(g) { // killed, not yet reaped: a zombie
		t.Errorf("a group of one zombie reads as running")
	}
	_ = cmd.Wait() // reaps it; "signal: killed" is the expected error
}
