// Command arpatch makes SGLang's custom allreduce work on PCIe-only
// multi-GPU hosts reproducibly: it clones SGLang at a pinned commit and
// applies a versioned patch series (apply, status, revert, patches check).
//
// Exit codes: 0 success, 1 failure, 2 usage error (a bad flag or argument),
// 3 drift (nightly), 4 infrastructure failure (bench, nightly), 5 internal
// error (a panic); `arpatch --help` lists them.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/arpatch/arpatch/internal/errwriter"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/goroutine"
	"github.com/arpatch/arpatch/internal/procgroup"
	"github.com/arpatch/arpatch/internal/statedir"
	"github.com/arpatch/arpatch/kernels"
)

// Exit codes, documented in the README and in `arpatch --help`.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	// exitInternal is arpatch's own bug: a command panicked. Not 2, the
	// code the Go runtime gives an unrecovered panic, which arpatch
	// keeps for usage errors.
	exitInternal = 5
)

// version is set with -ldflags "-X main.version=v1.2.3"; otherwise it comes
// from the module's build info.
var version = ""

func arpatchVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		return buildVersion(bi.Main.Version, bi.Settings)
	}
	return "(devel)"
}

// buildVersion is the module version with the VCS revision (12 hex) and
// "+dirty" appended, each only when the version does not hold it already:
// since Go 1.24 a build in a checkout stamps a pseudo-version such as
// v0.0.0-20261130081816-638d831e10bb+dirty, which names both.
func buildVersion(v string, settings []debug.BuildSetting) string {
	if v == "" {
		v = "(devel)"
	}
	var rev string
	var dirty bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			if len(s.Value) >= 12 {
				rev = githash.Hash(s.Value).Short()
			}
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" && !strings.Contains(v, rev) {
		v += "+" + rev
		if dirty && !strings.HasSuffix(v, "+dirty") {
			v += "+dirty"
		}
	}
	return v
}

func main() {
	relaxFirstGC(nil)
	os.Exit(runMain())
}

// firstGCPercent is the GOGC arpatch runs under until its first garbage
// collection: the runtime's 4 MB minimum heap goal times 8, 32 MB.
const firstGCPercent = 800

// relaxFirstGC lets the heap grow to 32 MB before the first garbage
// collection, then puts GOGC back (100 by default) for the rest of the
// run, and calls then (when not nil) once it has. A status or an apply
// on an existing checkout allocates 4-8 MB (the index of SGLang's 4,300
// files, the directory listings), which the default goal collected two
// or three times, a tenth of their CPU; a long command (the main job's
// checkout, a bench) passes 32 MB early and collects as before after
// that, so its peak heap stays what it was. GOGC set in the environment
// is left alone.
func relaxFirstGC(then func()) {
	if os.Getenv("GOGC") != "" {
		return
	}
	old := debug.SetGCPercent(firstGCPercent)
	// A finalizer runs after the collection that finds its object
	// unreachable: here, the first one. (64 bytes: finalizers are not
	// promised for objects of the tiny allocator.)
	runtime.SetFinalizer(new([64]byte), func(*[64]byte) {
		debug.SetGCPercent(old)
		if then != nil {
			then()
		}
	})
}

// runMain runs arpatch with os.Args, cancelled by SIGINT, SIGTERM or
// SIGHUP: main, and the arpatch of the CLI scripts.
func runMain() int { return runMainApp(newApp) }

// runMainApp is runMain with the app makeApp makes (a test adds a
// command to it). A panic on a goroutine a command started
// (goroutine.Go) exits 5 through panicExit.
func runMainApp(makeApp func(stdout, stderr io.Writer) *cli.App) int {
	goroutine.SetPanicHandler(panicExit)
	defer goroutine.SetPanicHandler(nil)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	ctx, stopPipe := onClosedPipe(ctx)
	defer stopPipe()
	return runApp(ctx, makeApp, os.Args, os.Stdout, os.Stderr)
}

// panicExit is arpatch's handler of a panic on a goroutine a command
// started (goroutine.SetPanicHandler): it prints the internal error, as
// runApp does for a panic on the command's own goroutine, and exits 5
// there and then. The command's goroutine may be waiting for the one
// that panicked, so this is the process's end, as the Go runtime's own
// end of a panic was (deferred functions do not run), only with the
// internal-error code and message instead of exit 2.
func panicExit(value any, stack []byte) {
	fmt.Fprintln(os.Stderr, "arpatch: "+internalError{value: value, stack: stack}.Error())
	// No deferred function will stop the servers and ranks the command
	// started: stop their groups here, as an interrupt would.
	procgroup.StopAll(panicGrace)
	os.Exit(exitInternal)
}

// panicGrace is how long panicExit lets the groups the command started
// end on SIGTERM before SIGKILL.
const panicGrace = 2 * time.Second

// errClosedPipe is the cause of a context onClosedPipe ended.
var errClosedPipe = errors.New("the pipe reading arpatch's output was closed")

// onClosedPipe returns ctx ended (cause errClosedPipe) when a write to
// stdout or stderr meets a pipe whose reader is gone (`arpatch bench 2>&1
// | head -1`): the command stops as on SIGINT, stopping the servers and
// ranks it started, where the Go runtime would end arpatch at once on
// the SIGPIPE and leave them running. A SIGPIPE from a socket (a server
// that went away mid-request) leaves ctx alone: the write fails with
// EPIPE, as it did. stop undoes it.
func onClosedPipe(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGPIPE)
	done := make(chan struct{})
	goroutine.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-sig:
				if closedPipe(1) || closedPipe(2) {
					cancel(errClosedPipe)
				}
			}
		}
	})
	return ctx, func() {
		signal.Stop(sig)
		close(done)
		cancel(nil)
	}
}

// closedPipe reports whether fd is the write end of a pipe with no
// reader left: poll(2) reports POLLERR there (Linux's pipe_poll), and
// never on a terminal or file.
func closedPipe(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd)}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents&unix.POLLERR != 0
}

// usageError marks an error as the user's invocation being wrong (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runApp(ctx, newApp, args, stdout, stderr)
}

// internalError is a panic in a command, arpatch's bug: exit
// exitInternal, with the panic's value and the stack.
type internalError struct {
	value any
	stack []byte
}

func (e internalError) Error() string {
	return fmt.Sprintf("internal error: panic: %v\nthis is a bug in arpatch, not in what you asked: please report it with the command line and the stack below\n%s",
		e.value, bytes.TrimSpace(e.stack))
}

// runGuarded runs app, turning a panic on this goroutine (every command's
// action runs here) into an internalError. A panic on a goroutine a
// command started (every one starts with goroutine.Go) goes to the
// handler runMainApp set, panicExit.
func runGuarded(ctx context.Context, app *cli.App, argv []string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = internalError{value: p, stack: debug.Stack()}
		}
	}()
	return app.RunContext(ctx, argv)
}

// runApp is run with the app newApp makes (a test adds commands to it).
func runApp(ctx context.Context, makeApp func(stdout, stderr io.Writer) *cli.App, args []string, stdout, stderr io.Writer) int {
	// Every command's output goes through one writer that keeps its first
	// error, so that a table, report or help text that could not be
	// written (a full disk, a closed file) fails the run instead of
	// exiting 0 with a short output. (Progress goes to stderr, which is
	// not wrapped: its terminal test needs the *os.File.)
	out := errwriter.New(stdout)
	app := makeApp(out, stderr)
	argv, err := interspersed(app, args)
	if err == nil {
		err = runGuarded(context.WithValue(ctx, argvKey{}, args), app, argv)
	}
	err = unknownCommand(app, args, err)
	code, msg := exitOK, ""
	if err != nil {
		code, msg = exitCode(err), err.Error()
		if code == exitUsage && !strings.Contains(msg, "--help") {
			// The pointer ends the first line, the error's own; lines
			// after it are notes.
			first, rest, _ := strings.Cut(msg, "\n")
			msg = first + " (" + helpPointer(app, args) + ")"
			if rest != "" {
				msg += "\n" + rest
			}
		}
		if ctx.Err() != nil && code != exitUsage && code != exitInternal {
			code, msg = interrupted(msg)
			if errors.Is(context.Cause(ctx), errClosedPipe) {
				msg = "interrupted (" + errClosedPipe.Error() + ")" + strings.TrimPrefix(msg, "interrupted")
			}
		}
	}
	if werr := out.Err(); werr != nil {
		const lost = "standard output is incomplete: "
		switch {
		case err == nil:
			code, msg = exitInfra, lost+werr.Error()
		case errors.Is(err, werr): // the command stopped at the failed write
			code, msg = exitInfra, lost+msg
		default: // the command's own failure keeps its code
			msg += "\narpatch: " + lost + werr.Error()
		}
	}
	if werr := out.Err(); errors.Is(werr, syscall.EPIPE) && code != exitInternal {
		// The reader of stdout stopped reading (| head): as git, say
		// nothing of it, but exit 4, not 0 (a command that failed on its
		// own keeps its code).
		if code == exitOK {
			code = exitInfra
		}
		msg = ""
	}
	// A worker panicking on its own goroutine may be what let the
	// command return: its handler's message and exit 5 come first.
	goroutine.Ending(func() {
		if msg != "" {
			fmt.Fprintln(stderr, "arpatch: "+msg)
		}
	})
	return code
}

// interrupted is the one rule for a command that failed after a signal
// (SIGINT, SIGTERM, SIGHUP) ended its context: the run says nothing about
// what it measured or checked, so it exits 4 (infrastructure), never 1,
// and its message (what the command left behind or cleaned, or nothing)
// starts "interrupted".
func interrupted(msg string) (int, string) {
	switch {
	case msg == "":
		msg = "interrupted"
	case !strings.HasPrefix(msg, "interrupted"):
		msg = "interrupted: " + msg
	}
	return exitInfra, msg
}

func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:    "arpatch",
		Usage:   "patch, build and benchmark SGLang custom allreduce on PCIe-only GPU hosts",
		Version: arpatchVersion(),
		Description: `arpatch clones SGLang at a recipe's pinned commit and applies a versioned
patch series that opens custom allreduce on PCIe-only hosts above two GPUs
(a Python gate bypass plus the C++ PCIe dispatch branch).

Start with:
   arpatch apply --recipe pcie --repo /path/to/sglang-mirror
   arpatch status
   arpatch revert

Exit codes:
   0  success
   1  failure: a refused apply, drift found by status, a series check that
      fails, an error finding of doctor, a WRONG or hung allreduce case (a
      --timeout expiry is a hang), an INVALID or slower bench arm, a
      nightly regression
   2  usage error: an unknown command or flag, a bad or empty value, a
      stray argument, a config or recipe error found before the run
   3  drift (nightly): no series of the family applies to upstream
   4  infrastructure (bench, nightly): a fetch, build or server failed, a
      server answered nothing, another nightly holds the history, the
      history could not be read or written; any command that could not
      write its standard output (a full disk); and any command (apply, build,
      ab, bench, bench allreduce, tune allreduce, doctor, nightly...) that
      a signal (SIGINT, SIGTERM, SIGHUP) interrupted: its message starts
      "interrupted" and says what was stopped or left; a partial table or
      JSON report says interrupted, never WRONG, ERROR or MISSING
   5  internal error: arpatch itself failed (a panic, its bug): the message
      says so and gives the stack to report`,
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: true,
		HideHelpCommand:      false,
		OnUsageError:         flagUsageError,
		ExitErrHandler:       func(*cli.Context, error) {}, // run() prints the error and exits with exitCode's code
		Commands: []*cli.Command{
			newCmdApply(applyRun),
			newCmdStatus(statusRun),
			newCmdRevert(revertRun),
			newCmdPatches(),
			newCmdRecipes(recipesListRun),
			newCmdBuild(buildRun),
			newCmdAB(),
			newCmdBench(benchRun),
			newCmdTune(),
			newCmdDoctor(doctorRun),
			newCmdNightly(nightlyRun),
			newCmdHistory(),
			newCmdGencodeFilter(gencodeFilterRun),
			newCmdFakeSGLang(fakeSGLangRun),
		},
	}
	conform(app.Commands)
	return app
}

// stateDirFlag returns the value v of a path flag (~ expanded) when
// given, else name inside the state directory (internal/statedir):
// working files go into the current directory only when the user names
// it. No state directory is a usage error naming flag.
func stateDirFlag(flag, v, name string) (string, error) {
	if v != "" {
		return expandHome(v), nil
	}
	p, err := statedir.Path(name)
	if err != nil {
		return "", usagef("--%s: %v", flag, err)
	}
	return p, nil
}

// cacheDirOf is --cache-dir dir (~ expanded) when given, else
// kernels.DefaultCacheDir; no cache directory at all is a usage error
// naming the way out.
func cacheDirOf(dir string) (string, error) {
	if d := expandHome(dir); d != "" {
		return d, nil
	}
	d, err := kernels.DefaultCacheDir()
	if err != nil {
		return "", usageError{err}
	}
	return d, nil
}

// expandHome turns a leading "~/" into the home directory: the shell does
// not expand it in --flag=~/path.
func expandHome(p string) string {
	if p == "~" {
		if h, err := os.UserHomeDir(); err == nil {
			return h
		}
	}
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if h, err := os.UserHomeDir(); err == nil {
			return filepath.Join(h, rest)
		}
	}
	return p
}
