package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/arpatch/arpatch/internal/testbin"
	"github.com/arpatch/arpatch/internal/testrepo"
)

// openPTY opens a pseudo-terminal: the terminal a command writes its
// stderr to (tty), and the side that reads what it wrote (pty), read to
// EOF into the returned buffer once tty is closed (wait).
func openPTY(t *testing.T) (tty *os.File, wait func() string) {
	t.Helper()
	pty, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(pty.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(pty.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(&out, pty) // ends with EIO once the terminal side is closed
		close(done)
	}()
	return tty, func() string {
		_ = tty.Close() // written to by the command only
		<-done
		_ = pty.Close() // read only
		return out.String()
	}
}

// TestProgressOnTerminal: the steps that take seconds on SGLang's tree
// show a count on stderr as git does, on a terminal only: apply's
// checkout, ab build's two checkouts, patches check over a range of
// commits, the cases of each torchrun of bench allreduce and tune
// allreduce as they report. Through a pipe or a file, stderr gets none of
// it.
func TestProgressOnTerminal(t *testing.T) {
	repo := t.TempDir()
	files := map[string]string{}
	for i := range 297 {
		files[fmt.Sprintf("python/sglang/f%03d.py", i)] = fmt.Sprintf("x = %d\n", i)
	}
	// An sgl-kernel project, for ab build to plan arm a with the fake
	// CUDA toolchain before it checks out arm b.
	for name, body := range map[string]string{
		"sgl-kernel/CMakeLists.txt":                      "project(sgl-kernel LANGUAGES CXX CUDA)\nset(F \"-gencode=arch=compute_120a,code=sm_120a\")\n",
		"sgl-kernel/pyproject.toml":                      testrepo.KernelPyproject,
		"sgl-kernel/csrc/allreduce/custom_all_reduce.cu": "// fixture\n",
	} {
		files[name] = body
	}
	fakebin, err := filepath.Abs("../../kernels/testdata/fakebin")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", fakebin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("ARPATCH_CACHE", t.TempDir())
	if err := testrepo.WriteFiles(repo, files); err != nil {
		t.Fatal(err)
	}
	first, err := testrepo.Init(repo)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := testrepo.Change(repo, "edit", map[string]string{"python/sglang/f000.py": fmt.Sprintf("x = %d\n", 1000+i)}); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("ARPATCH_STATE", t.TempDir())
	work := t.TempDir()
	// The fake ranks of harness/tune/testdata, for bench allreduce and
	// tune allreduce: each case's record comes from a shell.
	b, err := os.ReadFile("../../harness/tune/testdata/fakeranks.sh")
	if err != nil {
		t.Fatal(err)
	}
	ranks, ext := filepath.Join(work, "ranks"), filepath.Join(work, "fake.so")
	if err := testbin.Write(ranks, b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ext, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	checkingOut := regexp.MustCompile(`checking out \([0-9.]+ files/s, eta [0-9a-z.]+\) 100% .*\(300/300\)`)
	for _, c := range []struct {
		name string
		args []string
		want *regexp.Regexp
		n    int // times want is shown
	}{
		{"apply", []string{"apply", "--recipe", "baseline", "--repo", repo, "--commit", "HEAD", "--src", filepath.Join(work, "one")}, checkingOut, 1},
		{"ab build", []string{"ab", "build", "--a", "baseline", "--b", "pcie", "--repo", repo, "--commit", "HEAD", "--dir", filepath.Join(work, "ab"), "--arch", "120a", "--plan"}, checkingOut, 2},
		{"patches check", []string{"patches", "check", "--repo", repo, "--commit", first + "~0..HEAD", "--summary"}, regexp.MustCompile(`checking \([0-9.]+ commits/s, eta [0-9a-z.]+\) 100% .*\(2/2\)`), 1},
		{"bench allreduce", []string{"bench", "allreduce", "--world-size", "2", "--ext", ext, "--python", ranks, "--impl", "nccl,custom-1stage", "--branches", "pcie",
			"--modes", "eager", "--sizes", "4K,8K", "--nccl-variants", "none", "--json", filepath.Join(work, "ar.json")}, // 2 implementations x 3 sizes (the verify shape's 40K is always measured)
			regexp.MustCompile(`measuring \([0-9.]+ cases/s, eta [0-9a-z.]+\) 100% .*\(6/6\)`), 1},
		// The measurement, then the checks of the built-in default and of
		// the chosen settings, one torchrun each.
		{"tune allreduce", []string{"tune", "allreduce", "--world-size", "2", "--ext", ext, "--python", ranks, "--sizes", "4K,40K", "--reps", "3", "--nccl-variants", "none",
			"--out", filepath.Join(work, "tune.env")}, regexp.MustCompile(`measuring \([0-9.]+ cases/s, eta [0-9a-z.]+\) 100% `), 3},
	} {
		tty, wait := openPTY(t)
		run(context.Background(), append([]string{"arpatch"}, c.args...), io.Discard, tty)
		got := wait()
		if n := len(c.want.FindAllString(got, -1)); n != c.n {
			t.Errorf("%s on a terminal: %d counts matching %q, want %d; stderr:\n%s", c.name, n, c.want, c.n, got)
		}
		// The same through a pipe: no count.
		var pipe bytes.Buffer
		args := append([]string(nil), c.args...)
		for i, a := range args {
			if strings.HasPrefix(a, work) {
				args[i] = a + "-piped"
			}
		}
		run(context.Background(), append([]string{"arpatch"}, args...), io.Discard, &pipe)
		if strings.Contains(pipe.String(), "checking") || strings.Contains(pipe.String(), "measuring ") {
			t.Errorf("%s through a pipe shows progress:\n%s", c.name, pipe.String())
		}
	}
}
