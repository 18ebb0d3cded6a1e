package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/internal/errwriter/errwritertest"
	"github.com/arpatch/arpatch/internal/goroutine"
	"github.com/arpatch/arpatch/internal/procgroup"
	"github.com/arpatch/arpatch/internal/testrepo"
)

// TestExitCodes checks the documented exit codes: 0 ok, 1 failure, 2 usage.
func TestExitCodes(t *testing.T) {
	repo := readmeRepo(t)
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"arpatch", "--help"}, exitOK},
		{[]string{"arpatch", "help"}, exitOK},
		{[]string{"arpatch", "help", "apply"}, exitOK},
		{[]string{"arpatch", "help", "nosuch"}, exitUsage},
		{[]string{"arpatch", "history", "show", "1", "--bogus"}, exitUsage},
		{[]string{"arpatch", "patches", "check", "--repo", repo, "--commit", "84118acf"}, exitFailure}, // an abbreviated hash of no commit there
		{[]string{"arpatch", "bench", "--arm", "x:launch-cmd="}, exitUsage},
		{[]string{"arpatch", "recipes"}, exitOK},
		{[]string{"arpatch", "apply", "--no-such-flag"}, exitUsage},
		{[]string{"arpatch", "apply", "positional"}, exitUsage},
		{[]string{"arpatch", "patches", "check", "--commit", "abc"}, exitUsage}, // --repo is required
		{[]string{"arpatch", "recipes", "show"}, exitUsage},
		{[]string{"arpatch", "apply", "--recipe", "pcie", "--recipe-file", "x.toml"}, exitUsage},
		{[]string{"arpatch", "apply", "--recipe", "nosuch"}, exitUsage},
		{[]string{"arpatch", "patches", "check", "--repo", ".", "--commit", "main", "--series", "nosuch"}, exitUsage},
		{[]string{"arpatch", "bogus"}, exitUsage},
		{[]string{"arpatch", "patches", "bogus"}, exitUsage},
		{[]string{"arpatch", "apply", "--dry-run=maybe"}, exitUsage},
		{[]string{"arpatch", "apply", "--series", ""}, exitUsage},
		{[]string{"arpatch", "apply", "--commit", " "}, exitUsage},
		{[]string{"arpatch", "patches", "seal", "dir", "--dry-run"}, exitUsage},
		{[]string{"arpatch", "status", "--src", t.TempDir()}, exitFailure}, // not a git checkout
	} {
		var out, errb bytes.Buffer
		if got := run(context.Background(), tc.args, &out, &errb); got != tc.want {
			t.Errorf("%v: exit %d, want %d (stderr: %s)", tc.args, got, tc.want, errb.String())
		}
	}
}

// TestHelpListsExitCodes: the top-level help names every exit code the
// commands return.
func TestHelpListsExitCodes(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"arpatch", "--help"}, &out, &out); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"   0  success", "   1  failure", "   2  usage error", "   3  drift (nightly)", "   4  infrastructure (bench, nightly)", "   5  internal error"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("arpatch --help lacks %q", want)
		}
	}
}

// TestBuildVersion: the revision is named once, whether or not the
// module version (a Go 1.24+ pseudo-version) already holds it.
func TestBuildVersion(t *testing.T) {
	rev := []debug.BuildSetting{{Key: "vcs.revision", Value: "638d831e10bb3c4d5e6f708192a3b4c5d6e7f801"}, {Key: "vcs.modified", Value: "true"}}
	for _, c := range []struct {
		v    string
		s    []debug.BuildSetting
		want string
	}{
		{"v0.0.0-20261130081816-638d831e10bb+dirty", rev, "v0.0.0-20261130081816-638d831e10bb+dirty"},
		{"(devel)", rev, "(devel)+638d831e10bb+dirty"},
		{"", rev[:1], "(devel)+638d831e10bb"},
		{"v1.2.3", nil, "v1.2.3"},
	} {
		if got := buildVersion(c.v, c.s); got != c.want {
			t.Errorf("buildVersion(%q) = %q, want %q", c.v, got, c.want)
		}
	}
}

// TestInterruptedExit: a command that fails after a signal ended its
// context exits 4 (infrastructure), never 1, with a message that starts
// "interrupted" and keeps the command's own account of what it left; a
// usage error stays 2.
func TestInterruptedExit(t *testing.T) {
	repo := readmeRepo(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dst := filepath.Join(t.TempDir(), "sglang")
	for _, tc := range []struct {
		args []string
		want int
		msg  string
	}{
		{[]string{"arpatch", "apply", "--recipe", "baseline", "--repo", repo, "--commit", "HEAD", "--src", dst}, exitInfra, "arpatch: interrupted: clone " + repo + ": interrupted; nothing was kept\n"},
		{[]string{"arpatch", "status", "--src", t.TempDir()}, exitInfra, "arpatch: interrupted: "},
		{[]string{"arpatch", "apply", "--no-such-flag"}, exitUsage, ""},
	} {
		var out, errb bytes.Buffer
		got := run(ctx, tc.args, &out, &errb)
		if got != tc.want || !strings.HasPrefix(errb.String(), tc.msg) || strings.HasSuffix(tc.msg, "\n") && errb.String() != tc.msg {
			t.Errorf("%v: exit %d, want %d; stderr %q, want it to start %q", tc.args, got, tc.want, errb.String(), tc.msg)
		}
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Errorf("the interrupted apply left %s: %v", dst, err)
	}
	for msg, want := range map[string]string{
		"":                     "interrupted",
		"interrupted: x":       "interrupted: x",
		"clone u: interrupted": "interrupted: clone u: interrupted",
	} {
		if code, got := interrupted(msg); code != exitInfra || got != want {
			t.Errorf("interrupted(%q) = %d, %q; want 4, %q", msg, code, got, want)
		}
	}
}

// TestPanicExitsInternal: a command that panics (arpatch's bug) exits 5,
// the internal-error code, never 2 (the Go runtime's code for a panic,
// which arpatch keeps for usage errors), with one message that says it is
// arpatch's bug and carries the panic and the stack; also when a signal
// ended the context first.
func TestPanicExitsInternal(t *testing.T) {
	withBoom := func(stdout, stderr io.Writer) *cli.App {
		app := newApp(stdout, stderr)
		app.Commands = append(app.Commands, &cli.Command{Name: "boom", Action: act(&struct{}{}, noFlags, func(_ context.Context, _ struct{}, s streams) error {
			fmt.Fprintln(s.Out, "partial")
			var sizes []int
			return fmt.Errorf("%d", sizes[len(s.Err.(*bytes.Buffer).String())+1]) // a runtime error, as a real bug panics
		})})
		conform(app.Commands)
		return app
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, ctx := range []context.Context{context.Background(), cancelled} {
		var out, errb bytes.Buffer
		code := runApp(ctx, withBoom, []string{"arpatch", "boom"}, &out, &errb)
		first, rest, _ := strings.Cut(errb.String(), "\n")
		if code != exitInternal || first != "arpatch: internal error: panic: runtime error: index out of range [1] with length 0" ||
			!strings.HasPrefix(rest, "this is a bug in arpatch, not in what you asked: please report it with the command line and the stack below\n") ||
			!strings.Contains(rest, "TestPanicExitsInternal") || strings.Count(errb.String(), "arpatch: ") != 1 {
			t.Errorf("a panic (ctx err %v): exit %d, want %d; stderr:\n%s", ctx.Err(), code, exitInternal, errb.String())
		}
		if out.String() != "partial\n" {
			t.Errorf("stdout %q: what the command wrote before it panicked is kept", out.String())
		}
	}
	// The usage errors around it keep their code.
	var out, errb bytes.Buffer
	if code := runApp(context.Background(), withBoom, []string{"arpatch", "boom", "--bogus"}, &out, &errb); code != exitUsage || out.Len() != 0 {
		t.Errorf("boom --bogus: exit %d, stdout %q", code, out.String())
	}
}

// goPanicEnv set to 1 makes the test binary arpatch with withGoPanic's
// command (TestMain): TestGoroutinePanicExitsInternal's child.
const goPanicEnv = "ARPATCH_TEST_GOROUTINE_PANIC"

// withGoPanic is newApp with a command goboom that writes a line, starts
// a goroutine (goroutine.Go) that panics, and waits for it, as a command
// waits for the workers it started, after starting a server (a process
// group that ignores SIGTERM) that the panic's exit must stop.
func withGoPanic(stdout, stderr io.Writer) *cli.App {
	app := newApp(stdout, stderr)
	app.Commands = append(app.Commands, &cli.Command{Name: "goboom", Action: act(&struct{}{}, noFlags, func(ctx context.Context, _ struct{}, s streams) error {
		fmt.Fprintln(s.Out, "partial")
		// A server the command started, which must not outlive it; its
		// SIGTERM is ignored, so only StopAll's SIGKILL ends it.
		srv := procgroup.Command(ctx, 0, "sh", "-c", `trap "" TERM; sleep 60 & wait; sleep 60`)
		if err := srv.Start(); err != nil {
			return err
		}
		fmt.Fprintf(s.Out, "server group %d\n", srv.PGID())
		done := make(chan struct{})
		goroutine.Go(func() {
			defer close(done)
			goboomWorker(nil)
		})
		<-done
		return errors.New("goboom: its goroutine returned")
	})})
	conform(app.Commands)
	return app
}

// goboomWorker panics as a real bug does, with a runtime error, given a
// nil m.
func goboomWorker(m map[string]int) {
	m["x"]++
}

// TestGoroutinePanicExitsInternal: a panic on a goroutine a command
// started exits 5, internal error, not the Go runtime's 2 (issue 26: 2 is
// for usage errors only), through the real binary's path: the test binary
// run as arpatch (runMainApp, os.Args, os.Stderr) in a child process,
// while the command's own goroutine waits for the one that panicked. Its
// stderr is the one message of a panic on the command's goroutine
// (TestPanicExitsInternal), with the panicking function in the stack; what
// the command wrote before is kept.
func TestGoroutinePanicExitsInternal(t *testing.T) {
	cmd := exec.Command(os.Args[0], "goboom")
	cmd.Env = append(os.Environ(), goPanicEnv+"=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitInternal {
		t.Fatalf("arpatch goboom: %v, want exit %d; stderr:\n%s", err, exitInternal, errb.String())
	}
	first, rest, _ := strings.Cut(errb.String(), "\n")
	if first != "arpatch: internal error: panic: assignment to entry in nil map" ||
		!strings.HasPrefix(rest, "this is a bug in arpatch, not in what you asked: please report it with the command line and the stack below\n") ||
		!strings.Contains(rest, ".goboomWorker(") || strings.Count(errb.String(), "arpatch: ") != 1 {
		t.Errorf("arpatch goboom: stderr:\n%s", errb.String())
	}
	var pgid int
	if _, err := fmt.Sscanf(out.String(), "partial\nserver group %d\n", &pgid); err != nil || pgid <= 0 {
		t.Fatalf("stdout %q: what the command wrote before the panic is kept", out.String())
	}
	// The server group the command started is gone (issue 28: a panic on
	// a goroutine stops the servers, as an interrupt does).
	// (Its killed processes may linger as zombies until PID 1 reaps
	// them: only running ones count.)
	if n, err := procgroup.Running(pgid); err != nil || n != 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		t.Errorf("the server's process group %d outlived arpatch's panic exit: %d processes running (%v)", pgid, n, err)
	}
}

// readmeRepo returns a new git repository holding one commit of README.
func readmeRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := testrepo.WriteFiles(dir, map[string]string{"README": "x\n"}); err != nil {
		t.Fatal(err)
	}
	if _, err := testrepo.Init(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestStdoutWriteFails: output that could not be written fails the run,
// whichever write fails: a command that succeeded exits 4 (as `arpatch
// recipes > /dev/full` does), and stderr says the output is incomplete,
// with the writer's error; each such command is run once per write it
// makes, failing at that write (--help at 5 of its writes, the first and
// the last among them). One that failed keeps its code.
func TestStdoutWriteFails(t *testing.T) {
	for _, tc := range []struct {
		args []string
		k    int // writes failed, spread from first to last; 0: each
	}{
		{[]string{"arpatch", "recipes"}, 0},
		{[]string{"arpatch", "--help"}, 5}, // ~160 writes
		{[]string{"arpatch", "recipes", "show", "pcie"}, 0},
	} {
		args := tc.args
		errwritertest.SpreadWritesFail(t, func(w io.Writer) error {
			var errb bytes.Buffer
			switch code := run(context.Background(), args, w, &errb); {
			case code == exitOK && errb.Len() == 0:
				return nil // the working writer
			case code == exitInfra && strings.Contains(errb.String(), "arpatch: standard output is incomplete: "+errwritertest.ErrFull.Error()+"\n"):
				return fmt.Errorf("%v: exit %d: %w", args, code, errwritertest.ErrFull)
			default:
				return fmt.Errorf("%v: exit %d, stderr %q", args, code, errb.String())
			}
		}, tc.k)
	}
	args := []string{"arpatch", "history", "show", "1", "--bogus"}
	if code := run(context.Background(), args, errwritertest.FailAt(0), io.Discard); code != exitUsage {
		t.Errorf("%v to a full disk: exit %d, want %d", args, code, exitUsage)
	}
}

// TestOptionsOnly: on an optionsOnly context a command that accepts its
// options stops before running (exit 1, nothing written), and one that
// refuses them still exits 2: what the scripts' `usage` relies on.
func TestOptionsOnly(t *testing.T) {
	ctx := context.WithValue(context.Background(), optionsOnly{}, true)
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"arpatch", "recipes"}, &out, &errb); code != exitFailure || out.Len() != 0 || !strings.Contains(errb.String(), errOptionsOnly.Error()) {
		t.Errorf("recipes: exit %d, stdout %q, stderr %q; want 1, nothing, the options-only error", code, out.String(), errb.String())
	}
	errb.Reset()
	if code := run(ctx, []string{"arpatch", "bench", "allreduce", "--count", "0"}, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), "--count 0: use 1 or more") {
		t.Errorf("a refusal: exit %d, stderr %q", code, errb.String())
	}
}

// TestStdoutClosedPipe: a stdout whose reader is gone (| head) is
// incomplete too, exit 4, but said nothing of, as git says nothing; a
// command that failed on its own keeps its code and its message.
func TestStdoutClosedPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }() // written to by run only
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	if code := run(context.Background(), []string{"arpatch", "recipes"}, w, &errb); code != exitInfra || errb.Len() != 0 {
		t.Errorf("recipes | (closed): exit %d, want 4; stderr %q, want none", code, errb.String())
	}
	errb.Reset()
	if code := run(context.Background(), []string{"arpatch", "status", "--src", t.TempDir()}, w, &errb); code != exitFailure || !strings.Contains(errb.String(), "not the top of a git checkout") {
		t.Errorf("a failing status | (closed): exit %d, want 1; stderr %q", code, errb.String())
	}
}
