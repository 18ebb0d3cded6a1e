package server

import (
	"context"
	"errors"
	"github.com/arpatch/arpatch/internal/lockfile"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/arpatch/arpatch/harness/sglang"
)

var fakeBin string

// TestMain builds testdata/fakeserver, a real server process.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "arpatch-fakeserver-")
	if err != nil {
		panic(err)
	}
	fakeBin = filepath.Join(dir, "fakeserver")
	if out, err := exec.Command("go", "build", "-o", fakeBin, "./testdata/fakeserver").CombinedOutput(); err != nil {
		panic(string(out))
	}
	code := m.Run()
	_ = os.RemoveAll(dir) // a temp dir; the exit code is what counts
	os.Exit(code)
}

func spec(t *testing.T, args ...string) Spec {
	t.Helper()
	port, err := FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return Spec{Name: "arm", Argv: append([]string{fakeBin, "-port", strconv.Itoa(port)}, args...), Env: os.Environ(), Port: port,
		LogPath: filepath.Join(t.TempDir(), "server.log"), ReadyTimeout: 10 * time.Second, PollInterval: 50 * time.Millisecond, Grace: time.Second}
}

func TestStartServeStop(t *testing.T) {
	sp := spec(t, "-start-delay", "300ms")
	start := time.Now()
	p, err := Start(context.Background(), sp)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 300*time.Millisecond {
		t.Error("ready before /health_generate said so")
	}
	s := sglang.NewClient(p.URL).Generate(context.Background(), 0, sglang.Request{Text: "hi", MaxNewTokens: 8})
	if s.Err != "" || s.CompletionTokens != 8 {
		t.Errorf("sample %+v", s)
	}
	pid := p.cmd.Process.Pid
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if lockfile.Alive(pid) {
		t.Error("server alive after Stop")
	}
	log, _ := os.ReadFile(sp.LogPath)
	if !strings.Contains(string(log), "loading model weights") || !strings.Contains(string(log), "# arm arm: "+fakeBin) {
		t.Errorf("log = %q", log)
	}
}

func TestEarlyExitShowsLog(t *testing.T) {
	_, err := Start(context.Background(), spec(t, "-exit-early"))
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), "exited (exit status 3) before it was ready") || !strings.Contains(err.Error(), "RuntimeError: CUDA out of memory (fake)") {
		t.Errorf("err = %v", err)
	}
}

func TestNotReadyInTime(t *testing.T) {
	sp := spec(t, "-start-delay", "1h")
	sp.ReadyTimeout = 500 * time.Millisecond
	_, err := Start(context.Background(), sp)
	if err == nil || !strings.Contains(err.Error(), "was not ready after 500ms") {
		t.Errorf("err = %v", err)
	}
}

// TestNothingLeftBehind: a server that ignores SIGTERM and has a child is
// killed with its whole process group, on Stop and on cancellation.
func TestNothingLeftBehind(t *testing.T) {
	for _, cancel := range []bool{false, true} {
		pidFile := filepath.Join(t.TempDir(), "pids")
		sp := spec(t, "-ignore-term", "-child", pidFile)
		ctx, stop := context.WithCancel(context.Background())
		if cancel {
			sp.Argv = append(sp.Argv, "-start-delay", "1h")
			go func() {
				for {
					if _, err := os.Stat(pidFile); err == nil {
						stop() // as Ctrl-C would, while the server loads
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()
		}
		p, err := Start(ctx, sp)
		if cancel {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled start: %v", err)
			}
		} else {
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Stop(); err != nil {
				t.Fatal(err)
			}
		}
		stop()
		b, _ := os.ReadFile(pidFile)
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			// SIGKILL is delivered asynchronously: give the kernel a moment.
			for i := 0; i < 100 && lockfile.Alive(pid); i++ {
				time.Sleep(20 * time.Millisecond)
			}
			if lockfile.Alive(pid) {
				t.Errorf("cancel=%v: process %d survived", cancel, pid)
			}
		}
	}
}
