// Package procgroup runs a command in a process group of its own and ends
// the whole group, so that no child or grandchild of it outlives it: a
// build's compilers, torchrun's ranks, an SGLang server's worker
// processes, a stuck nvidia-smi.
//
// Ending a command goes in three steps. When the command's context is
// done, exec.Cmd.Cancel sends SIGTERM to the group, so every process in it
// can clean up. If the group's leader still runs a grace period later,
// exec.Cmd.WaitDelay sends it SIGKILL and closes the output pipes that a
// leftover child may hold open. Once the leader is reaped, Wait sends
// SIGKILL to the group, which ends whatever in it ignored SIGTERM or
// outlived the leader, after a clean exit too. The grace period is thus
// the leader's: a launcher that exits on SIGTERM before its workers cuts
// their cleanup short, one that waits for them gives them the whole
// period. Waiting for the rest of the group instead is not possible: a
// process that is not arpatch's child cannot be waited for, and polling
// for it sees zombies that only init reaps (once a second on some hosts).
//
// The group's id is the leader's pid. The kernel does not reuse it while
// any process of the group lives; once none does, the final SIGKILL finds
// no group (ESRCH, no error), unless in the instant between the leader's
// reaping and that signal a new process took the number and made itself
// a group leader.
//
// A process that leaves the group (setsid, a daemonizing launcher, a
// container runtime) is out of reach: without a cgroup or a child
// subreaper, which would change the whole arpatch process, nothing can
// follow it. Callers that can tell (harness/server probes the port) say so.
//
// Not for commands that must outlive arpatch. Unix only (Setpgid, kill(2)
// to a negative pid).
package procgroup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultGrace is the time between SIGTERM and SIGKILL when Command is
// given none.
const DefaultGrace = 5 * time.Second

// Cmd is an exec.Cmd that starts in a new process group. Set its Env,
// Dir, Stdin, Stdout and Stderr as on exec.Cmd, start it with Start or
// Run, and wait with this type's Wait (Run, Output and CombinedOutput use
// it): exec.Cmd's own Wait does not kill the group.
type Cmd struct {
	*exec.Cmd
	ctx       context.Context
	cancelled atomic.Bool // Cancel signalled the group
}

// Command returns a Cmd for name and args that, once started, leads a
// process group of its own. When ctx is done the group gets SIGTERM, and
// grace later (DefaultGrace when grace is 0 or less) the leader gets
// SIGKILL if it still runs; Wait then kills what is left of the group.
func Command(ctx context.Context, grace time.Duration, name string, args ...string) *Cmd {
	if grace <= 0 {
		grace = DefaultGrace
	}
	c := &Cmd{Cmd: exec.CommandContext(ctx, name, args...), ctx: ctx}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error {
		err := signalGroup(c.Process.Pid, syscall.SIGTERM)
		if err == nil {
			c.cancelled.Store(true)
		}
		return err
	}
	c.WaitDelay = grace
	return c
}

// running holds the groups started by Start and not yet ended by Wait:
// StopAll's list, for an end of the process where no deferred function
// runs (a panic on a worker goroutine).
var running = struct {
	sync.Mutex
	pgids map[int]bool
}{pgids: map[int]bool{}}

// Start starts the command as exec.Cmd.Start does and records its group
// until Wait, for StopAll.
func (c *Cmd) Start() error {
	if err := c.Cmd.Start(); err != nil {
		return err
	}
	running.Lock()
	running.pgids[c.Process.Pid] = true
	running.Unlock()
	return nil
}

// StopAll ends every group started by Start that Wait has not ended yet:
// SIGTERM to each, then, for those still there after grace, SIGKILL. It
// is for a process about to exit without running its deferred functions
// (cmd/arpatch's handler of a panic on a worker goroutine), so that the
// servers and ranks its commands started do not outlive it. It returns
// the groups it signalled.
func StopAll(grace time.Duration) []int {
	running.Lock()
	var pgids []int
	for pgid := range running.pgids {
		pgids = append(pgids, pgid)
	}
	running.Unlock()
	for _, pgid := range pgids {
		_ = signalGroup(pgid, syscall.SIGTERM) // (a group already gone needs nothing)
	}
	deadline := time.Now().Add(grace)
	for _, pgid := range pgids {
		for signalGroup(pgid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		_ = signalGroup(pgid, syscall.SIGKILL) // (gone by now is no error)
	}
	return pgids
}

// Running counts the processes of group pgid that are not zombies (a
// killed child reparented to PID 1 stays in its group until PID 1 reaps
// it), from each /proc/PID/stat's state and pgrp fields: 0 once the group
// has ended. Linux only; the error names /proc where it cannot be read.
func Running(pgid int) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("counting process group %d's processes: %w", pgid, err)
	}
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // not a process, or one that just ended
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and ")".
		i := bytes.LastIndex(b, []byte(") "))
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+2:]))
		if len(f) < 3 {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid && f[0] != "Z" {
			n++
		}
	}
	return n, nil
}

// PGID is the process group's id (the leader's pid) once the command has
// started, and 0 before.
func (c *Cmd) PGID() int {
	if c.Process == nil {
		return 0
	}
	return c.Process.Pid
}

// Wait waits for the leader to exit, and for its output to be copied (at
// most the grace period after the exit or the cancellation), then sends
// SIGKILL to the group.
// It returns the context's error (context.Canceled,
// context.DeadlineExceeded) when the context ended the command, whatever
// its exit status; else exec.Cmd.Wait's error: nil for a clean exit, an
// *exec.ExitError with the status otherwise, exec.ErrWaitDelay for a
// clean exit whose leftover children held its output open. A failure to
// kill the group (other than its being gone) is joined to that error.
func (c *Cmd) Wait() error {
	err := c.Cmd.Wait()
	if c.cancelled.Load() {
		err = c.ctx.Err()
	}
	if c.Process != nil {
		if kerr := c.KillGroup(); kerr != nil {
			err = errors.Join(err, kerr)
		}
		running.Lock()
		delete(running.pgids, c.Process.Pid)
		running.Unlock()
	}
	return err
}

// KillGroup sends SIGKILL to the group now; a group that is gone is no
// error. Wait calls it; a caller calls it again only to reach what joined
// the group after Wait returned.
func (c *Cmd) KillGroup() error {
	if err := signalGroup(c.PGID(), syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing process group %d: %w", c.PGID(), err)
	}
	return nil
}

// signalGroup sends sig to process group pgid; a group with no process
// left is os.ErrProcessDone, as exec.Cmd.Cancel expects.
func signalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 0 {
		return os.ErrProcessDone
	}
	err := syscall.Kill(-pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// Run starts the command and waits for it with Wait.
func (c *Cmd) Run() error {
	if err := c.Start(); err != nil {
		return err
	}
	return c.Wait()
}

// Output runs the command and returns its standard output, as
// exec.Cmd.Output does but waiting with Wait; standard error is not kept
// in the *exec.ExitError.
func (c *Cmd) Output() ([]byte, error) {
	if c.Stdout != nil {
		return nil, errors.New("procgroup: Stdout already set")
	}
	var b bytes.Buffer
	c.Stdout = &b
	err := c.Run()
	return b.Bytes(), err
}

// CombinedOutput runs the command and returns its standard output and
// standard error together, as exec.Cmd.CombinedOutput does but waiting
// with Wait.
func (c *Cmd) CombinedOutput() ([]byte, error) {
	if c.Stdout != nil || c.Stderr != nil {
		return nil, errors.New("procgroup: Stdout or Stderr already set")
	}
	var b bytes.Buffer
	c.Stdout, c.Stderr = &b, &b
	err := c.Run()
	return b.Bytes(), err
}
