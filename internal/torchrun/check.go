package torchrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/arpatch/arpatch/internal/lazyre"
	"github.com/arpatch/arpatch/internal/procgroup"
	"github.com/arpatch/arpatch/internal/shellq"
)

// CheckScript is what Check asks the interpreter to run: the imports every
// rank of Run makes before anything else (torch, and torch.distributed.run,
// which is torchrun), printing torch's version, or the exception as
// "ModuleNotFoundError: No module named 'torch'" and exit status 1; a
// torch that sees no CUDA GPU (torch.cuda.device_count() 0: a CPU-only
// build, no driver, or CUDA_VISIBLE_DEVICES hiding them all) prints
// noGPU and its version, exit status 3, where every rank would fail at
// torch.cuda.set_device. Its first line names it, so that the test fakes
// that stand in for an interpreter with torch can answer it.
const CheckScript = `# arpatch: can this interpreter start torchrun's ranks?
import sys
try:
    import torch
    import torch.distributed.run
except Exception as e:
    print("%s: %s" % (type(e).__name__, e))
    sys.exit(1)
cuda = getattr(torch, "cuda", None)
if cuda is not None and hasattr(cuda, "device_count") and cuda.device_count() == 0:
    print("` + noGPU + ` %s" % torch.__version__)
    sys.exit(3)
print(torch.__version__)
`

// noGPU starts CheckScript's line for a torch that sees no CUDA GPU.
const noGPU = "arpatch-no-cuda-gpu: torch"

// CheckTimeout bounds Check: a first import of torch from a cold disk
// takes tens of seconds.
const CheckTimeout = 3 * time.Minute

// EnvError is an interpreter that cannot start torchrun's ranks, with the
// cause it printed.
type EnvError struct {
	Python string // as the user named it (--python)
	Cause  string // "ModuleNotFoundError: No module named 'torch'", or why it did not run
	// Ran is whether the interpreter ran CheckScript as Python does (it
	// then lacks torch, or torch failed to import, and pip can install
	// it); false for one that did not start, or that is not Python.
	Ran bool
	// Other is an interpreter on PATH that can start the ranks (python3
	// or python), whose torch is OtherTorch; "" when none can.
	Other, OtherTorch string
	// NoGPU: torch imports, but sees no CUDA GPU (Cause says which
	// torch); another interpreter of the same host would not see one
	// either.
	NoGPU bool
}

func (e *EnvError) Error() string {
	py := shellq.Quote(e.Python)
	if e.NoGPU {
		return fmt.Sprintf("--python %s cannot start the ranks on a GPU: %s (torch.cuda.device_count() is 0): a CPU-only build of torch, no NVIDIA driver, or CUDA_VISIBLE_DEVICES hiding every GPU; install a CUDA build of torch for it (https://pytorch.org/get-started/locally/) and run where `nvidia-smi -L` lists the GPUs",
			py, e.Cause)
	}
	other := "pass --python with the interpreter of your serving environment"
	if e.Other != "" {
		other = fmt.Sprintf("pass `--python %s` (it imports torch %s), or the interpreter of your serving environment", shellq.Quote(e.Other), e.OtherTorch)
	}
	if !e.Ran {
		// pip install through it cannot help: another interpreter can.
		if e.Other == "" {
			other += " (the one with torch; no python3 or python on PATH imports it)"
		}
		return fmt.Sprintf("--python %s cannot start the ranks: %s; %s", py, e.Cause, other)
	}
	return fmt.Sprintf("--python %s cannot start the ranks: %s; install torch for it (`%s -m pip install torch`) or %s",
		py, e.Cause, py, other)
}

// pyException is the line CheckScript prints for the exception it caught
// ("ModuleNotFoundError: No module named 'torch'"), and Python itself
// for one it did not ("SyntaxError: ..."): a name, a colon, the message.
var pyException = lazyre.New(`^[A-Za-z_][A-Za-z0-9_.]*(Error|Exception|Warning|Exit|Interrupt): `)

// pythonError is whether line is Python's report of an exception: the
// interpreter ran as Python, so pip can install into it.
func pythonError(line string) bool { return pyException().MatchString(line) }

// Check runs CheckScript with python (env nil: this process's
// environment), once, before a command starts its ranks, so that a
// missing torch is named as Python names it, not as ranks that reported
// nothing. It returns torch's version, an *EnvError when python cannot
// run or cannot import torch, or ctx's error when ctx ended first.
func Check(ctx context.Context, python string, env []string) (string, error) {
	if env == nil {
		env = os.Environ()
	}
	v, err := check(ctx, python, env)
	var ee *EnvError
	if errors.As(err, &ee) && !ee.NoGPU {
		ee.Other, ee.OtherTorch = Another(ctx, python, env)
	}
	return v, err
}

// Another is the first of python3 and python on env's PATH, other than
// python, that can start the ranks (check), with its torch's version: the
// --python a refusal can name as one that works. "" when none does.
func Another(ctx context.Context, python string, env []string) (string, string) {
	given := lookPathIn(python, env)
	for _, name := range []string{"python3", "python"} {
		p := lookPathIn(name, env)
		if p == "" || p == given {
			continue
		}
		if v, err := check(ctx, p, env); err == nil {
			return p, v
		}
	}
	return "", ""
}

// lookPathIn is prog's path on env's PATH (a path with a slash as it
// is), "" when there is none that can be run.
func lookPathIn(prog string, env []string) string {
	if strings.ContainsRune(prog, '/') {
		return prog
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, prog)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// check is Check of python alone.
func check(ctx context.Context, python string, env []string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	cmd := procgroup.Command(cctx, 5*time.Second, python, "-c", CheckScript)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	text := strings.TrimSpace(out.String())
	last := text
	if i := strings.LastIndexByte(text, '\n'); i >= 0 {
		last = text[i+1:]
	}
	switch {
	case strings.HasPrefix(last, noGPU+" "):
		return "", &EnvError{Python: python, Cause: "torch " + strings.TrimPrefix(last, noGPU+" ") + " sees no CUDA GPU", Ran: true, NoGPU: true}
	case errors.Is(cctx.Err(), context.DeadlineExceeded):
		return "", &EnvError{Python: python, Cause: fmt.Sprintf("importing torch took longer than %s", CheckTimeout), Ran: true}
	case errors.Is(err, exec.ErrNotFound):
		return "", &EnvError{Python: python, Cause: "not found on PATH"}
	case err != nil && cmd.ProcessState == nil:
		return "", &EnvError{Python: python, Cause: err.Error()}
	case err != nil && text == "":
		return "", &EnvError{Python: python, Cause: fmt.Sprintf("it is not a Python interpreter (it printed nothing, %v)", err)}
	case err != nil && !pythonError(last):
		return "", &EnvError{Python: python, Cause: fmt.Sprintf("it is not a Python interpreter (it printed %q, %v)", last, err)}
	case err != nil:
		return "", &EnvError{Python: python, Cause: last, Ran: true}
	case last == "":
		return "", &EnvError{Python: python, Cause: "it printed no torch version", Ran: true}
	}
	return last, nil
}
