package gaterule

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// launchOnly is a launch as the judge compiles one, against the judge's
// own stub runtime (cxx/cuda_runtime.h), which declares the launch API
// clang calls when it knows no CUDA version (cudaConfigureCall).
const launchOnly = `#include "cuda_runtime.h"
__global__ void kernel(int) {}
void launch() { kernel<<<1, 32>>>(0); }
`

// fakeToolkit makes a CUDA 13.0 toolkit as clang looks for one: ptxas in
// bin/ (found on PATH), include/cuda.h with its version, and lib64/ and
// nvvm/libdevice/, without which clang does not count it as one.
func fakeToolkit(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "cuda-13.0")
	for _, d := range []string{"bin", "include", "lib64", "nvvm/libdevice"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"bin/ptxas":                      "#!/bin/sh\necho 'ptxas: NVIDIA (R) Ptx optimizing assembler, Cuda compilation tools, release 13.0'\n",
		"include/cuda.h":                 "#define CUDA_VERSION 13000\n",
		"nvvm/libdevice/libdevice.10.bc": "",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestJudgeIgnoresAnInstalledCUDA: on a GPU host clang finds the CUDA
// toolkit (here through ptxas on PATH) and lowers <<<...>>> for its
// version, to __cudaPushCallConfiguration, which the stub runtime does
// not declare; the judge then refused the shipped series on every such
// host. With the judge's flags the toolkit is not looked for, and the
// launch lowers as it does on a host without one.
func TestJudgeIgnoresAnInstalledCUDA(t *testing.T) {
	cc, err := Clang()
	if err != nil {
		t.Skipf("no clang: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "launch.cu")
	stub, err := cxxFS.ReadFile("cxx/cuda_runtime.h")
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{src: []byte(launchOnly), filepath.Join(dir, "cuda_runtime.h"): stub} {
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tk := fakeToolkit(t)
	t.Setenv("PATH", filepath.Join(tk, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))

	compile := func(flags []string) (string, error) {
		args := append(append([]string{}, flags...), "-I", dir, "-v", "-fsyntax-only", src)
		out, err := exec.Command(cc, args...).CombinedOutput()
		return string(out), err
	}
	// The flags without the fix: clang must see the toolkit, or this host's
	// clang does not look for one the way the test supposes.
	var without []string
	for _, f := range cxxFlags() {
		if !strings.HasPrefix(f, "--cuda-path=") {
			without = append(without, f)
		}
	}
	out, err := compile(without)
	if !strings.Contains(out, "Found CUDA installation: "+tk) {
		t.Skipf("this clang does not detect a toolkit through ptxas on PATH:\n%s", out)
	}
	if err == nil || !strings.Contains(out, "__cudaPushCallConfiguration") {
		t.Fatalf("without --cuda-path, a found CUDA 13 should lower the launch to __cudaPushCallConfiguration and fail; err=%v\n%s", err, out)
	}

	out, err = compile(cxxFlags())
	if err != nil {
		t.Fatalf("the judge's flags with a CUDA toolkit installed: %v\n%s", err, out)
	}
	if strings.Contains(out, "Found CUDA installation") {
		t.Errorf("the judge's flags found a toolkit:\n%s", out)
	}
}
