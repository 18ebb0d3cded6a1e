package nightly

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/arpatch/arpatch/harness/sglangtest"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/pgtest"
	"github.com/arpatch/arpatch/internal/testrepo"
	"github.com/arpatch/arpatch/kernels"
	"github.com/arpatch/arpatch/nightly/internal/fixture"
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

// must stops the test on a setup error.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
