package torchrun

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/arpatch/arpatch/internal/testbin"
)

// Check runs CheckScript in a real Python against a made-up torch package
// on PYTHONPATH (ahead of any torch the machine has): one that imports,
// one without torch.distributed.run, one whose import fails as a torch
// built for another CUDA does (any other python on PATH reads the same
// torch, so none is offered); then an interpreter that is not there, one
// that is not Python and /bin/false, with no python on PATH and then
// with one that imports torch, which the remedy names.
func TestCheck(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on PATH")
	}
	pkg := func(files map[string]string) []string {
		dir := t.TempDir()
		for name, body := range files {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return append(os.Environ(), "PYTHONPATH="+dir)
	}
	ctx := context.Background()
	good := pkg(map[string]string{"torch/__init__.py": "__version__ = '2.11.0+cu130'\n", "torch/distributed/__init__.py": "", "torch/distributed/run.py": ""})
	if v, err := Check(ctx, py, good); err != nil || v != "2.11.0+cu130" {
		t.Errorf("torch that imports: %q, %v", v, err)
	}
	for _, c := range []struct {
		name  string
		env   []string
		cause string
	}{
		{"no torchrun", pkg(map[string]string{"torch/__init__.py": "__version__ = '2.11.0'\n", "torch/distributed/__init__.py": ""}),
			"ModuleNotFoundError: No module named 'torch.distributed.run'"},
		{"a torch that fails to load", pkg(map[string]string{"torch/__init__.py": "raise ImportError('libcudart.so.13: cannot open shared object file: No such file or directory')\n"}),
			"ImportError: libcudart.so.13: cannot open shared object file: No such file or directory"},
	} {
		_, err := Check(ctx, py, c.env)
		var ee *EnvError
		if !errors.As(err, &ee) || ee.Cause != c.cause || !ee.Ran {
			t.Errorf("%s: %v, want the cause %q", c.name, err, c.cause)
			continue
		}
		want := "--python " + py + " cannot start the ranks: " + c.cause + "; install torch for it (`" + py + " -m pip install torch`) or pass --python with the interpreter of your serving environment"
		if err.Error() != want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, err, want)
		}
	}
	// A torch without a CUDA GPU (CPU-only): named once, up front, with
	// its own remedy, and no other interpreter offered.
	cpuOnly := pkg(map[string]string{"torch/__init__.py": "__version__ = '2.11.0+cpu'\nfrom . import cuda\n", "torch/cuda.py": "def device_count():\n    return 0\n",
		"torch/distributed/__init__.py": "", "torch/distributed/run.py": ""})
	if _, err := Check(ctx, py, cpuOnly); err == nil || err.Error() != "--python "+py+" cannot start the ranks on a GPU: torch 2.11.0+cpu sees no CUDA GPU (torch.cuda.device_count() is 0): a CPU-only build of torch, no NVIDIA driver, or CUDA_VISIBLE_DEVICES hiding every GPU; install a CUDA build of torch for it (https://pytorch.org/get-started/locally/) and run where `nvidia-smi -L` lists the GPUs" {
		t.Errorf("a CPU-only torch: %v", err)
	}
	// Not Python: pip through it cannot help, so the remedy is another
	// interpreter only, and names one on PATH that works when there is
	// one (PATH here is a directory of the test's own, then none).
	bin := t.TempDir()
	sh := filepath.Join(bin, "notpython")
	if err := testbin.Write(sh, []byte("#!/bin/sh\necho 'not python' >&2\nexit 2\n")); err != nil {
		t.Fatal(err)
	}
	noPy := []string{"PATH=" + bin}
	if _, err := Check(ctx, sh, noPy); err == nil || err.Error() != "--python "+sh+" cannot start the ranks: it is not a Python interpreter (it printed \"not python\", exit status 2); pass --python with the interpreter of your serving environment (the one with torch; no python3 or python on PATH imports it)" {
		t.Errorf("not Python: %v", err)
	}
	if _, err := Check(ctx, "/bin/false", noPy); err == nil || err.Error() != "--python /bin/false cannot start the ranks: it is not a Python interpreter (it printed nothing, exit status 1); pass --python with the interpreter of your serving environment (the one with torch; no python3 or python on PATH imports it)" {
		t.Errorf("/bin/false: %v", err)
	}
	_, err = Check(ctx, "no-such-python-arpatch", noPy)
	if want := "--python no-such-python-arpatch cannot start the ranks: not found on PATH; pass --python with the interpreter of your serving environment (the one with torch; no python3 or python on PATH imports it)"; err == nil || err.Error() != want {
		t.Errorf("a missing interpreter: %v", err)
	}
	withTorch := filepath.Join(bin, "python3")
	if err := testbin.Write(withTorch, []byte("#!/bin/sh\ncase \"$2\" in \"# arpatch: can this interpreter\"*) echo 2.11.0+cu130; exit 0;; esac\nexit 2\n")); err != nil {
		t.Fatal(err)
	}
	_, err = Check(ctx, "/bin/false", noPy)
	if want := "--python /bin/false cannot start the ranks: it is not a Python interpreter (it printed nothing, exit status 1); pass `--python " + withTorch + "` (it imports torch 2.11.0+cu130), or the interpreter of your serving environment"; err == nil || err.Error() != want {
		t.Errorf("/bin/false with a python3 on PATH that imports torch:\n got %v\nwant %s", err, want)
	}
	// The interpreter named is not offered as the other.
	if other, _ := Another(ctx, "python3", noPy); other != "" {
		t.Errorf("another than python3 itself: %q, want none", other)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Check(cctx, py, good); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context: %v", err)
	}
}
