package procgroup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arpatch/arpatch/internal/ctxtest"
)

// The test binary is its own helper: with PROCGROUP_HELPER set it plays
// the command ("child": starts a grandchild, then does what
// PROCGROUP_CHILD says: exit N, ignore-term, wait-grandchild on
// SIGTERM, else die of SIGTERM) or the grandchild (blocks, and ignores SIGTERM
// unless PROCGROUP_GRANDCHILD says to report it and exit).
// Both hold the test's "alive" pipe as fd 3, so EOF on its read end means
// both have exited, and the grandchild holds the child's stdout too.
func TestMain(m *testing.M) {
	switch os.Getenv("PROCGROUP_HELPER") {
	case "":
		os.Exit(m.Run())
	case "grandchild":
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM) // ignored unless PROCGROUP_GRANDCHILD=report-term
		ready := os.NewFile(4, "ready")
		if _, err := fmt.Fprintf(ready, "%d\n", os.Getpid()); err != nil {
			panic(err)
		}
		_ = ready.Close() // the child has read the line, or gets EOF and says so
		for range term {
			if os.Getenv("PROCGROUP_GRANDCHILD") == "report-term" {
				if _, err := fmt.Fprintln(os.NewFile(3, "alive"), "grandchild: SIGTERM"); err != nil {
					os.Exit(1) // the test then misses the line and says so
				}
				os.Exit(0)
			}
		}
	case "child":
		mode := os.Getenv("PROCGROUP_CHILD")
		if strings.HasPrefix(mode, "exit ") {
			code, _ := strconv.Atoi(strings.TrimPrefix(mode, "exit "))
			fmt.Println("child exits")
			os.Exit(code)
		}
		term := make(chan os.Signal, 1)
		switch mode {
		case "ignore-term":
			signal.Ignore(syscall.SIGTERM)
		case "wait-grandchild":
			signal.Notify(term, syscall.SIGTERM)
		}
		r, w, err := os.Pipe()
		if err != nil {
			panic(err)
		}
		g := exec.Command(os.Args[0])
		g.Env = append(os.Environ(), "PROCGROUP_HELPER=grandchild")
		g.Stdout = os.Stdout
		g.ExtraFiles = []*os.File{os.NewFile(3, "alive"), w}
		if err := g.Start(); err != nil {
			panic(err)
		}
		_ = w.Close()
		pid, _ := bufio.NewReader(r).ReadString('\n')
		fmt.Printf("child %d grandchild %s", os.Getpid(), pid)
		if mode == "wait-grandchild" { // a launcher that waits for its workers
			<-term
			_ = g.Wait()
			os.Exit(0)
		}
		time.Sleep(time.Hour) // SIGTERM ends it unless ignored; not select{}, a "deadlock"
	}
}

// helper returns the helper child in mode under ctx, with the write end
// of a fresh "alive" pipe as its fd 3; the read end is returned.
func helper(t *testing.T, ctx context.Context, grace time.Duration, mode string) (*Cmd, *os.File) {
	t.Helper()
	ar, aw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ar.Close(), aw.Close() })
	c := Command(ctx, grace, os.Args[0], "-test.run=^$")
	c.Env = append(os.Environ(), "PROCGROUP_HELPER=child", "PROCGROUP_CHILD="+mode)
	c.ExtraFiles = []*os.File{aw}
	return c, ar
}

// started closes the test's copy of the alive pipe's write end (the
// helpers hold theirs) and reads "child PID grandchild PID" from out,
// which says that both run.
func started(t *testing.T, c *Cmd, out io.Reader) {
	t.Helper()
	if err := c.ExtraFiles[0].Close(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	var child, grandchild int
	if _, serr := fmt.Sscanf(line, "child %d grandchild %d\n", &child, &grandchild); err != nil || serr != nil {
		t.Fatalf("helper said %q (%v, %v)", line, err, serr)
	}
	if child != c.PGID() {
		t.Fatalf("the child is %d, the group %d", child, c.PGID())
	}
}

// start starts the helper child with its stdout on an os.Pipe (so exec
// copies nothing) and returns once child and grandchild run; the returned
// file is the alive pipe's read end.
func start(t *testing.T, ctx context.Context, grace time.Duration, mode string) (*Cmd, *os.File) {
	t.Helper()
	c, alive := helper(t, ctx, grace, mode)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	c.Stdout = w
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	started(t, c, r)
	return c, alive
}

// allGone waits, at most limit, for EOF on the alive pipe, the kernel's
// word that every helper has exited, and returns what they wrote to it.
func allGone(t *testing.T, alive *os.File, limit time.Duration) string {
	t.Helper()
	if err := alive.SetReadDeadline(time.Now().Add(limit)); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(alive)
	if err != nil {
		t.Fatalf("a helper still runs %s after Wait: %v", limit, err)
	}
	return string(b)
}

// TestCancelKillsGroup: a child and its grandchild that both ignore
// SIGTERM are gone once Wait returns, after the grace period and not much
// later; Wait reports the context's error. (A SIGKILL that came first
// would end Wait within milliseconds of the cancel: 100 ms tells the two
// apart.)
func TestCancelKillsGroup(t *testing.T) {
	t.Parallel() // waits out the grace period; overlaps the other wait (after TestNoLeak)
	const grace = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	c, alive := start(t, ctx, grace, "ignore-term")
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	cancelled := time.Now()
	cancel()
	var err error
	select {
	case err = <-done:
	case <-time.After(grace + 10*time.Second):
		t.Fatal("Wait did not return: the leader outlived the grace period")
	}
	took := time.Since(cancelled)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Wait = %v, want context.Canceled", err)
	}
	if took < grace {
		t.Errorf("Wait returned %s after the cancel, before the %s grace: SIGKILL came first", took, grace)
	}
	if took > grace+10*time.Second {
		t.Errorf("Wait returned %s after the cancel, far past the %s grace", took, grace)
	}
	allGone(t, alive, 30*time.Second)
}

// TestTermEndsGroupEarly: SIGTERM goes to the whole group, so a
// grandchild can clean up while its parent waits for it; a group that
// exits on it, or whose leader dies of it, ends the wait at once, long
// before the grace period. The context's error is what Wait reports,
// whether the leader exited 0 or died of the signal: Canceled for a
// cancel, DeadlineExceeded for a deadline.
func TestTermEndsGroupEarly(t *testing.T) {
	const grace = time.Minute
	for _, tc := range []struct {
		want            error
		child           string // PROCGROUP_CHILD
		grandchildTells bool   // the grandchild reports SIGTERM and exits
	}{
		{context.Canceled, "wait-grandchild", true},
		{context.DeadlineExceeded, "wait-grandchild", true},
		{context.Canceled, "", false},
		{context.DeadlineExceeded, "", false},
	} {
		want := tc.want
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if want == context.DeadlineExceeded {
			ctx, cancel = ctxtest.Expiring()
		}
		c, alive := helper(t, ctx, grace, tc.child)
		if tc.grandchildTells {
			c.Env = append(c.Env, "PROCGROUP_GRANDCHILD=report-term")
		}
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = r.Close() }()
		c.Stdout = w
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		_ = w.Close()
		started(t, c, r)
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, want) {
				t.Errorf("Wait = %v, want %v", err, want)
			}
		case <-time.After(grace / 2):
			t.Fatal("Wait waited for the grace period although the group exited on SIGTERM")
		}
		said := allGone(t, alive, 30*time.Second)
		if tc.grandchildTells && said != "grandchild: SIGTERM\n" {
			t.Errorf("the grandchild said %q, want that it had SIGTERM", said)
		}
	}
}

// TestWaitDelayClosesHeldPipe: when output goes through a pipe that exec
// copies (a bytes.Buffer, an io.Writer) and a grandchild that ignores
// SIGTERM holds it, Wait still returns within the grace period and the
// grandchild is killed.
func TestWaitDelayClosesHeldPipe(t *testing.T) {
	t.Parallel() // waits out the grace period; overlaps the other wait (after TestNoLeak)
	const grace = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	c, alive := helper(t, ctx, grace, "")
	pr, pw := io.Pipe()
	c.Stdout = pw
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(pr)
	started(t, c, br)
	go func() { _, _ = io.Copy(io.Discard, br) }()
	done := make(chan error, 1)
	go func() { done <- c.Wait(); _ = pw.Close() }()
	t0 := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Wait = %v", err)
		}
	case <-time.After(grace + 10*time.Second):
		t.Fatal("Wait did not return: the grandchild's pipe kept it")
	}
	if took := time.Since(t0); took < grace {
		t.Errorf("Wait returned %s after the cancel, before the %s grace, while the grandchild held its output", took, grace)
	}
	allGone(t, alive, 30*time.Second)
}

// TestExitStatusPassesThrough: without a cancel, Wait returns the
// command's own result, and Output and CombinedOutput wait the same way.
func TestExitStatusPassesThrough(t *testing.T) {
	for _, code := range []int{0, 3} {
		c := Command(context.Background(), 0, os.Args[0], "-test.run=^$")
		c.Env = append(os.Environ(), "PROCGROUP_HELPER=child", fmt.Sprintf("PROCGROUP_CHILD=exit %d", code))
		out, err := c.Output()
		var ee *exec.ExitError
		switch {
		case code == 0 && err != nil:
			t.Errorf("exit 0: Wait = %v", err)
		case code != 0 && (!errors.As(err, &ee) || ee.ExitCode() != code):
			t.Errorf("exit %d: Wait = %v", code, err)
		}
		if string(out) != "child exits\n" {
			t.Errorf("output %q", out)
		}
		if c.PGID() <= 0 || c.ProcessState == nil || c.ProcessState.ExitCode() != code {
			t.Errorf("pgid %d state %v", c.PGID(), c.ProcessState)
		}
	}
	if err := Command(context.Background(), 0, "/nonexistent/arpatch-test").Run(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Run of a missing program = %v", err)
	}
	c := Command(context.Background(), 0, os.Args[0], "-test.run=^$")
	c.Env = append(os.Environ(), "PROCGROUP_HELPER=child", "PROCGROUP_CHILD=exit 0")
	if out, err := c.CombinedOutput(); err != nil || string(out) != "child exits\n" {
		t.Errorf("CombinedOutput = %q, %v", out, err)
	}
	if c.PGID() == os.Getpid() || c.PGID() == syscall.Getpgrp() {
		t.Errorf("the command ran in arpatch's group")
	}
}

// TestNoLeak: runs, cancelled or not, leave no goroutine and no open
// file descriptor behind. The cancelled runs' child ignores SIGTERM, so
// each waits out its grace period and is killed, through WaitDelay; how
// long the grace is does not matter to what is left behind. It runs alone
// (not parallel): other tests' goroutines and descriptors would count.
func TestNoLeak(t *testing.T) {
	fds := func() int {
		e, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skipf("no /proc/self/fd: %v", err)
		}
		return len(e)
	}
	round := func() {
		t.Run("cancel", func(t *testing.T) { // the test's own pipes close at its end
			ctx, cancel := context.WithCancel(context.Background())
			c, alive := start(t, ctx, 10*time.Millisecond, "ignore-term")
			cancel()
			if err := c.Wait(); !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			allGone(t, alive, 30*time.Second)
		})
		c := Command(context.Background(), 0, os.Args[0], "-test.run=^$")
		c.Env = append(os.Environ(), "PROCGROUP_HELPER=child", "PROCGROUP_CHILD=exit 0")
		if _, err := c.CombinedOutput(); err != nil {
			t.Fatal(err)
		}
	}
	// One round first: the runtime starts what it keeps once (the
	// poller's descriptors, signal handling).
	round()
	g0, f0 := runtime.NumGoroutine(), fds()
	for i := 0; i < 3; i++ {
		round()
	}
	// exec's context watcher ends just after Wait hands over its result;
	// on a loaded machine it may take a moment to be scheduled.
	for i := 0; i < 5000 && runtime.NumGoroutine() > g0; i++ {
		time.Sleep(time.Millisecond)
	}
	if g, f := runtime.NumGoroutine(), fds(); g > g0 || f > f0 {
		t.Errorf("goroutines %d -> %d, descriptors %d -> %d", g0, g, f0, f)
	}
}

// TestStopAll: StopAll ends a group that ignores SIGTERM (SIGKILL after
// grace) and one that ends on SIGTERM, returns both, and forgets a group
// Wait has ended.
func TestStopAll(t *testing.T) {
	ctx := context.Background()
	stubborn := Command(ctx, 0, "sh", "-c", `trap "" TERM; sleep 60 & wait; sleep 60`)
	polite := Command(ctx, 0, "sleep", "60")
	done := Command(ctx, 0, "true")
	for _, c := range []*Cmd{stubborn, polite} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the trap is set
	got := StopAll(300 * time.Millisecond)
	slices.Sort(got)
	want := []int{stubborn.PGID(), polite.PGID()}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("StopAll signalled %v, want the two started groups %v (not %d, which Wait ended)", got, want, done.PGID())
	}
	for _, c := range []*Cmd{stubborn, polite} {
		_ = c.Wait()
		// Wait reaps the leader alone: a SIGKILLed grandchild (sh's sleep)
		// dies once the kernel delivers the signal, which on a loaded
		// machine may be a moment after StopAll returns.
		n := liveInGroup(t, c.PGID())
		for i := 0; i < 500 && n != 0; i++ {
			time.Sleep(10 * time.Millisecond)
			n = liveInGroup(t, c.PGID())
		}
		if n != 0 {
			t.Errorf("group %d (%v): %d processes still running after StopAll", c.PGID(), c.Args, n)
		}
	}
	if left := StopAll(0); len(left) != 0 {
		t.Errorf("groups still recorded after Wait: %v", left)
	}
}

// liveInGroup is Running, skipping where /proc cannot be read.
func liveInGroup(t *testing.T, pgid int) int {
	t.Helper()
	n, err := Running(pgid)
	if err != nil {
		t.Skip(err)
	}
	return n
}
