// Package torchrun starts a Python script on N ranks of this host with
// `python -m torch.distributed.run --standalone --nproc-per-node N`, the
// way arpatch's GPU measurements run (harness/allreduce's bench.py,
// harness/p2p's p2p.py): the script is written into a private temp
// directory, rank 0 appends JSON lines to an --out file there, the whole
// run is bounded by a timeout, and the caller's context and the timeout
// both end it through internal/procgroup (SIGTERM to torchrun's group,
// SIGKILL 5 s later).
//
// It reads no record: the caller parses Result.Records, whose last
// "start" without its result names the case that hung. It judges
// nothing.
package torchrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/arpatch/arpatch/internal/goroutine"
	"github.com/arpatch/arpatch/internal/procgroup"
)

// Spec is one run.
type Spec struct {
	// Script is the Python source, written as Name ("bench.py") into a
	// directory of its own.
	Script []byte
	Name   string
	// Argv returns the whole command line, given the script's path and
	// the path of the --out file rank 0 writes ("python3 -m
	// torch.distributed.run ... SCRIPT --out OUT ...").
	Argv func(script, out string) []string
	// Env is the ranks' environment (nil: this process's), to which Run
	// adds PYTHONUNBUFFERED=1 and OMP_NUM_THREADS=1.
	Env     []string
	Timeout time.Duration // the whole run's; it must be positive
	// Watch, when set, is called with the --out file as rank 0 has
	// written it so far, each time it grew (looked at every
	// WatchInterval while the ranks run), from one goroutine; Run
	// returns only after its last call. Its caller counts the cases done.
	Watch func(records []byte)
	// Log receives the ranks' combined output as it comes; nil for none.
	// A write error from it stops the copying of the output and so ends
	// the run with that error as Result.Exit.
	Log io.Writer
}

// Exit values of a run that did not end on its own.
const (
	ExitOK          = "ok"
	ExitTimeout     = "timeout"
	ExitInterrupted = "interrupted"
)

// Result is what a run left.
type Result struct {
	Argv []string
	// Exit is ExitOK, ExitTimeout (Spec.Timeout passed), ExitInterrupted
	// (the caller's context ended: a signal, not a fault of the run), or
	// the error of a rank that failed ("exit status 1").
	Exit    string
	Seconds float64
	// Output is the ranks' combined stdout and stderr, by line.
	Output []string
	// Records is the --out file as rank 0 left it (nil when it wrote
	// none).
	Records []byte
}

// Run starts the ranks and waits for them. It returns an error only when
// nothing could be started: the temp directory, the script, or the
// interpreter (an error that names Argv[0] and asks whether torch is
// installed for it).
func Run(ctx context.Context, s Spec) (*Result, error) {
	// The script sits in a directory of its own (0700, os.MkdirTemp), not
	// in the shared temp dir: Python puts the script's directory first on
	// sys.path, so a torch.py beside it would run in every rank.
	tmp, err := os.MkdirTemp("", "arpatch-torchrun-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }() // scratch in the system temp dir: costs disk only
	script := filepath.Join(tmp, s.Name)
	if err := os.WriteFile(script, s.Script, 0o644); err != nil {
		return nil, err
	}
	out := filepath.Join(tmp, "records.jsonl")
	argv := s.Argv(script, out)
	res := &Result{Argv: argv}
	env := s.Env
	if env == nil {
		env = os.Environ()
	}
	rctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	cmd := procgroup.Command(rctx, 5*time.Second, argv[0], argv[1:]...)
	cmd.Env = append(env[:len(env):len(env)], "PYTHONUNBUFFERED=1", "OMP_NUM_THREADS=1")
	var buf bytes.Buffer
	var w io.Writer = &buf
	if s.Log != nil {
		w = io.MultiWriter(&buf, s.Log)
	}
	cmd.Stdout, cmd.Stderr = w, w
	start := time.Now()
	err = cmd.Start()
	if err == nil {
		stop := watch(out, s.Watch)
		err = cmd.Wait()
		stop()
	} else if rctx.Err() == nil {
		return nil, fmt.Errorf("starting %s: %w; is torch installed for --python %s?", argv[0], err, argv[0])
	}
	switch {
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		res.Exit = ExitInterrupted
	case errors.Is(err, context.DeadlineExceeded):
		res.Exit = ExitTimeout
	case err != nil:
		res.Exit = err.Error()
	default:
		res.Exit = ExitOK
	}
	res.Seconds = time.Since(start).Seconds()
	res.Output = strings.Split(buf.String(), "\n")
	if b, err := os.ReadFile(out); err == nil {
		res.Records = b
	} else if !errors.Is(err, os.ErrNotExist) {
		return res, err
	}
	return res, nil
}

// WatchInterval is how often Run looks at the --out file for Spec.Watch.
const WatchInterval = 250 * time.Millisecond

// watch calls fn with the file at path each time it grew, every
// WatchInterval, until the returned stop is called (which waits for the
// last call); fn nil watches nothing.
func watch(path string, fn func([]byte)) (stop func()) {
	if fn == nil {
		return func() {}
	}
	done, finished := make(chan struct{}), make(chan struct{})
	goroutine.Go(func() {
		defer close(finished)
		t := time.NewTicker(WatchInterval)
		defer t.Stop()
		last := int64(-1)
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if fi, err := os.Stat(path); err == nil && fi.Size() > last {
				if b, err := os.ReadFile(path); err == nil {
					last = int64(len(b))
					fn(b)
				}
			}
		}
	})
	return func() {
		close(done)
		<-finished
	}
}
