// Package demo is arpatch's nightly demo (go run ./nightly/demo): it runs
// the nightly end to end on this machine, with no GPU and no network: a
// fixture upstream repository it writes, a one-patch series, the fake CUDA
// toolchain of kernels/testdata/fakebin for the builds, and SGLang-protocol
// servers it serves itself for the bench. It seeds a history with five
// ordinary nights, then runs tonight with arm B's server decoding 10%
// slower (9.1% fewer tok/s measured than its history), prints the table, the verdict and
// the exit code, writes the CI files and the plot, and returns the
// nightly's exit code (1). nightly/demo is its command; it and nightly's
// tests run it the same way (RunVirtual): on an in-memory network in a
// testing/synctest bubble, on a fake clock, so that every figure it
// prints is the same on every run, however loaded the machine.
package demo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/arpatch/arpatch/harness/sglangtest"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/testrepo"
	"github.com/arpatch/arpatch/kernels"
	"github.com/arpatch/arpatch/nightly"
	"github.com/arpatch/arpatch/nightly/internal/fixture"
)

const patch = `Description: fixture: launch a kernel on PCIe-only GPUs above world size 2
Author: arpatch demo
Upstream-Status: Inappropriate [demo fixture]
Applies-To: the demo's fixture tree

` + fixture.Dispatch

// RunVirtual is Run as the command and the tests run it: inside a
// testing/synctest bubble of t, against servers on an in-memory network
// (sglangtest.Network), so that the servers' pacing and the bench's
// clock are the bubble's fake clock and the measured figures (tok/s,
// TTFT, p-values, the verdict) are exact: the same on every run,
// whatever else the machine runs. (Over loopback sockets and the wall
// clock, a loaded machine's scheduling delays were measured as the
// servers' speed: the planted drop came out as low as 4.9%.)
// It returns Run's exit code.
func RunVirtual(t *testing.T, args []string, stdout, stderr io.Writer) int {
	code := 2
	synctest.Test(t, func(*testing.T) {
		n := sglangtest.NewNetwork()
		defer n.Close()
		code = Run(args, stdout, stderr, n.Serve, n.HTTP())
	})
	return code
}

// Run is the demo, from its arguments ([-dir DIR], default nightly-demo,
// relative to the working directory, which must be the arpatch repository
// root) to its exit code: the nightly's (1, a regression on the last
// night), 2 for a refusal or a failure of its own, said on stderr. serve
// starts an SGLang-protocol server and returns its base URL and stop
// function; client, when not nil, is the bench's HTTP client for those
// URLs. Its figures are exact only on a fake clock (RunVirtual).
func Run(args []string, stdout, stderr io.Writer, serve func(http.Handler) (url string, stop func()), client *http.Client) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "nightly-demo", "directory for the demo's files (recreated)")
	if err := fs.Parse(args); err != nil {
		return 2 // the flag package said why
	}
	code, err := demo(*dir, stdout, serve, client)
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 2
	}
	return code
}

// demo writes its world under dir, runs the six nights and writes the
// reports; it returns the last night's exit code, or the error that
// stopped it.
func demo(dir string, stdout io.Writer, serve func(http.Handler) (string, func()), client *http.Client) (int, error) {
	abs, cfg, env, err := setUp(dir)
	if err != nil {
		return 0, err
	}
	rep, err := nights(cfg, env, stdout, serve, client)
	if err != nil {
		return 0, err
	}
	fmt.Fprintln(stdout)
	nightly.WriteTable(stdout, rep)
	if err := nightly.WriteOutputs(rep, cfg, nil); err != nil {
		return 0, err
	}
	if err := plots(abs); err != nil {
		return 0, err
	}
	_, err = fmt.Fprintf(stdout, "\nexit code %d; reports in %s: %s\n", rep.ExitCode, filepath.Join(dir, "out"), strings.Join(reports, ", "))
	return rep.ExitCode, err
}

// setUp makes the demo's directory (Prepare) with its upstream, series,
// recipes and nightly.toml, and returns its absolute path, the config and
// the environment the nights build in (the fake toolchain of
// kernels/testdata/fakebin first on PATH).
func setUp(dir string) (string, *nightly.Config, []string, error) {
	fake, err := filepath.Abs("kernels/testdata/fakebin")
	if _, serr := os.Stat(fake); err != nil || serr != nil {
		return "", nil, nil, errors.New("run the demo from the arpatch repository root (kernels/testdata/fakebin not found)")
	}
	abs, err := Prepare(dir)
	if err != nil {
		return "", nil, nil, err
	}
	_, commit, err := fixture.MakeUpstream(filepath.Join(abs, "upstream"))
	if err != nil {
		return "", nil, nil, err
	}
	if err := testrepo.WriteFiles(abs, map[string]string{
		"series/demo/series.toml":         "name = \"demo\"\nfamily = \"demo\"\ntested_on = [\"" + commit + "\"]\n\n[[patch]]\nfile = \"0001-dispatch.patch\"\nsha256 = \"" + digest.SHA256Hex([]byte(patch)) + "\"\n",
		"series/demo/0001-dispatch.patch": patch,
		"baseline.toml":                   "name = \"baseline\"\n[upstream]\ncommit = \"" + commit + "\"\n",
		"pcie.toml":                       "name = \"pcie\"\nseries = \"demo\"\n[upstream]\ncommit = \"" + commit + "\"\n[env]\nSGLANG_FORCE_CUSTOM_AR_PCIE = \"1\"\n",
		"nightly.toml":                    config,
	}); err != nil {
		return "", nil, nil, err
	}
	cfg, err := nightly.LoadConfig(filepath.Join(abs, "nightly.toml"))
	if err != nil {
		return "", nil, nil, err
	}
	env := []string{"PATH=" + fake + ":/usr/bin:/bin", "HOME=" + abs, kernels.BuildRootEnv + "=" + filepath.Join(abs, "broot")}
	return abs, cfg, env, nil
}

// config is the demo's nightly.toml.
const config = `[upstream]
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
`

// nights runs the demo's six nights, one a day from 2026-11-23, each
// against two in-test servers (serve) at that night's decode rates, and
// prints each night's exit and verdict; it returns the last night's
// report.
func nights(cfg *nightly.Config, env []string, stdout io.Writer, serve func(http.Handler) (string, func()), client *http.Client) (*nightly.Report, error) {
	start := time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC)
	// Decode rates of the two arms' servers, night by night; tonight (the
	// last) the patched arm's server decodes 10% slower, which the bench
	// measures as 9.1% fewer tok/s than the history's (the time to first
	// token stays).
	rates := []struct{ a, b float64 }{{1000, 1600}, {1010, 1590}, {990, 1610}, {1000, 1605}, {1005, 1595}, {1000, 1440}}
	var rep *nightly.Report
	for i, n := range rates {
		urlA, stopA := serve(sglangtest.New(sglangtest.Config{TokPerSec: n.a, TTFT: 2 * time.Millisecond, TokensPerChunk: 2, AcceptLength: 1.9}))
		urlB, stopB := serve(sglangtest.New(sglangtest.Config{TokPerSec: n.b, TTFT: 2 * time.Millisecond, TokensPerChunk: 3, AcceptLength: 2.8}))
		cfg.Bench.URLA, cfg.Bench.URLB = urlA, urlB
		night := start.Add(time.Duration(i) * 24 * time.Hour)
		var err error
		rep, err = nightly.Run(context.Background(), nightly.Options{Config: cfg, Env: env, Launcher: []string{"/bin/true"}, Version: "demo",
			Now: func() time.Time { return night }, Probe: func(context.Context) nightly.Environment {
				return nightly.Environment{GPUModel: "NVIDIA RTX PRO 6000 Blackwell (demo)", GPUCount: 8}
			}, HTTP: client})
		stopA()
		stopB()
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(stdout, "night %d (%s): exit %d, %s\n", i+1, night.Format("2006-01-02"), rep.ExitCode, rep.Verdict)
	}
	return rep, nil
}

// plots draws tok/s over the nights from the demo's history, as
// out/tok_s.svg and out/tok_s.png.
func plots(abs string) error {
	store, err := history.Open(filepath.Join(abs, "history.db"))
	if err != nil {
		return err
	}
	for _, ext := range []string{"svg", "png"} {
		if err := store.Plot(stats.TokS, filepath.Join(abs, "out", "tok_s."+ext), history.Series{}); err != nil {
			_ = store.Close() // the plot's error is the one to report
			return err
		}
	}
	return store.Close()
}

// Marker is the file that marks a directory the demo made, which a later
// run may remove.
const Marker = ".arpatch-nightly-demo"

// Prepare makes dir empty but for the demo's Marker and returns its
// absolute path. The demo recreates its directory, and only its own: a
// directory with other files and no marker of an earlier demo is refused
// (the error names -dir) and left as it was.
func Prepare(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if ents, err := os.ReadDir(abs); err == nil && len(ents) > 0 {
		if _, err := os.Stat(filepath.Join(abs, Marker)); err != nil {
			return "", fmt.Errorf("-dir %s is not empty and was not made by this demo; name a new directory", dir)
		}
	}
	if err := os.RemoveAll(abs); err != nil {
		return "", err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", err
	}
	return abs, os.WriteFile(filepath.Join(abs, Marker), []byte("made by go run ./nightly/demo; removed by the next run\n"), 0o644)
}

// reports are the files the demo leaves in its out directory (the
// github-action-benchmark pair as one name).
var reports = []string{"nightly.json", "summary.md", "github-benchmark-{bigger,smaller}.json", "bencher.json", "junit.xml", "tok_s.svg", "tok_s.png"}
