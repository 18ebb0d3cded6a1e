package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/arpatch/arpatch/harness/sglang"
	"github.com/arpatch/arpatch/harness/sglangtest"
	"github.com/arpatch/arpatch/harness/workload"
	"github.com/arpatch/arpatch/recipes"
)

func warnings(a *ArmResult) string { return strings.Join(a.Warnings, "\n") }

// A baseline whose requests all abort, or whose outputs are all empty,
// cannot be compared: it is INVALID, and an arm with entirely other text
// is never "faster" (it used to agree 16/16 over the baseline's zero
// characters): it gets no verdict, and fails the run. It cannot be told
// from a correct arm without a reference, so it is not called INVALID
// ("only 0 of 0 outputs ... computes something else" misled): the
// message names the baseline's failure.
func TestBaselineThatCannotBeCompared(t *testing.T) {
	t.Parallel() // real sockets and clock, but no timing asserted: waits overlap
	_, other := serve(t, sglangtest.Config{Variant: "other"})
	for name, cfg := range map[string]sglangtest.Config{
		"aborted": {AbortEvery: 1},
		"empty":   {Empty: true},
	} {
		_, b := serve(t, cfg)
		res, err := Run(context.Background(), Options{Arms: []Arm{{Name: "baseline", URL: b}, {Name: "pcie", URL: other}},
			Prompts: workload.Take(workload.Builtin(), 4), MaxNewTokens: 24, Trials: 2})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		base, arm := res.Arm("baseline"), res.Arm("pcie")
		if !base.Invalid || base.Verdict != InvalidBaseline || !strings.Contains(warnings(base), "INVALID") {
			t.Errorf("%s baseline: %v %v", name, base.Verdict, base.Warnings)
		}
		if arm.Verdict != NoReference || arm.Agreement.IdenticalN != 0 || !arm.Verdict.Fails() ||
			!strings.Contains(warnings(arm), "no verdict: the baseline is INVALID (") || strings.Contains(warnings(arm), "INVALID: only") {
			t.Errorf("%s: arm with other text: verdict %v, agreement %+v, warnings %v", name, arm.Verdict, arm.Agreement, arm.Warnings)
		}
		if arm.Levels[0].Deltas != nil {
			t.Errorf("%s: deltas against an INVALID baseline: %+v", name, arm.Levels[0].Deltas)
		}
	}
	// A valid arm against an INVALID baseline has no speed verdict.
	_, b := serve(t, sglangtest.Config{Variant: "a"})
	_, same := serve(t, sglangtest.Config{Variant: "a"})
	res, err := Run(context.Background(), Options{Arms: []Arm{{Name: "baseline", URL: b}, {Name: "pcie", URL: same}},
		Prompts: []string{"a", "b"}, MaxNewTokens: 8, Trials: 2, AgreeThreshold: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	res.Arm("baseline").Invalid = true
	verdicts(res.Arm("pcie"), false, true)
	if v := res.Arm("pcie").Verdict; v != NoReference || !v.Fails() {
		t.Errorf("against an INVALID baseline: %v", v)
	}
}

// An arm whose requests end with finish_reason abort in the stream fails
// them: INVALID, with the first abort's message, not "no change".
func TestAbortsAreFailures(t *testing.T) {
	t.Parallel() // real sockets and clock, but no timing asserted: waits overlap
	_, b := serve(t, sglangtest.Config{})
	_, ab := serve(t, sglangtest.Config{AbortEvery: 2})
	res, err := Run(context.Background(), Options{Arms: []Arm{{Name: "baseline", URL: b}, {Name: "pcie", URL: ab}},
		Prompts: workload.Take(workload.Builtin(), 8), MaxNewTokens: 24, Trials: 2})
	if err != nil {
		t.Fatal(err)
	}
	a := res.Arm("pcie")
	if !a.Invalid || a.Verdict != Invalid || !strings.Contains(warnings(a), "INVALID: 8 of 16 requests failed (8 aborted by the server)") ||
		!strings.Contains(warnings(a), "the first: trial 1, concurrency 1, prompt 1: aborted by the server: injected abort of request 2") {
		t.Errorf("aborting arm: %v %v", a.Verdict, a.Warnings)
	}
	// Every request aborted: the server answered, so the arm is INVALID,
	// not an infrastructure failure.
	_, all := serve(t, sglangtest.Config{AbortEvery: 1})
	res, err = Run(context.Background(), Options{Arms: []Arm{{Name: "baseline", URL: b}, {Name: "pcie", URL: all}},
		Prompts: []string{"a", "b"}, MaxNewTokens: 8, Trials: 1})
	if err != nil || res.Arm("pcie").Verdict != Invalid {
		t.Errorf("all aborted: %v %+v", err, res.Arm("pcie"))
	}
}

// The same outputs streamed as text deltas (--incremental-streaming-
// output, read from /server_info) and in other chunks agree in full.
func TestIncrementalStreamingAgrees(t *testing.T) {
	t.Parallel() // real sockets and clock, but no timing asserted: waits overlap
	_, b := serve(t, sglangtest.Config{TokensPerChunk: 1})
	_, inc := serve(t, sglangtest.Config{TokensPerChunk: 3, Incremental: true})
	res, err := Run(context.Background(), Options{Arms: []Arm{{Name: "baseline", URL: b}, {Name: "pcie", URL: inc}},
		Prompts: workload.Take(workload.Builtin(), 8), MaxNewTokens: 40, Trials: 2})
	if err != nil {
		t.Fatal(err)
	}
	a := res.Arm("pcie")
	if a.Invalid || a.Agreement.Identical != 16 || a.Agreement.IdenticalN != 16 || a.Metrics[0].Tokens != 8*40 {
		t.Errorf("incremental arm: %v %+v %v", a.Verdict, a.Agreement, a.Warnings)
	}
}

// The caller's environment does not reach an arm through the variables
// the arms control; what an arm sets is its own, and the result records
// the effective SGLANG_/NCCL_/CUDA_/PYTORCH_ variables.
func TestArmEnvironment(t *testing.T) {
	o := Options{Arms: []Arm{{Name: "baseline"}, {Name: "pcie", Env: map[string]string{"SGLANG_FORCE_CUSTOM_AR_PCIE": "1", "MY_KNOB": "2"}}},
		Env: []string{"PATH=/bin", "SGLANG_FORCE_CUSTOM_AR_PCIE=1", "SGLANG_CUSTOM_ALLREDUCE_ALGO=2stage", "SGLANG_PCIE_CUSTOM_AR_MAX_BYTES=9", "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=9", "MY_KNOB=7",
			"NCCL_DEBUG=INFO", "CUDA_VISIBLE_DEVICES=0,1", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "SGLANG_LOG_LEVEL=info", "HOME=/root"}}
	base := o.armEnv(o.Arms[0])
	for _, kv := range base {
		for _, k := range []string{"SGLANG_FORCE_CUSTOM_AR_PCIE=", "SGLANG_CUSTOM_ALLREDUCE_ALGO=", "SGLANG_PCIE_CUSTOM_AR_MAX_BYTES=", "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=", "MY_KNOB="} {
			if strings.HasPrefix(kv, k) {
				t.Errorf("baseline inherits %s", kv)
			}
		}
	}
	if !slices.Contains(base, "PATH=/bin") || !slices.Contains(base, "NCCL_DEBUG=INFO") {
		t.Errorf("baseline env %v", base)
	}
	pcie := o.armEnv(o.Arms[1])
	if !slices.Contains(pcie, "SGLANG_FORCE_CUSTOM_AR_PCIE=1") || !slices.Contains(pcie, "MY_KNOB=2") || slices.Contains(pcie, "MY_KNOB=7") {
		t.Errorf("pcie env %v", pcie)
	}
	rec := recordedEnv(pcie)
	want := map[string]string{"SGLANG_FORCE_CUSTOM_AR_PCIE": "1", "NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0,1",
		"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "SGLANG_LOG_LEVEL": "info"}
	if len(rec) != len(want) {
		t.Errorf("recorded %v, want %v", rec, want)
	}
	for k, v := range want {
		if rec[k] != v {
			t.Errorf("recorded %s=%q, want %q", k, rec[k], v)
		}
	}
}

// A warm-up of many requests stops at once on cancellation (SIGTERM or
// Ctrl-C cancel the context), as does a trial: on the virtual clock of a
// synctest bubble, Run returns at the instant of the cancel, not a token
// later.
func TestCancellationStopsLoops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := sglangtest.NewNetwork()
		defer n.Close()
		b := serveOn(n, sglangtest.Config{TokPerSec: 50, TTFT: time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		start := time.Now()
		_, err := Run(ctx, Options{Arms: []Arm{{Name: "baseline", URL: b}}, Prompts: []string{"a"}, MaxNewTokens: 100, Trials: 1, Warmup: 10000, HTTP: n.HTTP()})
		if !errors.Is(err, context.Canceled) || time.Since(start) != 200*time.Millisecond {
			t.Errorf("warm-up: err %v after %v", err, time.Since(start))
		}
		ctx, cancel = context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		start = time.Now()
		_, err = Run(ctx, Options{Arms: []Arm{{Name: "baseline", URL: b}}, Prompts: workload.Take(workload.Builtin(), 1000), MaxNewTokens: 100, Trials: 5, HTTP: n.HTTP()})
		if !errors.Is(err, context.Canceled) || time.Since(start) != 200*time.Millisecond {
			t.Errorf("trial: err %v after %v", err, time.Since(start))
		}
	})
}

// Counts beyond their bounds are refused before anything is allocated.
func TestOptionBounds(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Trials: 100000}, "bench trials 100000: use 1 to 1000"},
		{Options{Warmup: 1 << 40}, "bench warmup 1099511627776: use 0 to 10000"},
		{Options{Concurrency: []int{1, 1 << 30}}, "bench concurrency 1073741824: use 1 to 4096"},
		{Options{Concurrency: []int{4, 4}}, "bench concurrency 4 is listed twice"},
		{Options{MaxNewTokens: 1 << 40}, "bench max_new_tokens 1099511627776: use 1 to 1048576"},
	} {
		tc.o.Arms, tc.o.Prompts = []Arm{{Name: "baseline", URL: "http://127.0.0.1:1"}}, []string{"a"}
		if _, err := Run(context.Background(), tc.o); err == nil || err.Error() != tc.want {
			t.Errorf("err = %v, want %q", err, tc.want)
		}
	}
}

// A level above the prompts of a trial cannot fill: the result says so.
func TestLevelAbovePrompts(t *testing.T) {
	_, b := serve(t, sglangtest.Config{})
	res, err := Run(context.Background(), Options{Arms: []Arm{{Name: "baseline", URL: b}}, Prompts: []string{"a", "b"}, MaxNewTokens: 4, Trials: 1, Concurrency: []int{1, 2, 8}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Findings) != 1 || res.Findings[0] != "concurrency 8 is above the 2 prompts of a trial: at most 2 requests are in flight at that level (raise --num-prompts to fill it)" {
		t.Errorf("findings %q", res.Findings)
	}
}

// --agree-threshold 0 (and nightly's agree_threshold = 0) turn the output
// check off, as the help says; Options left at zero keep 90%.
func TestAgreeThresholdZeroIsOff(t *testing.T) {
	_, b := serve(t, sglangtest.Config{})
	_, other := serve(t, sglangtest.Config{Variant: "x"})
	o, err := FromRecipe(recipes.Bench{MaxNewTokens: 8, Trials: 1, NumPrompts: 2, SpeculativeNumSteps: 3, SpeculativeEagleTopK: 1, SpeculativeNumDraftTokens: 4, Concurrency: recipes.Levels{1}},
		Overrides{Arms: []Arm{{Name: "baseline", URL: b}, {Name: "pcie", URL: other}}, Prompts: []string{"a", "b"}})
	if err != nil || !o.AgreeOff {
		t.Fatalf("%+v %v", o, err)
	}
	res, err := Run(context.Background(), o)
	if err != nil || res.Arm("pcie").Invalid {
		t.Errorf("check off: %v %+v", err, res.Arm("pcie"))
	}
	o.AgreeOff = false
	res, err = Run(context.Background(), o)
	if err != nil || !res.Arm("pcie").Invalid {
		t.Errorf("default 90%%: %v %+v", err, res.Arm("pcie").Warnings)
	}
}

// A NaN agreement threshold passes every "share < threshold" test, so the
// output check would be off: Run refuses it, as the flag and the config do.
func TestNaNThresholdRefused(t *testing.T) {
	_, err := Run(context.Background(), Options{Arms: []Arm{{Name: "baseline", URL: "http://127.0.0.1:1"}}, Prompts: []string{"a"}, AgreeThreshold: math.NaN()})
	if err == nil || !strings.Contains(err.Error(), "agree_threshold NaN: not a number") {
		t.Errorf("NaN threshold: %v", err)
	}
	if _, err := FromRecipe(recipes.Bench{}, Overrides{AgreeThreshold: math.Inf(1)}); err == nil || !strings.Contains(err.Error(), "agree_threshold: +Inf: not a finite number") {
		t.Errorf("FromRecipe +Inf: %v", err)
	}
}

// An arm identical to the baseline over the first 32 tokens and different
// after them agrees, whatever the chunking on either side (an EAGLE
// server's chunks are its accept lengths); one different from token 21
// is INVALID at every chunking.
func TestAgreementIndependentOfChunking(t *testing.T) {
	t.Parallel() // real sockets and clock, but no timing asserted: waits overlap
	for _, cb := range []int{1, 3} {
		_, b := serve(t, sglangtest.Config{TokensPerChunk: cb})
		arms := []Arm{{Name: "baseline", URL: b}}
		for _, ca := range []int{1, 2, 3, 4, 5} {
			_, late := serve(t, sglangtest.Config{TokensPerChunk: ca, Variant: "late", DivergeAt: 32})
			_, early := serve(t, sglangtest.Config{TokensPerChunk: ca, Variant: "early", DivergeAt: 20})
			arms = append(arms, Arm{Name: fmt.Sprintf("late%d", ca), URL: late}, Arm{Name: fmt.Sprintf("early%d", ca), URL: early})
		}
		res, err := Run(context.Background(), Options{Arms: arms, Prompts: workload.Take(workload.Builtin(), 4), MaxNewTokens: 48, Trials: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range res.Arms[1:] {
			late := strings.HasPrefix(a.Arm.Name, "late")
			if a.Invalid == late || a.Agreement.IdenticalN != map[bool]int{true: 8}[late] {
				t.Errorf("baseline chunks %d, arm %s: invalid %v, %d/%d agree; %v", cb, a.Arm.Name, a.Invalid, a.Agreement.IdenticalN, a.Agreement.Outputs, a.Warnings)
			}
		}
	}
}

// misreport serves cfg's stream (paced by instant) but answers
// /server_info with incremental_streaming_output: says, as a server that
// misreports its streaming mode.
func misreport(t *testing.T, cfg sglangtest.Config, says bool) string {
	t.Helper()
	inner := sglangtest.New(instant(cfg))
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/server_info" {
			// An HTTP response: see .ci/errcheck-excludes.txt.
			_ = json.NewEncoder(w).Encode(map[string]any{"incremental_streaming_output": says})
			return
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// A server whose stream contradicts its /server_info is named for what
// it does: deltas where it says incremental_streaming_output: false
// (not "does not say", and not "is the server up?"), whole texts where it
// says true (not an arm that "computes something else").
func TestStreamModeMismatch(t *testing.T) {
	_, b := serve(t, sglangtest.Config{})
	for _, tc := range []struct {
		name string
		cfg  sglangtest.Config
		says bool
		want string
	}{
		{"deltas, says false", sglangtest.Config{TokensPerChunk: 2, Incremental: true}, false,
			"the server streams text deltas (--incremental-streaming-output) though /server_info says incremental_streaming_output: false; no output of this server can be read until its stream and its /server_info agree"},
		{"whole texts, says true", sglangtest.Config{TokensPerChunk: 2}, true,
			"the texts of the first 3 chunks each extend the one before: the server sends whole texts though /server_info says incremental_streaming_output: true; no output of this server can be read"},
	} {
		u := misreport(t, tc.cfg, tc.says)
		res, err := Run(context.Background(), Options{Arms: []Arm{{Name: "baseline", URL: b}, {Name: "pcie", URL: u}},
			Prompts: workload.Take(workload.Builtin(), 2), MaxNewTokens: 16, Trials: 1})
		var ie *InfraError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "is the server") {
			t.Errorf("%s: %v", tc.name, err)
		}
		if a := res.Arm("pcie"); a != nil && a.Agreement != nil && a.Agreement.Invalid {
			t.Errorf("%s: blamed on the output check: %v", tc.name, a.Warnings)
		}
	}
}

// A recipe's arm attached by URL keeps its env in the recipe, but
// arpatch launches nothing for it: the result says so, loudly.
func TestAttachedArmEnvWarned(t *testing.T) {
	_, b := serve(t, sglangtest.Config{})
	_, p := serve(t, sglangtest.Config{})
	res, err := Run(context.Background(), Options{Arms: []Arm{{Name: "baseline", URL: b}, {Name: "pcie", URL: p, Env: map[string]string{"SGLANG_FORCE_CUSTOM_AR_PCIE": "1"}}},
		Prompts: []string{"a"}, MaxNewTokens: 8, Trials: 1})
	if err != nil {
		t.Fatal(err)
	}
	if w := warnings(res.Arm("pcie")); !strings.Contains(w, "attached to "+p+", so arpatch applied none of the arm's environment (SGLANG_FORCE_CUSTOM_AR_PCIE=1)") {
		t.Errorf("warnings: %s", w)
	}
	if w := warnings(res.Arm("baseline")); strings.Contains(w, "environment") {
		t.Errorf("baseline: %s", w)
	}
}

// Options.AgreeTokens is the output check's prefix: an arm that differs
// from token 20 on agrees over the first 16 tokens and is INVALID over the
// default 32. It is an option of the run, not a process-wide setting, so
// two runs in one process use their own.
func TestAgreeTokensOption(t *testing.T) {
	t.Parallel() // real sockets and clock, but no timing asserted: waits overlap
	_, b := serve(t, sglangtest.Config{TokensPerChunk: 3})
	_, early := serve(t, sglangtest.Config{TokensPerChunk: 2, Variant: "early", DivergeAt: 20})
	for agree, invalid := range map[int]bool{16: false, 0: true, sglang.DefaultAgreeTokens: true} {
		res, err := Run(context.Background(), Options{Arms: []Arm{{Name: "baseline", URL: b}, {Name: "early", URL: early}},
			Prompts: workload.Take(workload.Builtin(), 4), MaxNewTokens: 48, Trials: 2, AgreeTokens: agree})
		if err != nil {
			t.Fatal(err)
		}
		if a := res.Arm("early"); a.Invalid != invalid || a.Agreement.IdenticalN != map[bool]int{false: 8}[invalid] {
			t.Errorf("AgreeTokens %d: invalid %v, %d/%d agree; %v", agree, a.Invalid, a.Agreement.IdenticalN, a.Agreement.Outputs, a.Warnings)
		}
	}
}

func TestFromRecipeAgreeTokens(t *testing.T) {
	rb := recipes.Bench{MaxNewTokens: 8, Trials: 1, NumPrompts: 2, SpeculativeNumSteps: 3, SpeculativeEagleTopK: 1, SpeculativeNumDraftTokens: 4}
	o, err := FromRecipe(rb, Overrides{AgreeThreshold: 0.9})
	if err != nil || o.AgreeTokens != sglang.DefaultAgreeTokens {
		t.Errorf("default: %d, %v", o.AgreeTokens, err)
	}
	n := 16
	if o, err := FromRecipe(rb, Overrides{AgreeTokens: &n, AgreeThreshold: 0.9}); err != nil || o.AgreeTokens != 16 {
		t.Errorf("override: %d, %v", o.AgreeTokens, err)
	}
	n = 0
	if _, err := FromRecipe(rb, Overrides{AgreeTokens: &n, AgreeThreshold: 0.9}); err == nil || !strings.HasPrefix(err.Error(), "agree_tokens: 0") {
		t.Errorf("0 tokens: %v", err)
	}
}

// TestImpossibleCountsAreInvalid: a server that reports ten times the
// tokens it generated (completion_tokens above max_new_tokens) is INVALID,
// never "faster": each of its requests fails naming the trial, prompt,
// chunk and field, and since it answered, the run is no infrastructure
// failure.
func TestImpossibleCountsAreInvalid(t *testing.T) { synctest.Test(t, testImpossibleCountsAreInvalid) }

func testImpossibleCountsAreInvalid(t *testing.T) {
	n := sglangtest.NewNetwork()
	defer n.Close()
	b, _ := n.Serve(sglangtest.New(sglangtest.Config{TokPerSec: 300, TTFT: time.Millisecond, TokensPerChunk: 2}))
	liar, _ := n.Serve(sglangtest.New(sglangtest.Config{TokPerSec: 300, TTFT: time.Millisecond, TokensPerChunk: 2, ClaimTokens: 10}))
	res, err := Run(context.Background(), Options{Arms: []Arm{{Name: "baseline", URL: b}, {Name: "pcie", URL: liar}},
		Prompts: []string{"a b", "c d"}, MaxNewTokens: 40, Trials: 5, HTTP: n.HTTP()})
	if err != nil {
		t.Fatal(err)
	}
	a := res.Arm("pcie")
	if a.Verdict != Invalid || !a.Verdict.Fails() || a.Levels[0].Deltas != nil ||
		!strings.Contains(warnings(a), "INVALID: 10 of 10 requests failed (10 with impossible data): the arm's speed leaves them out; the first: trial 1, concurrency 1, prompt 0: impossible data from the server: chunk 3: completion_tokens 50 is more than the request's max_new_tokens 40") {
		t.Errorf("lying arm: %v %v", a.Verdict, a.Warnings)
	}
}

// An attached server that answered, then stops answering (its streams
// cut, /health_generate failing) is an infrastructure failure naming its
// port and how many requests it answered, not an INVALID arm.
func TestServerStopsAnswering(t *testing.T) {
	defer func(w time.Duration) { serverDeathWait = w }(serverDeathWait)
	serverDeathWait = 50 * time.Millisecond
	_, b := serve(t, sglangtest.Config{})
	inner := sglangtest.New(instant(sglangtest.Config{}))
	var generated atomic.Int64
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/generate" && generated.Add(1) > 4 || r.URL.Path == "/health_generate" && generated.Load() > 4 {
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					_ = c.Close()
					return
				}
			}
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(dead.Close)
	_, err := Run(context.Background(), Options{Arms: []Arm{{Name: "baseline", URL: b}, {Name: "pcie", URL: dead.URL}},
		Prompts: []string{"a", "b", "c", "d"}, MaxNewTokens: 8, Trials: 3})
	var ie *InfraError
	port := dead.URL[strings.LastIndex(dead.URL, ":")+1:]
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "arm pcie: the server on port "+port+" stopped answering after 4 answered requests (trial 2, concurrency 1: 4 of 4 requests failed") {
		t.Errorf("err = %v", err)
	}
}
