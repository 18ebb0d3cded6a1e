package bench

import (
	"context"
	"errors"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/server"
	"github.com/arpatch/arpatch/harness/sglangtest"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/harness/workload"
	"github.com/arpatch/arpatch/internal/procgroup"
)

// serve serves an in-test server over loopback (paced by instant).
func serve(t *testing.T, cfg sglangtest.Config) (*sglangtest.Server, string) {
	t.Helper()
	cfg = instant(cfg)
	s := sglangtest.New(cfg)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts.URL
}

// instant paces an in-test server for the tests that run Run over
// loopback, on the wall clock, and assert no timing (verdicts,
// agreement, failures): unless cfg sets them, every token is due at once
// (TTFT 1 ns, 1e9 tok/s), so a stream is sent as fast as the client reads
// it and these tests wait on nothing but their own work.
func instant(cfg sglangtest.Config) sglangtest.Config {
	if cfg.TokPerSec == 0 {
		cfg.TokPerSec = 1e9
	}
	if cfg.TTFT == 0 {
		cfg.TTFT = time.Nanosecond
	}
	return cfg
}

// serveOn serves an in-test server on an in-memory network (a test in a
// synctest bubble, where its timing is exact).
func serveOn(n *sglangtest.Network, cfg sglangtest.Config) string {
	u, _ := n.Serve(sglangtest.New(cfg))
	return u
}

// TestRunVerdicts attaches to in-test servers: a baseline, an identical
// arm and an arm that returns other text, on the virtual clock of a
// synctest bubble, where each arm's rates are exact. (A slower arm is
// TestAcceptance's; measured rates on the wall clock are
// harness/sglang's TestMeasuredRate.)
func TestRunVerdicts(t *testing.T) { synctest.Test(t, testRunVerdicts) }

func testRunVerdicts(t *testing.T) {
	n := sglangtest.NewNetwork()
	defer n.Close()
	base := sglangtest.Config{TokPerSec: 1000, TTFT: 2 * time.Millisecond, TokensPerChunk: 3, AcceptLength: 2.5, Spread: 0.01}
	b := serveOn(n, base)
	same := serveOn(n, base)
	wrongCfg := base
	wrongCfg.Variant, wrongCfg.DivergeAt = "broken allreduce", 5
	wrong := serveOn(n, wrongCfg)
	res, err := Run(context.Background(), Options{
		Arms:    []Arm{{Name: "baseline", URL: b}, {Name: "same", URL: same}, {Name: "wrong", URL: wrong}},
		Prompts: workload.Take(workload.Builtin(), 4), MaxNewTokens: 40, Trials: 5, SpecAlgorithm: "EAGLE3", HTTP: n.HTTP(),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Arms at the baseline's rate (each request within 1% of it, the same
	// request at the same rate on each): no change, and tok/s within 1%;
	// the INVALID arm keeps its measurement but no delta (no figure of it
	// is compared).
	if d := res.Arm("same").Levels[0].Deltas["tok_s"]; d.Verdict != stats.NoChange || math.Abs(d.Pct) > 1 {
		t.Errorf("same: %+v, want no change", d)
	}
	baseTokS := res.Arm("baseline").Levels[0].Summaries["tok_s"].Center
	if w := res.Arm("wrong").Levels[0]; w.Deltas != nil || math.Abs(w.Summaries["tok_s"].Center/baseTokS-1) > 0.01 {
		t.Errorf("wrong: deltas %v, tok/s %v against %v: want none, and within 1%%", w.Deltas, w.Summaries["tok_s"].Center, baseTokS)
	}
	if got := res.Arm("baseline").Levels[0].Summaries["decode_tok_s"].Center; math.Abs(got/1000-1) > 0.01 {
		t.Errorf("baseline decode %v tok/s, want 1000 +- 1%%", got)
	}
	if !res.Arm("wrong").Invalid || res.Arm("wrong").Verdict != Invalid || res.Arm("same").Invalid {
		t.Errorf("verdicts: wrong %v same %v", res.Arm("wrong").Verdict, res.Arm("same").Verdict)
	}
	// Exact accept length: 40 tokens, ceil(39/2.5)+1 = 17 verify steps.
	for _, a := range res.Arms {
		for _, m := range a.Metrics {
			if m.AcceptLength != 40.0/17 || m.Errors != 0 || m.Requests != 4 {
				t.Fatalf("%s: %+v", a.Arm.Name, m)
			}
		}
	}
	if !strings.Contains(strings.Join(res.Arm("wrong").Warnings, "\n"), "INVALID: only 0 of 20 outputs (4 prompts x trials)") {
		t.Errorf("warnings %v", res.Arm("wrong").Warnings)
	}
}

// Some failed requests are counted and warned about; an arm whose every
// request fails is a server that does not serve: an infrastructure error,
// never a (zero) speed.
func TestRunCountsFailures(t *testing.T) {
	t.Parallel() // real sockets and clock, but no timing asserted: waits overlap
	_, b := serve(t, sglangtest.Config{HTTP500Every: 3})
	_, ok := serve(t, sglangtest.Config{})
	res, err := Run(context.Background(), Options{
		Arms:    []Arm{{Name: "baseline", URL: ok}, {Name: "flaky", URL: b}},
		Prompts: workload.Take(workload.Builtin(), 6), MaxNewTokens: 12, Trials: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	a := res.Arm("flaky")
	if e := a.Metrics[0].Errors; e != 2 || !strings.Contains(strings.Join(a.Warnings, " "), "requests failed") {
		t.Errorf("HTTP 500 every 3rd request: %d errors in 6, warnings %v", e, a.Warnings)
	}
	for name, cfg := range map[string]sglangtest.Config{
		"the stream ended before [DONE]": {DropAfter: 2},
		"malformed chunk":                {Malformed: true},
	} {
		_, u := serve(t, cfg)
		_, err := Run(context.Background(), Options{
			Arms:    []Arm{{Name: "baseline", URL: ok}, {Name: "broken", URL: u}},
			Prompts: workload.Take(workload.Builtin(), 6), MaxNewTokens: 12, Trials: 2,
		})
		var ie *InfraError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), "arm broken: all 6 requests of trial 1 (concurrency 1) failed") || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	// Nothing listening at all.
	_, err = Run(context.Background(), Options{Arms: []Arm{{Name: "baseline", URL: "http://127.0.0.1:1"}}, Prompts: []string{"a"}, MaxNewTokens: 4, Trials: 1})
	if err == nil || !strings.Contains(err.Error(), "request failed") || !strings.Contains(err.Error(), "is the server at http://127.0.0.1:1 up") {
		t.Errorf("no server: %v", err)
	}
}

func TestAcceptLengthOneWarns(t *testing.T) {
	_, b := serve(t, sglangtest.Config{AcceptLength: 1})
	res, err := Run(context.Background(), Options{Arms: []Arm{{Name: "baseline", URL: b}}, Prompts: []string{"a", "b"}, MaxNewTokens: 8, Trials: 1, SpecAlgorithm: "EAGLE3"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(res.Arms[0].Warnings, " "), "accept length 1.00 with speculation on") {
		t.Errorf("warnings %v", res.Arms[0].Warnings)
	}
}

func TestPreflightStops(t *testing.T) {
	_, b := serve(t, sglangtest.Config{})
	slowCustom := func(ctx context.Context) (*allreduce.Report, error) {
		v := allreduce.Verify{Count: 122, Bytes: 40960}
		run := &allreduce.Run{Exit: "ok", Results: []allreduce.Result{
			{Impl: allreduce.NCCL, Branch: "-", Bytes: 40960, Mode: "graph", OK: true, MedianUS: 25},
			{Impl: allreduce.CustomAuto, Branch: "pcie", Bytes: 40960, Mode: "graph", OK: true, MedianUS: 38},
		}}
		return allreduce.NewReport(allreduce.Options{}, v, run, "test"), nil
	}
	o := Options{Arms: []Arm{{Name: "baseline", URL: b}}, Prompts: []string{"a"}, MaxNewTokens: 4, Trials: 1, Preflight: slowCustom}
	res, err := Run(context.Background(), o)
	var pe *PreflightError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "takes 38.0 us at the verify shape, NCCL 25.0 us") || len(res.Arms) != 0 {
		t.Fatalf("err = %v", err)
	}
	o.Force = true
	res, err = Run(context.Background(), o)
	if err != nil || len(res.Arms) != 1 || len(res.Findings) != 1 {
		t.Errorf("forced: %v %+v", err, res)
	}
	// A wrong sum, a hang or a failed run is never forced past: a fast
	// number from a broken allreduce is no result.
	for _, bad := range []allreduce.Result{
		{Impl: allreduce.CustomAuto, Branch: "pcie", Bytes: 40960, Mode: "graph", OK: false, MedianUS: 5, Wrong: &allreduce.Wrong{Rank: 1, Got: "3.0", Want: "2.0", Mismatches: 7, Of: 20480}},
		{Impl: allreduce.CustomAuto, Branch: "pcie", Bytes: 40960, Mode: "graph", Error: "hang"},
		{Impl: allreduce.CustomAuto, Branch: "pcie", Bytes: 40960, Mode: "graph", Error: "CUDA error: an illegal memory access"},
	} {
		o.Preflight = func(ctx context.Context) (*allreduce.Report, error) {
			run := &allreduce.Run{Exit: "ok", Results: []allreduce.Result{
				{Impl: allreduce.NCCL, Branch: "-", Bytes: 40960, Mode: "graph", OK: true, MedianUS: 25}, bad}}
			return allreduce.NewReport(allreduce.Options{}, allreduce.Verify{Count: 122, Bytes: 40960}, run, "test"), nil
		}
		res, err = Run(context.Background(), o)
		if !errors.As(err, &pe) || !pe.Broken || !strings.Contains(err.Error(), "--force does not run past a broken allreduce") || len(res.Arms) != 0 || len(res.Findings) != 1 {
			t.Errorf("forced past a broken allreduce (%+v): err = %v, %d arms", bad, err, len(res.Arms))
		}
	}
}

func TestLaunchedServerDies(t *testing.T) {
	o := Options{Arms: []Arm{{Name: "baseline", LaunchCmd: "echo 'Traceback: fatal (fake)' >&2; exit 5 # {port}"}},
		Prompts: []string{"a"}, Trials: 1, LogDir: t.TempDir(), ReadyTimeout: 5 * time.Second}
	_, err := Run(context.Background(), o)
	var ie *InfraError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "Traceback: fatal (fake)") || !strings.Contains(err.Error(), "exited (exit status 5)") {
		t.Errorf("err = %v", err)
	}
}

func TestArgv(t *testing.T) {
	o := Options{Model: "/m", DraftModel: "/d", TP: 8, SpecAlgorithm: "EAGLE3", SpecSteps: 3, SpecTopK: 1, SpecDraftTokens: 4, Host: "127.0.0.1"}
	got := strings.Join(o.Argv(Arm{Name: "pcie", Python: "/venv/bin/python", Args: []string{"--cuda-graph-max-bs", "8"}}, 31000), " ")
	want := "/venv/bin/python -m sglang.launch_server --model-path /m --host 127.0.0.1 --port 31000 --tp-size 8 --speculative-algorithm EAGLE3 --speculative-draft-model-path /d --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --cuda-graph-max-bs 8"
	if got != want {
		t.Errorf("argv:\n%s\nwant\n%s", got, want)
	}
	if got := o.Argv(Arm{Name: "x", LaunchCmd: "serve --port {port} --tp {tp} --arm {arm}"}, 9); strings.Join(got, " ") != "sh -c serve --port 9 --tp 8 --arm x" {
		t.Errorf("template: %q", got)
	}
	// A model path with a space and a ';' stays one argument.
	o.Model = "/m/my model;touch /tmp/x"
	if got := o.Argv(Arm{Name: "x", LaunchCmd: "serve --model {model}"}, 9); got[2] != `serve --model '/m/my model;touch /tmp/x'` {
		t.Errorf("quoted template: %q", got)
	}
	for _, arms := range [][]Arm{
		{{Name: "a", URL: "http://localhost:8000/"}, {Name: "b", URL: "http://127.0.0.1:8000"}},
		{{Name: "a", LaunchCmd: "serve --port 30000"}},
	} {
		if err := (Options{Arms: arms}).CheckArms(); err == nil {
			t.Errorf("arms %+v accepted", arms)
		}
	}
	if SameServer("http://h:8000", "http://h:8001") || !SameServer("http://H:80/", "http://h") {
		t.Error("SameServer")
	}
	bad := Options{Arms: []Arm{{Name: "a"}}, Prompts: []string{"x"}}
	if _, err := Run(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "needs a server: pass --model") {
		t.Errorf("no model: %v", err)
	}
}

// A server left running by a run that was killed outright (its record
// beside its log) stops the next launch, which names its process group.
func TestOrphanedServerStopsTheRun(t *testing.T) {
	dir := t.TempDir()
	octx, stop := context.WithCancel(context.Background())
	orphan := procgroup.Command(octx, 0, "sleep", "30")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stop(); _ = orphan.Wait() }() // Wait says context.Canceled, as asked
	if err := os.WriteFile(filepath.Join(dir, "baseline-t1.log"+server.PGIDSuffix), []byte(strconv.Itoa(orphan.PGID())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := Options{Arms: []Arm{{Name: "baseline", LaunchCmd: "true {port}"}}, Prompts: []string{"a"}, Trials: 1, LogDir: dir}
	_, err := Run(context.Background(), o)
	var ie *InfraError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "still runs (process group "+strconv.Itoa(orphan.PGID())) {
		t.Errorf("err = %v", err)
	}
}

// With open Arrivals each request is sent at its arrival time (on the
// bubble's exact clock), the same times in every trial and arm; a level
// still caps the requests in flight, so a request due while the cap is
// reached waits for one to finish, as --max-concurrency makes it wait
// in vllm bench serve; and the serving metrics come with every trial.
func TestOpenLoopArrivals(t *testing.T) { synctest.Test(t, testOpenLoopArrivals) }

func testOpenLoopArrivals(t *testing.T) {
	n := sglangtest.NewNetwork()
	defer n.Close()
	cfg := sglangtest.Config{TokPerSec: 100, TTFT: 10 * time.Millisecond, TokensPerChunk: 1}
	b, p := serveOn(n, cfg), serveOn(n, cfg)
	arr := workload.Arrivals{Rate: 20, Burstiness: 1, Seed: 3}
	prompts := workload.Take(workload.Builtin(), 12)
	res, err := Run(context.Background(), Options{
		Arms:    []Arm{{Name: "baseline", URL: b}, {Name: "pcie", URL: p}},
		Prompts: prompts, MaxNewTokens: 10, Trials: 2, Concurrency: []int{1, 12}, Arrivals: arr, HTTP: n.HTTP(),
	})
	if err != nil {
		t.Fatal(err)
	}
	due := arr.Times(len(prompts))
	for _, a := range res.Arms {
		if len(a.Serving) != len(a.Trials) {
			t.Fatalf("%s: %d serving records for %d trials", a.Arm.Name, len(a.Serving), len(a.Trials))
		}
		for ti, tr := range a.Trials {
			first := tr.Samples[0].Start
			for i, s := range tr.Samples {
				off := s.Start.Sub(first) + due[0]
				switch tr.Concurrency {
				case 12: // no cap reached: every request at its time
					if off != due[i] {
						t.Errorf("%s trial %d concurrency 12: request %d sent at %v, due at %v", a.Arm.Name, tr.Index, i, off, due[i])
					}
				case 1: // one at a time: never before its time, never before the last is done
					if off < due[i] {
						t.Errorf("%s trial %d concurrency 1: request %d sent at %v, before it is due (%v)", a.Arm.Name, tr.Index, i, off, due[i])
					}
					if i > 0 {
						prev := tr.Samples[i-1]
						if s.Start.Before(prev.Start.Add(time.Duration(prev.E2E * float64(time.Second)))) {
							t.Errorf("%s trial %d concurrency 1: request %d sent while %d was in flight", a.Arm.Name, tr.Index, i, i-1)
						}
					}
				}
			}
			sv := a.Serving[ti]
			if sv.Completed != len(prompts) || sv.RequestThroughput <= 0 || math.Abs(sv.RequestThroughput-float64(len(prompts))/tr.Wall) > 1e-9 {
				t.Errorf("%s trial %d: serving %+v", a.Arm.Name, tr.Index, sv)
			}
		}
	}
	// 12 requests at 20/s: the last is due at 0.6 s, so the uncapped level
	// lasts about that (plus its own 10 tokens at 100 tok/s), not the
	// closed loop's instant burst.
	if w := res.Arms[0].Trials[1].Wall; w < 0.6 || w > 0.75 {
		t.Errorf("uncapped level took %.3f s, want the 0.6 s of arrivals plus one request", w)
	}
	if _, err := Run(context.Background(), Options{Arms: []Arm{{Name: "baseline", URL: b}}, Prompts: prompts, Arrivals: workload.Arrivals{Rate: -1}, HTTP: n.HTTP()}); err == nil || !strings.Contains(err.Error(), "request rate -1") {
		t.Errorf("a negative rate: %v", err)
	}
}
