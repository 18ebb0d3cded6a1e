package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/arpatch/arpatch/harness/sglang"
	"github.com/arpatch/arpatch/harness/sglangtest"
	"github.com/arpatch/arpatch/internal/lockfile"
)

var fakeBin string

// fakeServerEnv makes this test binary, run by a test as a server, the fake
// server (fakeServer) instead of the tests.
const fakeServerEnv = "ARPATCH_SERVER_TEST_FAKESERVER"

// TestMain runs the fake server when started as one; else the tests,
// with this binary as their server process (no build of its own).
func TestMain(m *testing.M) {
	if os.Getenv(fakeServerEnv) == "1" {
		fakeServer(os.Args[1:])
		return
	}
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	fakeBin = exe
	os.Exit(m.Run())
}

// fakeServer is a real subprocess for the launcher tests: it serves the
// SGLang protocol through harness/sglangtest, and can misbehave on request.
//
//	fakeserver -port N [-start-delay 2s] [-unready N] [-exit-early] [-ignore-term] [-child PIDFILE]
func fakeServer(args []string) {
	fs := flag.NewFlagSet("fakeserver", flag.ExitOnError)
	port := fs.Int("port", 0, "port")
	delay := fs.Duration("start-delay", 0, "answer /health_generate after this")
	unready := fs.Int("unready", 0, "answer the first N /health_generate probes 503; log every probe's status")
	exitEarly := fs.Bool("exit-early", false, "print an error and exit 3 before becoming ready")
	ignoreTerm := fs.Bool("ignore-term", false, "ignore SIGTERM")
	child := fs.String("child", "", "start a child process and write its pid and ours to this file")
	_ = fs.Parse(args) // ExitOnError: a bad flag exits 2
	fmt.Println("loading model weights ... (fake)")
	if *exitEarly {
		fmt.Fprintln(os.Stderr, "RuntimeError: CUDA out of memory (fake)")
		os.Exit(3)
	}
	if *ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
	}
	if *child != "" {
		c := exec.Command("sleep", "300")
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := os.WriteFile(*child, []byte(fmt.Sprintf("%d %d\n", os.Getpid(), c.Process.Pid)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("server listening")
	time.Sleep(10 * time.Millisecond)
	var h http.Handler = sglangtest.New(sglangtest.Config{TokPerSec: 500, StartDelay: *delay})
	if *unready > 0 {
		h = unreadyFirst(*unready, h)
	}
	fmt.Fprintln(os.Stderr, http.Serve(l, h))
	os.Exit(1)
}

// unreadyFirst answers the first n /health_generate probes 503 and the
// rest 200, and prints each probe's status (to the server's log) before
// answering it; h answers everything else.
func unreadyFirst(n int, h http.Handler) http.Handler {
	var probes atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health_generate" {
			h.ServeHTTP(w, r)
			return
		}
		k, status := probes.Add(1), http.StatusOK
		if k <= int64(n) {
			status = http.StatusServiceUnavailable
		}
		fmt.Printf("health probe %d: %d\n", k, status)
		w.WriteHeader(status)
	})
}

// specAt is the fake server with args, at a port StartOnFreePort gives,
// logging to a file in the test's directory.
func specAt(t *testing.T, args ...string) func(port int) Spec {
	t.Helper()
	log := filepath.Join(t.TempDir(), "server.log")
	// The grace is short: TestNothingLeftBehind waits it out twice for a
	// server that ignores SIGTERM, and what it checks is that SIGKILL
	// follows, not how late (internal/procgroup's tests check the grace
	// itself).
	return func(port int) Spec {
		return Spec{Name: "arm", Argv: append([]string{fakeBin, "-port", strconv.Itoa(port)}, args...), Env: append(os.Environ(), fakeServerEnv+"=1"), Port: port,
			LogPath: log, ReadyTimeout: 10 * time.Second, PollInterval: 50 * time.Millisecond, Grace: 20 * time.Millisecond}
	}
}

// start starts the fake server with args on a free port.
func start(ctx context.Context, t *testing.T, args ...string) (*Proc, error) {
	t.Helper()
	return StartOnFreePort(ctx, "127.0.0.1", specAt(t, args...))
}

// TestStartServeStop: Start returns once /health_generate answers 200,
// not at an earlier answer (the server prints each probe's status before
// answering it, so its log at Start's return holds every answer Start
// saw); the server serves; Stop ends it; the log holds the command and
// the server's output.
func TestStartServeStop(t *testing.T) {
	p, err := start(context.Background(), t, "-unready", "2")
	if err != nil {
		t.Fatal(err)
	}
	sp := p.Spec
	probes, err := os.ReadFile(sp.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if got := regexp.MustCompile(`(?m)^health probe .*$`).FindAllString(string(probes), -1); !slices.Equal(got, []string{"health probe 1: 503", "health probe 2: 503", "health probe 3: 200"}) {
		t.Errorf("Start returned after the probes %q, want two answered 503 and one 200", got)
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
	_, err := start(context.Background(), t, "-exit-early")
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), "exited (exit status 3) before it was ready") || !strings.Contains(err.Error(), "RuntimeError: CUDA out of memory (fake)") {
		t.Errorf("err = %v", err)
	}
}

func TestNotReadyInTime(t *testing.T) {
	t.Parallel() // waits out a timeout or a grace period; overlaps the other wait
	at := specAt(t, "-start-delay", "1h")
	_, err := StartOnFreePort(context.Background(), "127.0.0.1", func(port int) Spec {
		sp := at(port)
		sp.ReadyTimeout = 100 * time.Millisecond // how long does not matter to the error
		return sp
	})
	if err == nil || !strings.Contains(err.Error(), "was not ready after 100ms") {
		t.Errorf("err = %v", err)
	}
}

// TestNothingLeftBehind: a server that ignores SIGTERM and has a child is
// killed with its whole process group, on Stop and on cancellation.
func TestNothingLeftBehind(t *testing.T) {
	t.Parallel() // waits out a timeout or a grace period; overlaps the other wait
	for _, cancel := range []bool{false, true} {
		pidFile := filepath.Join(t.TempDir(), "pids")
		args := []string{"-ignore-term", "-child", pidFile}
		ctx, stop := context.WithCancel(context.Background())
		if cancel {
			args = append(args, "-start-delay", "1h")
			go func() {
				for {
					if _, err := os.Stat(pidFile); err == nil {
						stop() // as Ctrl-C would, while the server loads
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}()
		}
		p, err := start(ctx, t, args...)
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
			for i := 0; i < 400 && lockfile.Alive(pid); i++ {
				time.Sleep(5 * time.Millisecond)
			}
			if lockfile.Alive(pid) {
				t.Errorf("cancel=%v: process %d survived", cancel, pid)
			}
		}
	}
}

// TestPortTakenStartsAgain: a server whose port another process bound
// first exits with "address already in use" (PortTaken) and is started
// again on a new port; when every try finds its port taken, the last
// try's error says so.
func TestPortTakenStartsAgain(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Close() }() // a test listener
	taken := held.Addr().(*net.TCPAddr).Port
	var picked []int
	pick := func(ports ...int) func(string) (int, error) {
		return func(host string) (int, error) {
			port := taken
			if len(picked) >= len(ports) {
				var err error
				if port, err = FreePort(host); err != nil {
					return 0, err
				}
			}
			picked = append(picked, port)
			return port, nil
		}
	}
	p, err := startOnFreePort(context.Background(), "127.0.0.1", specAt(t), pick(taken))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if len(picked) != 2 || picked[0] != taken || p.Spec.Port != picked[1] || picked[1] == taken {
		t.Errorf("ports tried %v, server on %d; want %d, then a free one", picked, p.Spec.Port, taken)
	}
	picked = nil
	_, err = startOnFreePort(context.Background(), "127.0.0.1", specAt(t), pick(taken, taken, taken, taken))
	var ee *ExitError
	if !errors.As(err, &ee) || !ee.PortTaken() || len(picked) != portTries {
		t.Errorf("every port taken: %d tries, err %v", len(picked), err)
	}
	// A server that exits for another reason is not started again.
	picked = nil
	if _, err := startOnFreePort(context.Background(), "127.0.0.1", specAt(t, "-exit-early"), pick()); !errors.As(err, &ee) || ee.PortTaken() || len(picked) != 1 {
		t.Errorf("early exit: %d tries, err %v", len(picked), err)
	}
}
