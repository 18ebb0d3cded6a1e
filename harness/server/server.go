// Package server starts and stops SGLang servers for a benchmark: it runs
// the launch command in its own process group with the log in a file,
// waits until /health_generate answers (a one-token generation, so the
// model is loaded), reports a server that exits or stays unready with the
// last lines of its log, and stops it with SIGTERM to the group, then
// SIGKILL after a grace period, so no process is left behind, Ctrl-C
// included (internal/procgroup).
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/arpatch/arpatch/harness/sglang"
	"github.com/arpatch/arpatch/internal/goroutine"
	"github.com/arpatch/arpatch/internal/lockfile"
	"github.com/arpatch/arpatch/internal/procgroup"
	"github.com/arpatch/arpatch/internal/shellq"
)

// DefaultReadyTimeout is how long a server may take to answer
// /health_generate when Spec, bench.Options or nightly.toml leave the wait
// unset (20 minutes: loading a large model takes long). `arpatch bench
// --ready-timeout` shows it as its default.
const DefaultReadyTimeout = 20 * time.Minute

// DefaultHost is the address a launched server binds and is reached at
// when Spec or bench.Options name none: the loopback, so a benchmark
// server is not open to the network.
const DefaultHost = "127.0.0.1"

// Spec is one server to start.
type Spec struct {
	Name         string   // the arm, for messages
	Argv         []string // the command
	Env          []string // full environment
	Host         string   // "": DefaultHost
	Port         int
	LogPath      string
	ReadyTimeout time.Duration // 0: DefaultReadyTimeout
	PollInterval time.Duration // the longest wait between readiness probes; default 250 ms
	Grace        time.Duration // SIGTERM to SIGKILL; default 15 s
}

// Proc is a started server.
type Proc struct {
	Spec Spec
	URL  string
	cmd  *procgroup.Cmd
	end  context.CancelFunc // starts the group's end: SIGTERM, SIGKILL after Grace
	done chan struct{}
	err  error // the wait error once done is closed
	log  *os.File
}

// ExitError is a server that exited or never became ready.
type ExitError struct {
	Name, Log, Why string
	Tail           []string
	Exited         bool // the process ended (else it was not ready in time)
}

// PortTaken reports whether the server exited because its port was in
// use: the last lines of its log say "address already in use", the
// wording of EADDRINUSE in Go's net package and in Python's (uvicorn:
// "[Errno 98] error while attempting to bind on address ...: address
// already in use").
func (e *ExitError) PortTaken() bool {
	if !e.Exited {
		return false
	}
	for _, l := range e.Tail {
		if strings.Contains(strings.ToLower(l), "address already in use") {
			return true
		}
	}
	return false
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("server for arm %s %s; last %d lines of %s:\n%s", e.Name, e.Why, len(e.Tail), e.Log, strings.Join(e.Tail, "\n"))
}

// FreePort asks the kernel for a free TCP port on host.
func FreePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }() // a probe: closed, the port is free
	return l.Addr().(*net.TCPAddr).Port, nil
}

// portTries is how many ports StartOnFreePort tries.
const portTries = 3

// StartOnFreePort starts the server that at(port) describes, on a port
// FreePort finds on host, and waits until it is ready (Start). A port
// FreePort returns is free only at that moment: another process may bind
// it, or take it as the local port of an outgoing connection, before the
// server binds it (after loading a model, for SGLang). A server that
// exits for that reason (ExitError.PortTaken) is started again on a new
// port, portTries times in all, with the same log path. It returns
// FreePort's error, or Start's result for the last try.
func StartOnFreePort(ctx context.Context, host string, at func(port int) Spec) (*Proc, error) {
	return startOnFreePort(ctx, host, at, FreePort)
}

func startOnFreePort(ctx context.Context, host string, at func(port int) Spec, pick func(host string) (int, error)) (*Proc, error) {
	var err error
	for range portTries {
		port, perr := pick(host)
		if perr != nil {
			return nil, perr
		}
		var p *Proc
		if p, err = Start(ctx, at(port)); err == nil {
			return p, nil
		}
		var ee *ExitError
		if !errors.As(err, &ee) || !ee.PortTaken() {
			return nil, err
		}
	}
	return nil, err
}

// Start launches the server and waits until it is ready. It returns an
// *ExitError with the log's last 40 lines when the process exits first or
// the wait times out (the process group is then killed), and ctx's error,
// after killing it, when ctx is cancelled.
func Start(ctx context.Context, spec Spec) (*Proc, error) {
	p, err := launch(spec.withDefaults())
	if err != nil {
		return nil, err
	}
	if err := p.waitReady(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// withDefaults is spec with DefaultHost, DefaultReadyTimeout, a 250 ms
// poll interval and a 15 s grace where it leaves them zero.
func (spec Spec) withDefaults() Spec {
	if spec.Host == "" {
		spec.Host = DefaultHost
	}
	if spec.ReadyTimeout == 0 {
		spec.ReadyTimeout = DefaultReadyTimeout
	}
	if spec.PollInterval == 0 {
		spec.PollInterval = 250 * time.Millisecond
	}
	if spec.Grace == 0 {
		spec.Grace = 15 * time.Second
	}
	return spec
}

// launch starts the server in its own process group, its output to
// spec.LogPath (headed by the arm and its command line), and records the
// group beside the log (PGIDSuffix); a server whose group cannot be
// recorded is stopped.
func launch(spec Spec) (*Proc, error) {
	logf, err := os.Create(spec.LogPath)
	if err != nil {
		return nil, fmt.Errorf("server log: %w", err)
	}
	if _, err := fmt.Fprintf(logf, "# arm %s: %s\n", spec.Name, shellq.Join(spec.Argv)); err != nil {
		_ = logf.Close() // the write's error is the one to report
		return nil, fmt.Errorf("server log: %w", err)
	}
	// The server outlives ctx, which bounds only this start: Stop ends it.
	life, end := context.WithCancel(context.Background())
	cmd := procgroup.Command(life, spec.Grace, spec.Argv[0], spec.Argv[1:]...)
	cmd.Env = spec.Env
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		end()
		_ = logf.Close() // the start's error is the one to report
		return nil, fmt.Errorf("starting the server for arm %s (%s): %w", spec.Name, spec.Argv[0], err)
	}
	p := &Proc{Spec: spec, URL: fmt.Sprintf("http://%s", net.JoinHostPort(spec.Host, fmt.Sprint(spec.Port))), cmd: cmd, end: end, done: make(chan struct{}), log: logf}
	goroutine.Go(func() {
		p.err = cmd.Wait()
		close(p.done)
	})
	// Beside the log: if arpatch is killed outright, the next run finds
	// the group that still holds the GPUs (Orphans). A server without it
	// could outlive arpatch unseen, so it does not run.
	if err := lockfile.WritePID(spec.LogPath+PGIDSuffix, cmd.PGID()); err != nil {
		return nil, errors.Join(fmt.Errorf("recording the server's process group: %w", err), p.Stop())
	}
	return p, nil
}

// waitReady probes the server's health until it answers, 5 ms apart at
// first and the gap doubling up to PollInterval. It returns an *ExitError
// when the server exits first or is not ready within ReadyTimeout (it is
// then stopped), and ctx's error, after stopping it, when ctx ends.
func (p *Proc) waitReady(ctx context.Context) error {
	client := sglang.NewClient(p.URL)
	// A probe ends when the server exits, as well as at the ready
	// deadline or ctx's end: a probe that another process's listener
	// holds (its port taken between FreePort and the server's bind) must
	// not hide the exit.
	ready, endReady := context.WithTimeout(ctx, p.Spec.ReadyTimeout)
	defer endReady()
	probing, endProbing := context.WithCancel(ready)
	defer endProbing()
	goroutine.Go(func() {
		select {
		case <-p.done:
			endProbing()
		case <-probing.Done():
		}
	})
	// The probes start 5 ms apart and the gap doubles up to PollInterval:
	// a server that is ready in milliseconds (a test's, a restart) is not
	// waited on for a whole interval, and one that loads a model for
	// minutes is probed every PollInterval after the first few.
	gap := min(5*time.Millisecond, p.Spec.PollInterval)
	tick := time.NewTimer(gap)
	defer tick.Stop()
	for {
		hctx, cancel := context.WithTimeout(probing, 30*time.Second)
		herr := client.Health(hctx)
		cancel()
		if herr == nil {
			return nil
		}
		select {
		case <-p.done: // its group is killed too, so the record goes
			p.end()
			_ = os.Remove(p.Spec.LogPath + PGIDSuffix)
			_ = p.log.Close() // the server wrote through its own descriptor: closing ours loses nothing
			return &ExitError{Name: p.Spec.Name, Log: p.Spec.LogPath, Why: "exited (" + ExitStatus(p.err) + ") before it was ready" + earlyZero(p.err), Tail: Tail(p.Spec.LogPath, 40), Exited: true}
		case <-ready.Done():
			if ctx.Err() != nil {
				if err := p.Stop(); err != nil {
					return errors.Join(ctx.Err(), fmt.Errorf("stopping the server for arm %s: %w", p.Spec.Name, err))
				}
				return ctx.Err()
			}
			why := fmt.Sprintf("was not ready after %s (%v)", p.Spec.ReadyTimeout, herr)
			if err := p.Stop(); err != nil {
				why += fmt.Sprintf("; stopping it: %v", err)
			}
			return &ExitError{Name: p.Spec.Name, Log: p.Spec.LogPath, Why: why, Tail: Tail(p.Spec.LogPath, 40)}
		case <-tick.C:
			gap = min(2*gap, p.Spec.PollInterval)
			tick.Reset(gap)
		}
	}
}

// ExitStatus says how a server process ended, from its wait error:
// "exit status 0" for nil (cmd.Wait reports a clean exit as no error),
// else the error ("exit status 7", "signal: killed").
func ExitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// earlyZero explains a clean exit before the server was ready: the launch
// command returned, most often because it started the server in the
// background or handed it to another process and ended.
func earlyZero(err error) string {
	if err != nil {
		return ""
	}
	return ": the launch command returned, so nothing of it served the port (a command that starts the server in the background must wait for it, e.g. with exec or wait)"
}

// PID is the launch command's process id, the leader of its group.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the server process has ended, and how, waiting
// up to wait for it to end (0: just look), or until ctx is done. A server
// that is dying fails requests before its process is reaped: a caller
// that saw failures waits a little to tell a dead server from a flaky one;
// the wait ends as soon as the process does.
func (p *Proc) Exited(ctx context.Context, wait time.Duration) (bool, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-p.done:
		return true, p.err
	default:
	}
	select {
	case <-p.done:
		return true, p.err
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		return false, nil
	}
}

// Stop ends the server: SIGTERM to its process group, SIGKILL to the
// leader after the grace period, and SIGKILL to the group once the leader
// is gone (internal/procgroup), then once more for anything that joined
// the group since; that last signal's failure is the error. It waits for
// the leader and is safe to call twice.
func (p *Proc) Stop() error {
	p.end()
	<-p.done
	if err := p.cmd.KillGroup(); err != nil {
		return err
	}
	// A record left behind names a group that is gone: Orphans removes it.
	_ = os.Remove(p.Spec.LogPath + PGIDSuffix)
	_ = p.log.Close() // the server wrote through its own descriptor: closing ours loses nothing
	return nil
}

// Escaped reports whether something still accepts connections on the
// server's port after Stop, for up to wait: a process that left the
// process group (setsid, a daemonizing launcher, a container runtime)
// outlives the SIGKILL to the group, keeps its GPUs, and nothing else
// would notice. arpatch cannot track such a process (no cgroup; a child
// subreaper would change the whole arpatch process), so it says so.
// While a process of the group is still dying, the port may answer for
// it: Escaped waits, up to wait, until the group is empty or the port is
// closed; a port that answers once the group is empty answers for a
// process outside it, at once. A process whose main thread has exited
// while other threads still hold the socket is not gone
// (lockfile.GroupRuns).
func (p *Proc) Escaped(wait time.Duration) bool {
	addr := net.JoinHostPort(p.Spec.Host, fmt.Sprint(p.Spec.Port))
	deadline := time.Now().Add(wait)
	for {
		// Empty before the dial: whatever answers is outside the group.
		empty := !lockfile.GroupRuns(p.cmd.PGID())
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return false
		}
		_ = c.Close() // a probe connection
		if empty || time.Now().After(deadline) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// EscapedWarning is the warning for a server whose port still answers
// after its process group was killed.
func (p *Proc) EscapedWarning() string {
	return fmt.Sprintf("the server for arm %s still answers on %s:%d after arpatch killed its process group (%d): it left the group (setsid, a daemonizing launcher), so it still runs and may hold the GPUs; stop it yourself (e.g. fuser -k %d/tcp), and launch servers that stay in the group (exec, no setsid)",
		p.Spec.Name, p.Spec.Host, p.Spec.Port, p.cmd.PGID(), p.Spec.Port)
}

// PGIDSuffix names the file beside a server's log that holds its process
// group while it runs.
const PGIDSuffix = ".pgid"

// Orphan is a server of an earlier run whose process group still runs:
// its arpatch was killed before it could stop it.
type Orphan struct {
	PGID int
	Log  string
}

// Orphans lists the servers started with logs in dir whose process groups
// still run; the record of a group that is gone is removed.
func Orphans(dir string) []Orphan {
	files, _ := filepath.Glob(filepath.Join(dir, "*"+PGIDSuffix))
	var out []Orphan
	for _, f := range files {
		if g := lockfile.LiveGroup(f); g > 0 {
			out = append(out, Orphan{PGID: g, Log: strings.TrimSuffix(f, PGIDSuffix)})
		} else {
			_ = os.Remove(f) // the group is gone; a record that stays is tried again next time
		}
	}
	return out
}

// Tail returns the last n lines of a file.
func Tail(path string, n int) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return []string{"(no log: " + err.Error() + ")"}
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}
