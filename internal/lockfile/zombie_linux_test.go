package lockfile

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/arpatch/arpatch/internal/procgroup"
)

// zombieLeaderEnv makes this test binary a process whose main thread
// exits while another thread lives on: the state of a server (a Python or
// Go process) whose main thread has died while its other threads still
// hold the listening socket. /proc/PID/stat then says Z.
const zombieLeaderEnv = "ARPATCH_LOCKFILE_ZOMBIE_LEADER"

func init() {
	if os.Getenv(zombieLeaderEnv) == "" {
		return
	}
	runtime.LockOSThread() // init runs on the main thread: keep it there
	ready := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		close(ready)
		for {
			_, _, _ = syscall.Syscall(syscall.SYS_PAUSE, 0, 0, 0) // lives until killed
		}
	}()
	<-ready
	_, _ = os.Stdout.WriteString("ready\n") // a failed write shows as the test reading no "ready"
	// exit(2), not exit_group(2): only the main thread ends.
	_, _, _ = syscall.Syscall(syscall.SYS_EXIT, 0, 0, 0)
}

// A group whose leader's main thread has exited (stat state Z) while
// another of its threads still runs is running: the process has not
// exited, and may still hold the server's port.
func TestGroupRunsWithZombieMainThread(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := procgroup.Command(context.Background(), 0, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), zombieLeaderEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := cmd.PGID()
	defer func() {
		_ = syscall.Kill(-g, syscall.SIGKILL)
		_ = cmd.Wait() // "signal: killed" is the expected error
	}()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("helper said %q, %v", line, err)
	}
	for i := 0; i < 200; i++ {
		if state, _, ok := procStat(g); ok && state == 'Z' {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if state, _, ok := procStat(g); !ok || state != 'Z' {
		t.Fatalf("the helper's main thread did not exit (state %q)", state)
	}
	if !GroupRuns(g) {
		t.Error("a group whose leader has a live thread reads as gone")
	}
	if err := syscall.Kill(-g, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200 && GroupRuns(g); i++ {
		time.Sleep(5 * time.Millisecond)
	}
	if GroupRuns(g) {
		t.Error("a killed group (its leader a zombie with no live thread) still runs")
	}
}
