package nightly

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/arpatch/arpatch/harness/sglangtest"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/checkout"
	"github.com/arpatch/arpatch/internal/errwriter/errwritertest"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/pgtest"
	"github.com/arpatch/arpatch/internal/testbin"
	"github.com/arpatch/arpatch/internal/testrepo"
	"github.com/arpatch/arpatch/kernels"
	"github.com/arpatch/arpatch/nightly/internal/fixture"
	"github.com/arpatch/arpatch/patches"
)

const fixturePatch = `Description: fixture dispatch
Author: arpatch tests
Upstream-Status: Inappropriate [test fixture]
Applies-To: fixture

` + fixture.Dispatch

// world is a nightly fixture: an upstream repository, a series, two
// recipes, a fake toolchain and two in-test SGLang servers on an in-memory
// network. A test that benches runs in a synctest bubble
// (synctest.Test), where the servers' token pacing and every measurement
// use the bubble's fake clock: the rates measured are the rates set,
// exactly, however loaded the machine (sglangtest.Network).
type world struct {
	t       *testing.T
	dir     string
	up      string
	commit  string
	cfg     *Config
	env     []string
	net     *sglangtest.Network
	servers map[string]server
	// host is what the environment probe reports (default: 8x Test GPU).
	host Environment
	// own is the world's own upstream (newWorldOwn), nil for the shared
	// one.
	own *testrepo.History
}

// commitUpstream commits files (content "" removes one) to the world's
// own upstream and returns the commit.
func (w *world) commitUpstream(msg string, files map[string]string) string {
	w.t.Helper()
	c := w.own.MustChange(w.t, msg, files)
	w.own.MustWrite(w.t)
	return c
}

// upstreams holds the fixture upstream that the worlds of newWorld share
// read-only; TestMain closes it.
var upstreams testrepo.Shared

func TestMain(m *testing.M) {
	code := upstreams.Run(m)
	pgtest.Stop() // the PostgreSQL server of the fleet tests, if one was started
	os.Exit(code)
}

// arms returns the directory holding the arms a world at commit benches,
// made once per commit (upstreams.Dir) and shared read-only: series/fx
// (the fixture series, tested on commit) and the recipes a.toml (base)
// and b.toml (patched, series fx), both at commit. fixture.MakeUpstream's
// first commit is the same whatever its directory (testrepo commits with
// a fixed signature and date), so every world, with the shared upstream
// or its own, gets the same arms.
func arms(t *testing.T, commit string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(fixturePatch))
	dir, err := upstreams.Dir("arms at "+commit, func(dir string) error {
		return testrepo.WriteFiles(dir, map[string]string{
			"series/fx/series.toml":         "name = \"fx\"\nfamily = \"fx\"\ntested_on = [\"" + commit + "\"]\n\n[[patch]]\nfile = \"0001-dispatch.patch\"\nsha256 = \"" + hex.EncodeToString(sum[:]) + "\"\n",
			"series/fx/0001-dispatch.patch": fixturePatch,
			"a.toml":                        "name = \"base\"\n[upstream]\ncommit = \"" + commit + "\"\n",
			"b.toml":                        "name = \"patched\"\nseries = \"fx\"\n[upstream]\ncommit = \"" + commit + "\"\n[env]\nSGLANG_FORCE_CUSTOM_AR_PCIE = \"1\"\n",
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// newWorld is a nightly's directory: its config (nightly.toml, naming the
// shared arms and upstream by absolute path), state, history and outputs,
// with the fixture upstream that the worlds share (the test must not
// commit to it; newWorldOwn gives a test its own).
func newWorld(t *testing.T) *world { return newWorldWith(t, true) }

// newWorldOwn is newWorld with an upstream of the test's own, at
// w.dir/upstream, which it may commit to.
func newWorldOwn(t *testing.T) *world { return newWorldWith(t, false) }

func newWorldWith(t *testing.T, shared bool) *world {
	t.Helper()
	w := &world{t: t, dir: t.TempDir(), net: sglangtest.NewNetwork(), servers: map[string]server{}}
	t.Cleanup(w.net.Close)
	t.Setenv("ARPATCH_STATE", filepath.Join(w.dir, "state"))
	var err error
	if shared {
		w.up, w.commit, err = upstreams.Get("upstream", func(dir string) (string, error) {
			_, c, err := fixture.MakeUpstream(dir)
			return c, err
		})
	} else {
		w.up = filepath.Join(w.dir, "upstream")
		w.own, w.commit, err = fixture.MakeUpstream(w.up)
	}
	if err != nil {
		t.Fatal(err)
	}
	ad := arms(t, w.commit)
	config := `[upstream]
repo = "` + w.up + `"
ref = "master"
[arms]
a_file = "` + filepath.Join(ad, "a.toml") + `"
b_file = "` + filepath.Join(ad, "b.toml") + `"
patches_dir = "` + filepath.Join(ad, "series") + `"
[build]
archs = ["120a"]
cache_dir = "cache"
[bench]
trials = 5
num_prompts = 3
max_new_tokens = 48
warmup = 1
[history]
path = "history.db"
hardware_key = "test-gpu"
[outputs]
github_benchmark = "out/ghbench"
bencher = "out/bencher.json"
junit = "out/junit.xml"
plot = "out/tok_s.svg"
`
	if err := os.WriteFile(filepath.Join(w.dir, "nightly.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if w.cfg, err = LoadConfig(filepath.Join(w.dir, "nightly.toml")); err != nil {
		t.Fatal(err)
	}
	fake, _ := filepath.Abs("../kernels/testdata/fakebin")
	w.env = []string{"PATH=" + fake + ":/usr/bin:/bin", "HOME=" + w.dir, kernels.BuildRootEnv + "=" + filepath.Join(w.dir, "broot")}
	return w
}

// server is an arm's in-test server.
type server struct {
	URL  string
	stop func()
}

// serve (re)starts the arm's in-test server at a decode rate, each
// request within 1% of it (sglangtest.Config.Spread).
func (w *world) serve(arm string, rate float64) {
	if s, ok := w.servers[arm]; ok {
		s.stop()
	}
	var s server
	s.URL, s.stop = w.net.Serve(sglangtest.New(sglangtest.Config{TokPerSec: rate, TTFT: time.Millisecond, TokensPerChunk: 2, Spread: 0.01}))
	w.servers[arm] = s
	if arm == "a" {
		w.cfg.Bench.URLA = s.URL
	} else {
		w.cfg.Bench.URLB = s.URL
	}
}

func (w *world) run(ctx context.Context, skipBuild bool) *Report {
	w.t.Helper()
	host := w.host
	if host.GPUCount == 0 {
		host = Environment{GPUModel: "Test GPU", GPUCount: 8}
	}
	rep, err := Run(ctx, Options{Config: w.cfg, Env: w.env, SkipBuild: skipBuild, Launcher: []string{"/bin/true"}, Version: "test",
		Probe: func(context.Context) Environment { return host }, HTTP: w.net.HTTP()})
	if err != nil && ctx.Err() == nil {
		w.t.Fatal(err)
	}
	return rep
}

func (w *world) runSkipBench(skipBuild bool) *Report {
	w.t.Helper()
	rep, err := Run(context.Background(), Options{Config: w.cfg, Env: w.env, SkipBuild: skipBuild, SkipBench: true, Launcher: []string{"/bin/true"},
		Probe: func(context.Context) Environment { return Environment{GPUModel: "Test GPU", GPUCount: 8} }})
	if err != nil {
		w.t.Fatal(err)
	}
	return rep
}

func (w *world) check(rep *Report, name string) history.Check {
	for _, c := range rep.Checks {
		if c.Name == name {
			return c
		}
	}
	w.t.Fatalf("no check %q in %+v", name, rep.Checks)
	return history.Check{}
}

func TestNightlyEndToEnd(t *testing.T) { synctest.Test(t, testNightlyEndToEnd) }

func testNightlyEndToEnd(t *testing.T) {
	w := newWorldOwn(t) // commits to its upstream
	w.serve("a", 1000)
	w.serve("b", 1600)

	// Night 1: nothing to compare with yet; builds, benches, exit 0.
	rep := w.run(context.Background(), false)
	if rep.ExitCode != ExitOK || rep.Status != history.Complete || len(rep.Builds) != 2 || rep.Builds[0].Hit {
		t.Fatalf("night 1: exit %d status %s builds %+v errors %v", rep.ExitCode, rep.Status, rep.Builds, rep.Errors)
	}
	if r := findReg(rep, "patched", "tok_s", "history"); r.Verdict != "not enough data" {
		t.Errorf("night 1 history check: %+v", r)
	}
	if r := findReg(rep, "patched", "tok_s", "base"); r.Verdict != "improvement" || r.Pct < 30 {
		t.Errorf("B against A: %+v", r)
	}
	// Nights 2 and 3 seed the history; builds are cache hits.
	for i := 0; i < 2; i++ {
		rep = w.run(context.Background(), false)
		if rep.ExitCode != ExitOK || !rep.Builds[1].Hit {
			t.Fatalf("seeding night: exit %d builds %+v %v", rep.ExitCode, rep.Builds, rep.Errors)
		}
	}
	// No change tonight: exit 0, "no significant change".
	rep = w.run(context.Background(), true)
	if rep.ExitCode != ExitOK {
		t.Fatalf("no-change night: exit %d %s", rep.ExitCode, rep.Verdict)
	}
	if r := findReg(rep, "patched", "tok_s", "history"); r.Verdict != "no significant change" || r.RefRuns != 3 || r.RefSamples != 15 {
		t.Errorf("no-change night: %+v", r)
	}
	// A planted 10% regression of B: exit 1, named.
	w.serve("b", 1440)
	rep = w.run(context.Background(), true)
	if rep.ExitCode != ExitRegression || !strings.Contains(rep.Verdict, "patched tok_s vs history") {
		t.Fatalf("regression night: exit %d verdict %q", rep.ExitCode, rep.Verdict)
	}
	if r := findReg(rep, "patched", "tok_s", "history"); r.Verdict != "regression" || r.Pct > -6 || r.P >= 0.05 {
		t.Errorf("regression: %+v", r)
	}
	if c := w.check(rep, "patched tok_s vs history"); c.Status != "fail" {
		t.Errorf("check %+v", c)
	}
	checkOutputs(t, w, rep)
	regressed := rep.RunID

	// The regression persists: a failed night is no reference, so the
	// next night is flagged too (the window still holds the good nights).
	rep = w.run(context.Background(), true)
	if r := findReg(rep, "patched", "tok_s", "history"); rep.ExitCode != ExitRegression || r.Verdict != "regression" || r.RefRuns != 4 {
		t.Fatalf("second slow night: exit %d %+v", rep.ExitCode, r)
	}
	// Accepted as the new level, the slow nights are the reference.
	store, err := history.Open(filepath.Join(w.dir, "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Accept(regressed); err != nil {
		t.Fatal(err)
	}
	must(t, store.Close())
	rep = w.run(context.Background(), true)
	if r := findReg(rep, "patched", "tok_s", "history"); rep.ExitCode != ExitOK || r.RefRuns != 1 {
		t.Fatalf("after accept: exit %d %+v", rep.ExitCode, r)
	}

	// Another workload (fewer tokens) has no reference yet: not judged.
	w.cfg.Bench.MaxNewTokens = 24
	rep = w.run(context.Background(), true)
	if r := findReg(rep, "patched", "tok_s", "history"); rep.ExitCode != ExitOK || r.Verdict != "not enough data" || !strings.Contains(rep.Workload, "max_new_tokens=24") {
		t.Fatalf("new workload: exit %d %+v", rep.ExitCode, r)
	}
	if b, _ := json.Marshal(findReg(rep, "patched", "tok_s", "history")); strings.Contains(string(b), `"p"`) {
		t.Errorf("an unjudged check carries a p-value: %s", b)
	}
	w.cfg.Bench.MaxNewTokens = 48

	// An attached server that does not answer: infrastructure (exit 4),
	// no bench numbers, and JUnit shows the failure.
	w.cfg.Bench.URLB = "http://127.0.0.1:1"
	rep = w.run(context.Background(), true)
	if rep.ExitCode != ExitInfra || !strings.Contains(strings.Join(rep.Errors, " "), "all 3 requests of trial 1 (concurrency 1) failed") {
		t.Fatalf("unreachable server: exit %d %v", rep.ExitCode, rep.Errors)
	}
	var junit bytes.Buffer
	must(t, JUnit(&junit, rep))
	if !strings.Contains(junit.String(), "<failure") {
		t.Errorf("junit of an infrastructure failure has no failure:\n%s", junit.String())
	}
	w.serve("b", 1600)

	// The server of an arm dies (launch command fails): exit 4.
	w.serve("b", 1600)
	w.cfg.Bench.URLB = ""
	w.cfg.Bench.LaunchCmdB = "echo 'fatal: no GPU (fake)' >&2; exit 3 # --port {port}"
	rep = w.run(context.Background(), true)
	if rep.ExitCode != ExitInfra || rep.Status != history.Failed || !strings.Contains(strings.Join(rep.Errors, " "), "fatal: no GPU (fake)") {
		t.Fatalf("dead server: exit %d status %s errors %v", rep.ExitCode, rep.Status, rep.Errors)
	}
	w.cfg.Bench.LaunchCmdB = ""
	w.cfg.Bench.URLB = w.servers["b"].URL

	// Upstream moves and breaks the hunk: exit 3, with patch, file, hunk.
	w.commitUpstream("upstream refactor", map[string]string{"sgl-kernel/csrc/allreduce/custom_all_reduce.cu": strings.Replace(fixture.Cu, "full_nvlink_", "nvlink_ok_", 1)})
	rep = w.run(context.Background(), true)
	if rep.ExitCode != ExitDrift {
		t.Fatalf("drift night: exit %d %v", rep.ExitCode, rep.Errors)
	}
	c := w.check(rep, "fx at master ("+githash.Hash(rep.Head).Short()+")")
	if c.Status != "fail" || !strings.Contains(c.Detail, "patch 0001-dispatch.patch, hunk @@ -2,5 +2,5 @@ in sgl-kernel/csrc/allreduce/custom_all_reduce.cu") {
		t.Errorf("drift check: %+v", c)
	}
	if w.check(rep, "fx at pinned commit "+githash.Hash(w.commit).Short()).Status != "pass" {
		t.Error("the pinned commit should still fit")
	}
	// The port meets the same change: no clean draft, and the verdict says so.
	if len(rep.Ports) != 1 || rep.Ports[0].Clean || rep.Ports[0].Summary != "conflict: 1 conflict hunks" ||
		!strings.Contains(rep.Verdict, "; no clean draft (port of fx, conflict: 1 conflict hunks); see the conflicts with `arpatch patches port --series fx --to "+rep.Head+" --repo ") {
		t.Errorf("port hint %+v, verdict %q", rep.Ports, rep.Verdict)
	}
	if !strings.HasPrefix(c.Detail, "no clean draft (port of fx") {
		t.Errorf("the drift check's detail (the JUnit message) does not lead with the port hint: %q", c.Detail)
	}

	// History holds every run; show and export see them.
	store, err = history.Open(filepath.Join(w.dir, "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	runs, _ := store.Runs(0)
	if len(runs) != 11 {
		t.Fatalf("%d runs recorded, want 11", len(runs))
	}
	d, err := store.Show(runs[0].ID)
	if err != nil || len(d.Drift) == 0 || d.Run.Env["gpu_model"] != "Test GPU" || d.Run.UpstreamHead != rep.Head {
		t.Errorf("show: %+v %v", d, err)
	}
	rows, _ := store.Export()
	if len(rows) != 9*2*5 {
		t.Errorf("export: %d trial rows, want 90", len(rows))
	}
}

func findReg(rep *Report, arm, metric, against string) Check {
	for _, r := range rep.Regressions {
		if r.Arm == arm && r.Metric == metric && r.Against == against {
			return r
		}
	}
	return Check{Verdict: "missing"}
}

// checkOutputs validates the CI files field by field.
func checkOutputs(t *testing.T, w *world, rep *Report) {
	t.Helper()
	if err := WriteOutputs(rep, w.cfg, nil); err != nil {
		t.Fatal(err)
	}
	read := w.read
	// One entry per arm and metric, in stats.Table's order and unit:
	// higher-is-better metrics in one file, the others in the other.
	var bigger, smaller []string
	for _, m := range stats.Table {
		if m.HigherIsBetter {
			bigger = append(bigger, m.Unit)
		} else {
			smaller = append(smaller, m.Unit)
		}
	}
	if !slices.Contains(bigger, "tok/s") || !slices.Contains(smaller, "ms") {
		t.Fatalf("units: bigger %v, smaller %v", bigger, smaller)
	}
	for _, f := range []struct {
		file  string
		units []string
	}{{"out/ghbench-bigger.json", bigger}, {"out/ghbench-smaller.json", smaller}} {
		var entries []map[string]any
		if err := json.Unmarshal(read(f.file), &entries); err != nil {
			t.Fatal(err)
		}
		if len(entries) != 2*len(f.units) {
			t.Fatalf("%s: %d entries", f.file, len(entries))
		}
		for i, e := range entries {
			for _, k := range []string{"name", "unit", "value"} {
				if _, ok := e[k]; !ok {
					t.Errorf("%s[%d] lacks %s", f.file, i, k)
				}
			}
			if e["unit"] != f.units[i%len(f.units)] || !strings.Contains(e["name"].(string), "/") {
				t.Errorf("%s[%d] = %v", f.file, i, e)
			}
			if v, ok := e["value"].(float64); !ok || v <= 0 {
				t.Errorf("%s[%d] value %v", f.file, i, e["value"])
			}
		}
	}
	var bmf map[string]map[string]map[string]float64
	if err := json.Unmarshal(read("out/bencher.json"), &bmf); err != nil {
		t.Fatal(err)
	}
	tok := bmf["eagle3/patched"]["tok-s"]
	if tok["value"] <= 0 || tok["lower_value"] > tok["value"] || tok["upper_value"] < tok["value"] || len(bmf["eagle3/base"]) != len(stats.Table) {
		t.Errorf("bencher: %v", bmf)
	}
	var ju struct {
		Tests  int `xml:"tests,attr"`
		Fails  int `xml:"failures,attr"`
		Suites []struct {
			Cases []struct {
				Class   string    `xml:"classname,attr"`
				Name    string    `xml:"name,attr"`
				Failure *struct{} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(read("out/junit.xml"), &ju); err != nil {
		t.Fatal(err)
	}
	classes := map[string]int{}
	fails := 0
	for _, c := range ju.Suites[0].Cases {
		classes[c.Class]++
		if c.Failure != nil {
			fails++
		}
	}
	if ju.Tests != len(ju.Suites[0].Cases) || ju.Fails != fails || fails == 0 || classes["arpatch.drift"] == 0 || classes["arpatch.validity"] != 2 || classes["arpatch.regression"] < 3 {
		t.Errorf("junit: tests %d fails %d classes %v", ju.Tests, ju.Fails, classes)
	}
	sum := string(read(filepath.Join(w.cfg.Outputs.Dir, "summary.md")))
	for _, want := range []string{"## arpatch nightly: REGRESSION", "### Drift", "### Regression checks", "| patched | tok_s | history |"} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	var js Report
	if err := json.Unmarshal(read(filepath.Join(w.cfg.Outputs.Dir, "nightly.json")), &js); err != nil || js.Schema != ReportSchema || js.ExitCode != ExitRegression {
		t.Errorf("nightly.json: %v %+v", err, js.Schema)
	}
	if err := os.WriteFile(filepath.Join(w.dir, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestKilledRunIsIncompleteAndIgnored(t *testing.T) {
	synctest.Test(t, testKilledRunIsIncompleteAndIgnored)
}

func testKilledRunIsIncompleteAndIgnored(t *testing.T) {
	w := newWorld(t)
	w.serve("a", 1000)
	w.serve("b", 1600)
	rep := w.run(context.Background(), true)
	if rep.ExitCode != ExitOK {
		t.Fatal(rep.Verdict)
	}
	// Cancel midway (as Ctrl-C would), during the bench.
	ctx, cancel := context.WithCancel(context.Background())
	w.serve("b", 50) // slow enough to be cancelled
	go func() { time.Sleep(300 * time.Millisecond); cancel() }()
	rep = w.run(ctx, true)
	if rep.Status != history.Incomplete || rep.ExitCode != ExitInfra || rep.Verdict != "interrupted" {
		t.Fatalf("cancelled run: status %s exit %d verdict %q", rep.Status, rep.ExitCode, rep.Verdict)
	}
	var sum bytes.Buffer
	must(t, Summary(&sum, rep))
	if !strings.Contains(sum.String(), "## arpatch nightly: INTERRUPTED") {
		t.Errorf("summary of an interrupted run:\n%s", sum.String())
	}
	// A run killed outright stays "running"; the next nightly marks it.
	store, err := history.Open(filepath.Join(w.dir, "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	killed, _ := store.BeginRun(history.Run{HardwareKey: "test-gpu", PID: 999999999})
	must(t, store.Close())
	w.serve("b", 1600)
	rep = w.run(context.Background(), true)
	if rep.ExitCode != ExitOK {
		t.Fatal(rep.Verdict)
	}
	store, _ = history.Open(filepath.Join(w.dir, "history.db"))
	defer func() { _ = store.Close() }()
	runs, _ := store.Runs(0)
	status := map[int64]history.RunStatus{}
	for _, r := range runs {
		status[r.ID] = r.Status
	}
	if status[killed] != history.Incomplete || status[2] != history.Incomplete {
		t.Errorf("statuses %v", status)
	}
	// Only complete runs are references: run 1 and none of the others.
	if r := findReg(rep, "patched", "tok_s", "history"); r.RefRuns != 1 {
		t.Errorf("reference runs %d, want 1 (incomplete ones excluded): %+v", r.RefRuns, r)
	}
}

func TestSecondNightlyIsRefused(t *testing.T) {
	w := newWorld(t)
	unlock, err := history.Lock(filepath.Join(w.dir, "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	_, err = Run(context.Background(), Options{Config: w.cfg, Env: w.env, SkipBuild: true, SkipBench: true,
		Probe: func(context.Context) Environment { return Environment{} }})
	if err == nil || !strings.Contains(err.Error(), "another nightly is running") {
		t.Errorf("err = %v", err)
	}
}

func TestDriftOnlyRun(t *testing.T) {
	w := newWorld(t)
	rep, err := Run(context.Background(), Options{Config: w.cfg, Env: w.env, SkipBuild: true, SkipBench: true,
		Probe: func(context.Context) Environment { return Environment{} }})
	if err != nil || rep.ExitCode != ExitOK || len(rep.Drift) != 1 || rep.Drift[0].Verdict != "exact" || rep.HardwareKey != "test-gpu" {
		t.Fatalf("drift-only: %v %+v", err, rep)
	}
	if c := w.check(rep, "bench"); c.Status != "skip" {
		t.Errorf("bench check %+v", c)
	}
}

// A drift-only night (--skip-build --skip-bench) starts no toolchain
// probe: its Python is never run. Discover with the toolchain runs it.
func TestDriftOnlyRunsNoToolchainProbe(t *testing.T) {
	w := newWorld(t)
	marker := filepath.Join(t.TempDir(), "python-ran")
	fake := filepath.Join(t.TempDir(), "python")
	if err := testbin.Write(fake, []byte("#!/bin/sh\necho \"$@\" >> "+marker+"\nexit 1\n")); err != nil {
		t.Fatal(err)
	}
	w.cfg.Build.Python = fake
	rep, err := Run(context.Background(), Options{Config: w.cfg, Env: w.env, SkipBuild: true, SkipBench: true})
	if err != nil || rep.ExitCode != ExitOK {
		t.Fatalf("drift-only: %v %+v", err, rep)
	}
	if b, err := os.ReadFile(marker); err == nil {
		t.Errorf("the drift-only night ran the toolchain probe's python: %s", b)
	}
	Discover(context.Background(), fake, true)
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("Discover with the toolchain did not run python (is the fake wired?): %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ toml, want string }{
		{"[upstream]\nrepo = \"x\"\nrefs = \"main\"\n", `nightly.toml:3: unknown key "upstream.refs"`},
		{"[arms]\ncommit = \"latest\"\n", `nightly.toml:2: arms.commit: "latest": use "pinned" or "head"`},
		{"[regression]\nmetrics = { tok_s = 3.0, speed = 2.0 }\n", `unknown metric "speed"`},
		{"[regression]\nalpha = 1.5\n", "regression.alpha"},
		{"[bench]\nready_timeout = \"soon\"\n", "bench.ready_timeout"},
		{"[bench]\nready_timeout = \"-5m\"\n", `nightly.toml:2: bench.ready_timeout: -5m0s: use 1s to 48h0m0s, e.g. "20m"`},
		{"[bench]\nready_timeout = \"100000h\"\n", `nightly.toml:2: bench.ready_timeout: 100000h0m0s: use 1s to 48h0m0s`},
		{"[history]\nwindow = 0\n", "nightly.toml:2: history.window: 0: use 1 to 1000"},
		{"[bench]\ntrials = -1\n", "bench.trials: -1: use 1 to 1000"},
		// Every count is bounded, as in a recipe.
		{"[bench]\nnum_prompts = 9223372036854775807\n", "nightly.toml:2: bench.num_prompts: 9223372036854775807: use 1 to 100000"},
		{"[bench]\nwarmup = 9223372036854775807\n", "nightly.toml:2: bench.warmup: 9223372036854775807: use 0 to 10000"},
		{"[bench]\nmax_new_tokens = 0\n", "bench.max_new_tokens: 0: use 1 to 1048576"},
		{"[bench]\nconcurrency = [1, 100000]\n", "nightly.toml:2: bench.concurrency: 100000: use 1 to 4096"},
		{"[history]\nwindow = 9223372036854775807\n", "history.window: 9223372036854775807: use 1 to 1000"},
		{"[bench]\nagree_threshold = 7\n", "bench.agree_threshold: 7: use a share in [0, 1]"},
		// A NaN passes "v < 0 || v > 1" and would turn the check off;
		// every real-valued key refuses NaN and the infinities.
		{"[bench]\nconcurrency = [16, 4]\n", "nightly.toml:2: bench.concurrency: 4 after 16: list the levels in increasing order"},
		{"[bench]\nurl_a = \"notaurl\"\n", "nightly.toml:2: bench.url_a: notaurl is not a server URL"},
		{"[bench]\nagree_threshold = nan\n", "nightly.toml:2: bench.agree_threshold: NaN: not a number; use a share in [0, 1]"},
		{"[bench]\nagree_threshold = inf\n", "bench.agree_threshold: +Inf: not a finite number; use a share in [0, 1]"},
		{"[regression]\nthreshold_pct = nan\n", "nightly.toml:2: regression.threshold_pct: NaN: not a number; use a percentage in [0, 1000]"},
		{"[regression]\nthreshold_pct = -1.0\n", "regression.threshold_pct: -1: use a percentage in [0, 1000]"},
		{"[regression]\nmetrics = { tok_s = nan }\n", "regression.metrics: tok_s: threshold NaN: not a number"},
		{"[regression]\nmetrics = { tok_s = -inf }\n", "regression.metrics: tok_s: threshold -Inf: not a finite number"},
		{"[regression]\nalpha = nan\n", "nightly.toml:2: regression.alpha: NaN: not a number; use a level in (0, 1), e.g. 0.05"},
		{"[regression]\nalpha = 0.0\n", "regression.alpha: 0: use a level in (0, 1)"},
		{"[build]\njobs = -4\n", "build.jobs: -4: use 0 to 4096"},
		{"[build]\ntool = \"conda\"\n", `build.tool: "conda": use auto, uv or pip`},
		{"[bench]\nurl_a = \"http://h:1\"\nurl_b = \"http://h:1\"\n", "nightly.toml:3: bench.url_b: http://h:1 is also bench.url_a"},
		{"[outputs]\nplot = \"x.gif\"\n", "outputs.plot: x.gif: a plot is .svg, .png or .pdf"},
	} {
		p := filepath.Join(dir, "nightly.toml")
		must(t, os.WriteFile(p, []byte(tc.toml), 0o644))
		if _, err := LoadConfig(p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.toml, err, tc.want)
		}
	}
	must(t, os.WriteFile(filepath.Join(dir, "nightly.toml"), []byte(""), 0o644))
	c, err := LoadConfig(filepath.Join(dir, "nightly.toml"))
	if err != nil || c.Upstream.Ref != "main" || c.Arms.A != "baseline" || c.Arms.B != "pcie" || c.History.Window != 7 || c.Regression.Metrics["tok_s"] != 3 || !*c.Regression.RequireBFaster {
		t.Errorf("defaults: %+v %v", c, err)
	}
	// Working files nightly.toml does not name go under the state
	// directory, keyed by the config; what it names stays relative to it.
	state := filepath.Join(t.TempDir(), "state")
	t.Setenv("ARPATCH_STATE", state)
	c, err = LoadConfig(filepath.Join(dir, "nightly.toml"))
	key := ConfigKey(filepath.Join(dir, "nightly.toml"))
	if err != nil || c.Build.WorkDir != filepath.Join(state, "nightly", key, "work") || c.Bench.LogDir != filepath.Join(state, "nightly", key, "work", "logs") ||
		c.Outputs.Dir != filepath.Join(state, "nightly", key, "out") || c.History.Path != filepath.Join(state, "history.db") || c.Path(c.History.Path) != c.History.Path {
		t.Errorf("state defaults: work %s logs %s out %s db %s (%v)", c.Build.WorkDir, c.Bench.LogDir, c.Outputs.Dir, c.History.Path, err)
	}
	other := filepath.Join(t.TempDir(), "nightly.toml")
	must(t, os.WriteFile(other, []byte(""), 0o644))
	if c2, _ := LoadConfig(other); c2 == nil || c2.Build.WorkDir == c.Build.WorkDir || c2.Outputs.Dir == c.Outputs.Dir || c2.History.Path != c.History.Path {
		t.Errorf("two configs: %+v", c2)
	}
	must(t, os.WriteFile(filepath.Join(dir, "nightly.toml"), []byte("[build]\nwork_dir = \"w\"\n[history]\npath = \"h.db\"\n[outputs]\ndir = \"o\"\n"), 0o644))
	if c2, err := LoadConfig(filepath.Join(dir, "nightly.toml")); err != nil || c2.Path(c2.Build.WorkDir) != filepath.Join(dir, "w") || c2.Path(c2.Bench.LogDir) != filepath.Join(dir, "w", "logs") ||
		c2.Path(c2.History.Path) != filepath.Join(dir, "h.db") || c2.Path(c2.Outputs.Dir) != filepath.Join(dir, "o") {
		t.Errorf("named paths: %+v %v", c2, err)
	}
	must(t, os.WriteFile(filepath.Join(dir, "nightly.toml"), []byte(""), 0o644))
	c, _ = LoadConfig(filepath.Join(dir, "nightly.toml"))
	if c.Bench.TrialsFor(0) != 5 || c.Bench.TrialsFor(3) != 3 || c.Bench.WarmupFor(0) != 0 || c.Bench.WarmupFor(2) != 2 || c.Bench.WarmupFor(4) != 4 || c.Bench.AgreeThreshold != 0.9 {
		t.Errorf("bench defaults and recipe values: trials %d/%d warmup %d/%d", c.Bench.TrialsFor(0), c.Bench.TrialsFor(3), c.Bench.WarmupFor(0), c.Bench.WarmupFor(4))
	}
	// Zero where zero means something is kept, not replaced by a default;
	// an interpreter path is relative to the config.
	must(t, os.WriteFile(filepath.Join(dir, "nightly.toml"), []byte("[bench]\nwarmup = 0\nagree_threshold = 0\n[regression]\nthreshold_pct = 0\n[build]\npython = \"venv/bin/python3\"\n"), 0o644))
	c, err = LoadConfig(filepath.Join(dir, "nightly.toml"))
	if err != nil || c.Bench.WarmupFor(4) != 0 || c.Bench.AgreeThreshold != 0 || c.Regression.ThresholdPct != 0 || c.Build.Python != filepath.Join(dir, "venv/bin/python3") {
		t.Errorf("explicit zeros: %v warmup %d agree %v threshold %v python %s", err, c.Bench.WarmupFor(4), c.Bench.AgreeThreshold, c.Regression.ThresholdPct, c.Build.Python)
	}
}

// Mistakes only a run can see (recipes, series, interpreters, a bench
// without a server) are found before anything runs, as *ConfigError.
func TestPreflightErrors(t *testing.T) {
	w := newWorld(t)
	for _, tc := range []struct {
		edit      func(c *Config)
		skipBuild bool
		want      string
	}{
		{func(c *Config) { c.Arms.AFile, c.Arms.A = "", "nosuch" }, true, "arms.a: "},
		{func(c *Config) { c.Arms.PatchesDir = "nodir" }, true, "nodir"},
		{func(c *Config) { c.Build.Archs = []string{"999z"} }, false, "build.archs: "},
		{func(c *Config) { c.Build.Archs = []string{"90a"} }, false, "build.archs: --arch 90a: upstream's CMake files do not compile sm_90a"},
		{func(c *Config) { c.Upstream.Repo = "nosuch" }, true, "upstream.repo "},
		{func(c *Config) { c.Build.Python = "/no/python3" }, false, "build.python: /no/python3"},
		{func(c *Config) { c.Build.DepsDir = "nodeps" }, false, "build.deps_dir "},
		{func(c *Config) { c.Bench.URLA, c.Bench.URLB = "http://127.0.0.1:1", "" }, true, "bench: arm b has no server"},
	} {
		cfg := *w.cfg
		tc.edit(&cfg)
		_, err := Run(context.Background(), Options{Config: &cfg, Env: w.env, SkipBuild: tc.skipBuild,
			Probe: func(context.Context) Environment { return Environment{} }})
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want a ConfigError with %q", err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(w.dir, "history.db")); err == nil {
		t.Error("a refused config still opened the history")
	}
}

// A revision in also_check that does not resolve is a warning, not a
// failure; one already checked is not checked twice.
func TestAlsoCheck(t *testing.T) {
	w := newWorld(t)
	w.cfg.Upstream.Also = []string{"no-such-branch", "master", w.commit}
	rep, err := Run(context.Background(), Options{Config: w.cfg, Env: w.env, SkipBuild: true, SkipBench: true,
		Probe: func(context.Context) Environment { return Environment{} }})
	if err != nil || rep.ExitCode != ExitOK || len(rep.Drift) != 1 || len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "no-such-branch") {
		t.Fatalf("exit %d, %d drift rows, warnings %v, err %v", rep.ExitCode, len(rep.Drift), rep.Warnings, err)
	}
	if c := w.check(rep, "also_check no-such-branch"); c.Status != "skip" {
		t.Errorf("check %+v", c)
	}
}

// With arms.commit = "head", a night after upstream moved builds the new
// head: the A/B checkouts of the last night are cloned afresh.
func TestHeadModeFollowsUpstream(t *testing.T) {
	w := newWorldOwn(t) // commits to its upstream
	w.cfg.Arms.Commit = "head"
	rep := w.runSkipBench(false)
	if rep.ExitCode != ExitOK || rep.BuildCommit != w.commit {
		t.Fatalf("first night: exit %d build commit %s %v", rep.ExitCode, rep.BuildCommit, rep.Errors)
	}
	moved := w.commitUpstream("upstream moves", map[string]string{"README.md": "moved on\n"})
	// A file of the user's in the old checkout: kept, and the night fails
	// naming it; moved away, the checkout is cloned afresh.
	mine := filepath.Join(w.cfg.Build.WorkDir, "b", "NOTES.txt")
	must(t, os.WriteFile(mine, []byte("mine\n"), 0o644))
	rep = w.runSkipBench(false)
	if _, err := os.Stat(mine); rep.ExitCode != ExitInfra || err != nil || !strings.Contains(strings.Join(rep.Errors, " "), "files arpatch did not make") {
		t.Fatalf("untracked file in an arm: exit %d, kept %v, errors %v", rep.ExitCode, err == nil, rep.Errors)
	}
	must(t, os.Remove(mine))
	rep = w.runSkipBench(false)
	if rep.ExitCode != ExitOK || rep.BuildCommit != moved || len(rep.Builds) != 2 {
		t.Fatalf("after upstream moved: exit %d build commit %s builds %+v errors %v", rep.ExitCode, rep.BuildCommit, rep.Builds, rep.Errors)
	}
	st, err := checkout.Status(filepath.Join(w.cfg.Build.WorkDir, "b"), nil)
	if err != nil || st.State.Commit != moved {
		t.Errorf("arm b checkout: %+v %v", st, err)
	}
}

// A nightly that sweeps concurrency judges each level against the same
// level of earlier nights: at 3 requests in flight tok/s is about three
// times tok/s at 1, and a window that mixed them would call an unchanged
// night a regression at one level and an improvement at the other.
func TestNightlySweepPerLevel(t *testing.T) { synctest.Test(t, testNightlySweepPerLevel) }

func testNightlySweepPerLevel(t *testing.T) {
	w := newWorld(t)
	w.cfg.Bench.Concurrency = []int{1, 3}
	w.serve("a", 1000)
	w.serve("b", 1600)
	for i := 0; i < 2; i++ {
		if rep := w.run(context.Background(), true); rep.ExitCode != ExitOK {
			t.Fatalf("seeding night: exit %d %v %v", rep.ExitCode, rep.Errors, rep.Verdict)
		}
	}
	rep := w.run(context.Background(), true)
	if rep.ExitCode != ExitOK || !strings.Contains(rep.Workload, "concurrency=1,3") {
		t.Fatalf("unchanged night: exit %d %q %s", rep.ExitCode, rep.Verdict, rep.Workload)
	}
	// Each level is judged against the same level of the two earlier
	// nights (5 trials each), and B against A level by level.
	for _, m := range []string{"tok_s@concurrency=1", "tok_s@concurrency=3"} {
		r := findReg(rep, "patched", m, "history")
		if r.Verdict != "no significant change" || r.RefRuns != 2 || r.RefSamples != 10 {
			t.Errorf("%s against history: %+v", m, r)
		}
		if r := findReg(rep, "patched", m, "base"); r.Verdict != "improvement" || r.Pct < 30 || r.RefSamples != 5 {
			t.Errorf("%s B against A: %+v", m, r)
		}
	}
	one, three := findReg(rep, "patched", "tok_s@concurrency=1", "history"), findReg(rep, "patched", "tok_s@concurrency=3", "history")
	if three.Tonight < 2*one.Tonight || three.Reference < 2*one.Reference {
		t.Errorf("tok/s at 3 in flight %.0f (reference %.0f), at 1 %.0f (reference %.0f): the levels are not apart", three.Tonight, three.Reference, one.Tonight, one.Reference)
	}
	big, _ := GitHubBenchmark(rep.Bench, rep.RunID)
	names := map[string]bool{}
	for _, e := range big {
		names[e.Name] = true
	}
	if !names["patched/concurrency=3/tok_s"] || !names["base/concurrency=1/tok_s"] {
		t.Errorf("github-benchmark names: %v", names)
	}
	if b := Bencher(rep.Bench); b["eagle3/patched/concurrency=3"]["tok-s"].Value == 0 {
		t.Errorf("bencher: %v", b)
	}
}

// TestHostChange: five nights on one host, then one on another host
// (another driver and topology, same GPU model) where both arms are 10%
// slower. That is no regression: the checks against history are not
// judged, and the verdict, summary and JUnit say what changed and how to
// take the new host as the reference; once accepted, it is compared.
func TestHostChange(t *testing.T) { synctest.Test(t, testHostChange) }

func testHostChange(t *testing.T) {
	w := newWorld(t)
	w.cfg.Bench.Trials = 3
	w.serve("a", 1000)
	w.serve("b", 1600)
	w.host = Environment{GPUModel: "Test GPU", GPUCount: 8, Host: "box-a", Driver: "570.172.08", CUDA: "12.8", Torch: "2.9.1", Topology: "8 GPUs: NODE 8, PIX 4, SYS 16; 2 NUMA nodes"}
	for night := 1; night <= 5; night++ { // no builds: the servers are attached
		if rep := w.run(context.Background(), true); rep.ExitCode != ExitOK {
			t.Fatalf("night %d: exit %d %s", night, rep.ExitCode, rep.Verdict)
		}
	}
	w.host.Host, w.host.Driver, w.host.Topology = "box-b", "580.95.05", "8 GPUs: NVLink 4, NODE 8, SYS 16; 2 NUMA nodes"
	w.serve("a", 900)
	w.serve("b", 1440)
	rep := w.run(context.Background(), true)
	want := "the environment changed since run 5 (host box-a -> box-b, driver 570.172.08 -> 580.95.05, topology 8 GPUs: NODE 8, PIX 4, SYS 16; 2 NUMA nodes -> 8 GPUs: NVLink 4, NODE 8, SYS 16; 2 NUMA nodes): not compared with history; " +
		"if the change is intended, make this run the reference: `arpatch history accept 6 --db " + filepath.Join(w.dir, "history.db") + "`"
	if rep.ExitCode != ExitOK || rep.Verdict != "no regression; "+want {
		t.Fatalf("night 6: exit %d verdict %q", rep.ExitCode, rep.Verdict)
	}
	for _, arm := range []string{"base", "patched"} {
		if r := findReg(rep, arm, "tok_s", "history"); r.Verdict != "not compared" || r.RefRuns != 5 || r.Tonight > r.Reference*0.95 {
			t.Errorf("%s vs history: %+v", arm, r)
		}
	}
	if c := w.check(rep, "environment vs reference runs"); c.Status != "skip" || c.Detail != want {
		t.Errorf("environment check %+v", c)
	}
	var junit, summary bytes.Buffer
	must(t, JUnit(&junit, rep))
	must(t, Summary(&summary, rep))
	// Each renderer returns its writer's error, whichever write fails.
	errwritertest.EveryWriteFails(t, func(w io.Writer) error { return JUnit(w, rep) })
	errwritertest.EveryWriteFails(t, func(w io.Writer) error { return Summary(w, rep) })
	if !strings.Contains(junit.String(), `<testcase classname="arpatch.environment" name="environment vs reference runs">`) ||
		!strings.Contains(junit.String(), `<skipped message="the environment changed since run 5 (host box-a -&gt; box-b`) || strings.Contains(junit.String(), "<failure") {
		t.Errorf("junit:\n%s", junit.String())
	}
	if !strings.Contains(summary.String(), "> **Environment changed** since run 5: host box-a -> box-b, driver 570.172.08 -> 580.95.05") ||
		!strings.Contains(summary.String(), "`arpatch history accept 6 --db ") {
		t.Errorf("summary:\n%s", summary.String())
	}
	// Night 7 on the new host, not accepted yet: still flagged, not judged.
	if rep = w.run(context.Background(), true); rep.ExitCode != ExitOK || rep.EnvChange == nil || rep.EnvChange.Since != 5 {
		t.Fatalf("night 7: exit %d %+v", rep.ExitCode, rep.EnvChange)
	}
	// Accepted: night 8 compares with nights 6 and 7 on the new host.
	store, err := history.Open(filepath.Join(w.dir, "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Accept(6); err != nil {
		t.Fatal(err)
	}
	must(t, store.Close())
	rep = w.run(context.Background(), true)
	if r := findReg(rep, "patched", "tok_s", "history"); rep.ExitCode != ExitOK || rep.EnvChange != nil || r.Verdict == "not compared" || r.RefRuns != 2 {
		t.Fatalf("after accept: exit %d %+v %+v", rep.ExitCode, rep.EnvChange, r)
	}
	if c := w.check(rep, "environment vs reference runs"); c.Status != "pass" || c.Detail != "same host, gpu_count, driver, cuda, torch, nccl, topology as reference runs 6..7" {
		t.Errorf("environment check %+v", c)
	}
}

// TestPatchesDirAddsBeside: [arms] patches_dir adds its series beside the
// embedded ones (as docs/nightly.md says), replacing one of the same name.
func TestPatchesDirAddsBeside(t *testing.T) {
	w := newWorld(t)
	emb, err := patches.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	cat, err := catalog(w.cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range cat.Series {
		got = append(got, s.Name)
	}
	if len(got) != len(emb.Series)+1 || got[len(got)-1] != "fx" || got[0] != emb.Series[0].Name {
		t.Errorf("catalog = %v, want the %d embedded series and fx", got, len(emb.Series))
	}
}

// TestDriftHeadlineNamesTheRevision: a series that fits the tracked head
// but not the pinned commit drifts at the pinned commit, and the headline
// says so rather than naming the tracked ref.
func TestDriftHeadlineNamesTheRevision(t *testing.T) {
	w := newWorldOwn(t) // commits to its upstream
	// Upstream moves on; the series is refreshed for the new head only.
	head := w.commitUpstream("rename", map[string]string{
		"sgl-kernel/csrc/allreduce/custom_all_reduce.cu": strings.Replace(fixture.Cu, "one();", "one_stage();", 1),
	})
	patch := strings.Replace(fixturePatch, "   one();", "   one_stage();", 1)
	sum := sha256.Sum256([]byte(patch))
	if err := testrepo.WriteFiles(w.dir, map[string]string{
		"series/fx/0001-dispatch.patch": patch,
		"series/fx/series.toml":         "name = \"fx\"\nfamily = \"fx\"\ntested_on = [\"" + head + "\"]\n\n[[patch]]\nfile = \"0001-dispatch.patch\"\nsha256 = \"" + hex.EncodeToString(sum[:]) + "\"\n",
	}); err != nil {
		t.Fatal(err)
	}
	w.cfg.Arms.PatchesDir = "series" // this world's, not the shared arms'
	rep, err := Run(context.Background(), Options{Config: w.cfg, Env: w.env, SkipBuild: true, SkipBench: true,
		Probe: func(context.Context) Environment { return Environment{} }})
	if err != nil {
		t.Fatal(err)
	}
	want := "drift: the series no longer applies to pinned commit " + w.commit[:12]
	if rep.ExitCode != ExitDrift || !strings.HasPrefix(rep.Verdict, want) || strings.Contains(rep.Verdict, "applies to master") {
		t.Errorf("exit %d verdict %q, want it to start %q", rep.ExitCode, rep.Verdict, want)
	}
	if !reflect.DeepEqual(rep.DriftedAt, []string{"pinned commit " + w.commit[:12]}) {
		t.Errorf("drifted at %q", rep.DriftedAt)
	}
}

// An arm A with no output is INVALID and fails the night; arm B, checked
// against nothing, is not a "pass": its check is skipped with the reason.
// The arms' servers are attached (bench.url_a, url_b): the night needs no
// build (--skip-build) to bench and judge them.
func TestNightlyInvalidBaseline(t *testing.T) {
	w := newWorld(t)
	w.serve("b", 1600)
	u, stop := w.net.Serve(sglangtest.New(sglangtest.Config{TokPerSec: 1000, TTFT: time.Millisecond, Empty: true}))
	t.Cleanup(stop)
	w.cfg.Bench.URLA = u
	rep := w.run(context.Background(), true)
	if rep.ExitCode != ExitRegression {
		t.Errorf("exit %d, want %d", rep.ExitCode, ExitRegression)
	}
	if c := w.check(rep, "output of base"); c.Status != "fail" {
		t.Errorf("base: %+v", c)
	}
	if c := w.check(rep, "output of patched"); c.Status != "skip" || !strings.Contains(c.Detail, "no verdict: the baseline is INVALID") {
		t.Errorf("patched: %+v", c)
	}
}

// must stops the test on a setup error.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestInvalidArmPublishesNoFigure: after three good nights, arm B turns
// 2.5x faster and computes garbage. Its output check fails the night
// (exit 1), and no output that a machine or a person reads shows it as
// faster: every regression check of it (against history and against A)
// is "not compared", naming why, with no change, p or tonight's median;
// github-action-benchmark and Bencher have no entry of it; JUnit skips
// those checks; the summary and the terminal table carry no "+" change
// nor "improvement"; the history marks the arm invalid, and later nights
// do not take it as a reference. An INVALID A leaves B with no verdict:
// then neither arm's figures are published.
func TestInvalidArmPublishesNoFigure(t *testing.T) { synctest.Test(t, testInvalidArmPublishesNoFigure) }

func testInvalidArmPublishesNoFigure(t *testing.T) {
	w := newWorld(t)
	w.serve("a", 1000)
	w.serve("b", 1000)
	for range 3 {
		if rep := w.run(context.Background(), true); rep.ExitCode != ExitOK {
			t.Fatalf("good night: exit %d %s", rep.ExitCode, rep.Verdict)
		}
	}
	u, stop := w.net.Serve(sglangtest.New(sglangtest.Config{TokPerSec: 2500, TTFT: time.Millisecond, TokensPerChunk: 2, Spread: 0.01, Variant: "nan"}))
	t.Cleanup(stop)
	w.cfg.Bench.URLB = u
	rep := w.run(context.Background(), true)
	if rep.ExitCode != ExitRegression || w.check(rep, "output of patched").Status != "fail" {
		t.Fatalf("corrupting night: exit %d, %+v", rep.ExitCode, w.check(rep, "output of patched"))
	}
	if tok := rep.Bench.Arm("patched").Levels[0].Summaries[stats.TokS].Center; tok < 2000 {
		t.Fatalf("fixture: patched at %.0f tok/s, want about 2500", tok)
	}
	for _, r := range rep.Regressions {
		if r.Arm != "patched" {
			continue
		}
		if r.Verdict != VerdictNotCompared || !strings.Contains(r.Note, "patched: INVALID (only 0 of 15 outputs") || r.tonightText() != "-" {
			t.Errorf("check %s vs %s: %+v", r.Metric, r.Against, r)
		}
		b, _ := json.Marshal(r)
		if strings.Contains(string(b), `"tonight_median"`) || strings.Contains(string(b), `"pct"`) {
			t.Errorf("nightly.json's check carries a figure of the INVALID arm: %s", b)
		}
	}
	if r := findReg(rep, "patched", "tok_s", "base"); r.Verdict != VerdictNotCompared {
		t.Errorf("B vs A: %+v", r)
	}
	if c := w.check(rep, "patched tok_s vs history"); c.Status != history.CheckSkip || !strings.Contains(c.Detail, "not compared: - (p=-") {
		t.Errorf("check line: %+v", c)
	}
	if err := WriteOutputs(rep, w.cfg, nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"out/ghbench-bigger.json", "out/ghbench-smaller.json"} {
		var entries []GHBenchEntry
		must(t, json.Unmarshal(w.read(f), &entries))
		if len(entries) == 0 {
			t.Errorf("%s: the valid arm's entries are gone too", f)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name, "patched/") {
				t.Errorf("%s has an entry of the INVALID arm: %+v", f, e)
			}
		}
	}
	var bmf map[string]map[string]BMFMetric
	must(t, json.Unmarshal(w.read("out/bencher.json"), &bmf))
	if _, ok := bmf["eagle3/patched"]; ok || len(bmf["eagle3/base"]) != len(stats.Table) {
		t.Errorf("bencher: %v", slices.Collect(maps.Keys(bmf)))
	}
	junit := string(w.read("out/junit.xml"))
	if !strings.Contains(junit, `<testcase classname="arpatch.regression" name="patched tok_s vs history">`) || strings.Contains(junit, "improvement") {
		t.Errorf("junit:\n%s", junit)
	}
	var table bytes.Buffer
	WriteTable(&table, rep)
	for name, text := range map[string]string{"summary.md": string(w.read(filepath.Join(w.cfg.Outputs.Dir, "summary.md"))), "table": table.String(), "junit": junit} {
		for _, bad := range []string{"improvement", "faster", "+1", "+2", "+3", "+4", "+5", "+6", "+7", "+8", "+9"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s reads %q:\n%s", name, bad, text)
			}
		}
	}
	if sum := string(w.read(filepath.Join(w.cfg.Outputs.Dir, "summary.md"))); !strings.Contains(sum, "| patched | tok_s | history | - |") || !strings.Contains(sum, "not compared (patched: INVALID") {
		t.Errorf("summary's regression row of the INVALID arm:\n%s", sum)
	}
	must(t, plot(w.cfg, rep)) // as Execute draws outputs.plot
	if svg := string(w.read("out/tok_s.svg")); !strings.Contains(svg, fmt.Sprintf("INVALID, not drawn: patched run %d", rep.RunID)) {
		t.Errorf("the nightly's plot does not leave the INVALID night out")
	}
	store, err := history.OpenRead(filepath.Join(w.dir, "history.db"))
	must(t, err)
	d, err := store.Show(rep.RunID)
	must(t, store.Close())
	if err != nil || len(d.Arms) != 2 || !d.Arms[1].Invalid || d.Arms[0].Invalid {
		t.Errorf("history of the night: %+v %v", d.Arms, err)
	}

	// B good again: compared with the three good nights only.
	w.serve("b", 1000)
	rep = w.run(context.Background(), true)
	if r := findReg(rep, "patched", "tok_s", "history"); rep.ExitCode != ExitOK || r.Verdict != "no significant change" || r.RefRuns != 3 {
		t.Errorf("night after: exit %d %+v", rep.ExitCode, r)
	}

	// An INVALID A: B has no verdict, and neither arm is published.
	ue, stopE := w.net.Serve(sglangtest.New(sglangtest.Config{TokPerSec: 1000, TTFT: time.Millisecond, Empty: true}))
	t.Cleanup(stopE)
	w.cfg.Bench.URLA = ue
	rep = w.run(context.Background(), true)
	if rep.ExitCode != ExitRegression {
		t.Fatalf("INVALID A: exit %d", rep.ExitCode)
	}
	big, small := GitHubBenchmark(rep.Bench, rep.RunID)
	if len(big)+len(small) != 0 || len(Bencher(rep.Bench)) != 0 {
		t.Errorf("INVALID baseline: published %v %v %v", big, small, Bencher(rep.Bench))
	}
	for _, r := range rep.Regressions {
		if r.Verdict != VerdictNotCompared || r.measured {
			t.Errorf("INVALID baseline: %s %s vs %s: %+v", r.Arm, r.Metric, r.Against, r)
		}
	}
	store, err = history.OpenRead(filepath.Join(w.dir, "history.db"))
	must(t, err)
	d, err = store.Show(rep.RunID)
	must(t, store.Close())
	if err != nil || len(d.Arms) != 2 || !d.Arms[0].Invalid || !d.Arms[1].Invalid {
		t.Errorf("history of the INVALID-baseline night: both arms invalid (no result): %+v %v", d.Arms, err)
	}
}
