// Command demo runs arpatch's nightly end to end on this machine, with no
// GPU and no network: a fixture upstream repository it writes, a one-patch
// series, the fake CUDA toolchain of kernels/testdata/fakebin for the
// builds, and in-process SGLang-protocol servers for the bench. It seeds a
// history with five ordinary nights, then runs tonight with arm B's server
// decoding 10% slower (about 8% fewer tok/s measured), prints the table, the verdict and the exit code, writes the
// CI files and the plot, and exits with the nightly's exit code (1).
//
// Run it from the repository root:
//
//	go run ./nightly/demo [-dir nightly-demo]
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/arpatch/arpatch/harness/sglangtest"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/testrepo"
	"github.com/arpatch/arpatch/kernels"
	"github.com/arpatch/arpatch/nightly"
)

const cu = "// fixture translation unit\nif (ws == 2) {\n  one();\n} else if (full_nvlink_) {\n  pick();\n}\n"

const patch = `Description: fixture: launch a kernel on PCIe-only GPUs above world size 2
Author: arpatch demo
Upstream-Status: Inappropriate [demo fixture]
Applies-To: the demo's fixture tree

--- a/sgl-kernel/csrc/allreduce/custom_all_reduce.cu
+++ b/sgl-kernel/csrc/allreduce/custom_all_reduce.cu
@@ -2,5 +2,5 @@
 if (ws == 2) {
   one();
-} else if (full_nvlink_) {
+} else {
   pick();
 }
`

func main() {
	dir := flag.String("dir", "nightly-demo", "directory for the demo's files (recreated)")
	flag.Parse()
	fake, err := filepath.Abs("kernels/testdata/fakebin")
	if _, serr := os.Stat(fake); err != nil || serr != nil {
		fail("run the demo from the arpatch repository root (kernels/testdata/fakebin not found)")
	}
	abs, _ := filepath.Abs(*dir)
	// The demo recreates its directory, and only its own: a directory
	// with other files and no marker of an earlier demo is refused.
	const marker = ".arpatch-nightly-demo"
	if ents, err := os.ReadDir(abs); err == nil && len(ents) > 0 {
		if _, err := os.Stat(filepath.Join(abs, marker)); err != nil {
			fail(fmt.Sprintf("-dir %s is not empty and was not made by this demo; name a new directory", *dir))
		}
	}
	must(os.RemoveAll(abs))
	must(os.MkdirAll(abs, 0o755))
	must(os.WriteFile(filepath.Join(abs, marker), []byte("made by go run ./nightly/demo; removed by the next run\n"), 0o644))
	up := filepath.Join(abs, "upstream")
	must(testrepo.WriteFiles(up, map[string]string{
		"sgl-kernel/CMakeLists.txt":                      "project(sgl-kernel)\nset(F \"-gencode=arch=compute_120a,code=sm_120a\")\n",
		"sgl-kernel/csrc/allreduce/custom_all_reduce.cu": cu,
		"sgl-kernel/include/utils.h":                     "// header\n",
		"sgl-kernel/pyproject.toml":                      testrepo.KernelPyproject,
	}))
	commit, err := testrepo.Init(up)
	must(err)
	must(testrepo.WriteFiles(abs, map[string]string{
		"series/demo/series.toml":         "name = \"demo\"\nfamily = \"demo\"\ntested_on = [\"" + commit + "\"]\n\n[[patch]]\nfile = \"0001-dispatch.patch\"\nsha256 = \"" + digest.SHA256Hex([]byte(patch)) + "\"\n",
		"series/demo/0001-dispatch.patch": patch,
		"baseline.toml":                   "name = \"baseline\"\n[upstream]\ncommit = \"" + commit + "\"\n",
		"pcie.toml":                       "name = \"pcie\"\nseries = \"demo\"\n[upstream]\ncommit = \"" + commit + "\"\n[env]\nSGLANG_FORCE_CUSTOM_AR_PCIE = \"1\"\n",
		"nightly.toml": `[upstream]
repo = "upstream"
ref = "master"
[arms]
a_file = "baseline.toml"
b_file = "pcie.toml"
patches_dir = "series"
[build]
archs = ["120a"]
cache_dir = "cache"
[bench]
trials = 5
num_prompts = 8
max_new_tokens = 32
warmup = 1
[history]
path = "history.db"
hardware_key = "8x RTX PRO 6000 (demo)"
[outputs]
dir = "out"
github_benchmark = "out/github-benchmark"
bencher = "out/bencher.json"
junit = "out/junit.xml"
plot = "out/tok_s.svg"
`,
	}))
	cfg, err := nightly.LoadConfig(filepath.Join(abs, "nightly.toml"))
	must(err)
	env := []string{"PATH=" + fake + ":/usr/bin:/bin", "HOME=" + abs, kernels.BuildRootEnv + "=" + filepath.Join(abs, "broot")}
	start := time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC)
	// Decode rates of the two arms' servers, night by night; tonight (the
	// last) the patched arm's server decodes 10% slower, which the bench
	// measures as about 8% fewer tok/s (the time to first token stays).
	nights := []struct{ a, b float64 }{{1000, 1600}, {1010, 1590}, {990, 1610}, {1000, 1605}, {1005, 1595}, {1000, 1440}}
	var rep *nightly.Report
	for i, n := range nights {
		sa := httptest.NewServer(sglangtest.New(sglangtest.Config{TokPerSec: n.a, TTFT: 2 * time.Millisecond, TokensPerChunk: 2, AcceptLength: 1.9}))
		sb := httptest.NewServer(sglangtest.New(sglangtest.Config{TokPerSec: n.b, TTFT: 2 * time.Millisecond, TokensPerChunk: 3, AcceptLength: 2.8}))
		cfg.Bench.URLA, cfg.Bench.URLB = sa.URL, sb.URL
		night := start.Add(time.Duration(i) * 24 * time.Hour)
		rep, err = nightly.Run(context.Background(), nightly.Options{Config: cfg, Env: env, Launcher: []string{"/bin/true"}, Version: "demo",
			Now: func() time.Time { return night }, Probe: func(context.Context) nightly.Environment {
				return nightly.Environment{GPUModel: "NVIDIA RTX PRO 6000 Blackwell (demo)", GPUCount: 8}
			}})
		sa.Close()
		sb.Close()
		must(err)
		fmt.Printf("night %d (%s): exit %d, %s\n", i+1, night.Format("2006-01-02"), rep.ExitCode, rep.Verdict)
	}
	fmt.Println()
	nightly.WriteTable(os.Stdout, rep)
	must(nightly.WriteOutputs(rep, cfg, nil))
	store, err := history.Open(filepath.Join(abs, "history.db"))
	must(err)
	must(store.Plot(stats.TokS, filepath.Join(abs, "out", "tok_s.svg"), history.Series{}))
	must(store.Plot(stats.TokS, filepath.Join(abs, "out", "tok_s.png"), history.Series{}))
	must(store.Close())
	fmt.Printf("\nexit code %d; reports in %s: nightly.json, summary.md, github-benchmark-{bigger,smaller}.json, bencher.json, junit.xml, tok_s.svg, tok_s.png\n", rep.ExitCode, filepath.Join(*dir, "out"))
	os.Exit(rep.ExitCode)
}

func must(err error) {
	if err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "demo:", msg)
	os.Exit(2)
}
