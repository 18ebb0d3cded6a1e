package torchrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/arpatch/arpatch/internal/procgroup"
	"github.com/arpatch/arpatch/internal/shellq"
)

// CheckScript is what Check asks the interpreter to run: the imports every
// rank of Run makes before anything else (torch, and torch.distributed.run,
// which is torchrun), printing torch's version, or the exception as
// "ModuleNotFoundError: No module named 'torch'" and exit status 1. Its
// first line names it, so that the test fakes that stand in for an
// interpreter with torch can answer it.
const CheckScript = `# arpatch: can this interpreter start torchrun's ranks?
import sys
try:
    import torch
    import torch.distributed.run
except Exception as e:
    print("%s: %s" % (type(e).__name__, e))
    sys.exit(1)
print(torch.__version__)
`

// CheckTimeout bounds Check: a first import of torch from a cold disk
// takes tens of seconds.
const CheckTimeout = 3 * time.Minute

// EnvError is an interpreter that cannot start torchrun's ranks, with the
// cause it printed.
type EnvError struct {
	Python string // as the user named it (--python)
	Cause  string // "ModuleNotFoundError: No module named 'torch'", or why it did not run
	// Ran is whether the interpreter started (it then lacks torch, or
	// torch failed to import).
	Ran bool
}

func (e *EnvError) Error() string {
	py := shellq.Quote(e.Python)
	if !e.Ran {
		return fmt.Sprintf("--python %s cannot start the ranks: %s; pass --python with the interpreter of your serving environment (the one with torch)", py, e.Cause)
	}
	return fmt.Sprintf("--python %s cannot start the ranks: %s; install torch for it (`%s -m pip install torch`) or pass --python with the interpreter of your serving environment",
		py, e.Cause, py)
}

// Check runs CheckScript with python (env nil: this process's
// environment), once, before a command starts its ranks, so that a
// missing torch is named as Python names it, not as ranks that reported
// nothing. It returns torch's version, an *EnvError when python cannot
// run or cannot import torch, or ctx's error when ctx ended first.
func Check(ctx context.Context, python string, env []string) (string, error) {
	if env == nil {
		env = os.Environ()
	}
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
	case errors.Is(cctx.Err(), context.DeadlineExceeded):
		return "", &EnvError{Python: python, Cause: fmt.Sprintf("importing torch took longer than %s", CheckTimeout), Ran: true}
	case errors.Is(err, exec.ErrNotFound):
		return "", &EnvError{Python: python, Cause: "not found on PATH"}
	case err != nil && cmd.ProcessState == nil:
		return "", &EnvError{Python: python, Cause: err.Error()}
	case err != nil && text == "":
		return "", &EnvError{Python: python, Cause: err.Error(), Ran: true}
	case err != nil:
		return "", &EnvError{Python: python, Cause: last, Ran: true}
	case last == "":
		return "", &EnvError{Python: python, Cause: "it printed no torch version", Ran: true}
	}
	return last, nil
}
