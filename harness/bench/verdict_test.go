package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/sglang"
	"github.com/arpatch/arpatch/harness/sglangtest"
	"github.com/arpatch/arpatch/harness/stats"
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
