package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/arpatch/arpatch/harness/sglangtest"
	"github.com/arpatch/arpatch/harness/stats"
)

// protoServer is an SGLang-protocol server written for this test alone,
// apart from harness/sglangtest: POST /generate streams "data: {json}"
// chunks with the whole text so far and cumulative meta_info counts, then
// "data: [DONE]"; /server_info and /health_generate answer. Token k of a
// request is due at ttft + k/rate after the request arrives; the first
// chunk carries token 0, each later one `chunk` tokens (one verify step),
// and the last reports spec_verify_ct = 1 + ceil((n-1)/chunk).
type protoServer struct {
	rate    float64 // decode tok/s
	ttft    time.Duration
	chunk   int
	corrupt bool // every token from the 4th on differs
	abortN  int  // every abortN-th request ends with finish_reason abort
	reqs    atomic.Int64
}

func (p *protoServer) verify(n int) int { return 1 + (n-1+p.chunk-1)/p.chunk }

func (p *protoServer) token(prompt string, k int) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", prompt, k)
	if p.corrupt && k >= 3 {
		h.Write([]byte("nan"))
	}
	return fmt.Sprintf(" w%03d", h.Sum64()%1000)
}

func (p *protoServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health_generate":
		return
	case "/server_info":
		// An HTTP response: see .ci/errcheck-excludes.txt.
		_ = json.NewEncoder(w).Encode(map[string]any{"version": "proto", "incremental_streaming_output": false})
		return
	case "/generate":
	default:
		http.NotFound(w, r)
		return
	}
	start := time.Now()
	id := p.reqs.Add(1)
	var req struct {
		Text           string `json:"text"`
		SamplingParams struct {
			MaxNewTokens int `json:"max_new_tokens"`
		} `json:"sampling_params"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	n := req.SamplingParams.MaxNewTokens
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	text := ""
	send := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		fl.Flush()
	}
	for done := 0; done < n; {
		step := p.chunk
		if done == 0 {
			step = 1
		}
		step = min(step, n-done)
		due := p.ttft + time.Duration(float64(done+step-1)/p.rate*float64(time.Second))
		select {
		case <-time.After(time.Until(start.Add(due))):
		case <-r.Context().Done():
			return
		}
		for k := done; k < done+step; k++ {
			text += p.token(req.Text, k)
		}
		done += step
		meta := map[string]any{"id": id, "prompt_tokens": len(strings.Fields(req.Text)), "completion_tokens": done, "cached_tokens": 0, "finish_reason": nil}
		if p.abortN > 0 && id%int64(p.abortN) == 0 && done > 1 {
			meta["finish_reason"] = map[string]any{"type": "abort", "message": "internal error (proto)", "status_code": 500, "err_type": nil}
			send(map[string]any{"text": text, "meta_info": meta})
			break
		}
		if done == n {
			meta["finish_reason"] = map[string]any{"type": "length", "length": n}
			meta["spec_verify_ct"] = p.verify(n)
			meta["e2e_latency"] = time.Since(start).Seconds()
		}
		send(map[string]any{"text": text, "meta_info": meta})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

// chunkTokens is how many tokens each chunk after the first brings.
const chunkTokens = 8

// TestAcceptance runs the bench against protoServer at concurrency 1 and
// at 1,4,16: decode tok/s within 2% of the configured rate at every level,
// the exact accept length, "slower" for an arm 40% slower, INVALID for a
// corrupting and for an aborting arm; and the per-trial metrics follow
// SGLang's bench_serving definitions (Upstream:
// python/sglang/bench_serving.py@84118acf50b3a4c74e85e9ff9033792552de1a76
// (calculate_metrics: TPOT = (latency - ttft) / (output_len - 1), its
// median and p99 = np.percentile(tpots, 99), output throughput =
// sum(output_lens) / dur_s; async_request_sglang_generate: a chunk's gap
// spread over its new tokens for ITL)).
//
// It runs on the virtual clock of a testing/synctest bubble, with the
// servers on an in-memory network (sglangtest.Network: only the
// transport, the protocol is protoServer's): the server paces its chunks
// with time.After and the bench stamps them with time.Now on that clock,
// so every rate is exact and no load on the machine can move it. The
// bench's timing over real sockets on the wall clock is
// TestMeasuredRate's (harness/sglang) and the CLI scripts' (bench.txtar).
func TestAcceptance(t *testing.T) {
	for _, levels := range [][]int{{1}, {1, 4, 16}} {
		t.Run(fmt.Sprint(levels), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { testAcceptance(t, levels) })
		})
	}
}

func testAcceptance(t *testing.T, levels []int) {
	const tokens, rate, chunk = 33, 500.0, chunkTokens
	// The first token comes a chunk's interval (16 ms) after the request.
	const ttft = time.Duration(chunk / rate * float64(time.Second))
	// 16 prompts, so that 16 requests are in flight at level 16.
	var prompts []string
	for i := 0; i < 16; i++ {
		prompts = append(prompts, fmt.Sprintf("prompt %d %s", i, strings.Repeat("word ", i%5)))
	}
	n := sglangtest.NewNetwork()
	defer n.Close()
	serve := func(p *protoServer) string {
		u, _ := n.Serve(p)
		return u
	}
	base := &protoServer{rate: rate, ttft: ttft, chunk: chunk}
	slow := &protoServer{rate: rate * 0.6, ttft: ttft, chunk: chunk}
	// 4 trials a side at 1 (a trial is 16 requests in a row), 8 in the
	// sweep, as the wall-clock form of this test needed against a
	// stretched burst; on the virtual clock no trial is stretched.
	trials := 4
	if len(levels) > 1 {
		trials = 8
	}
	res, err := Run(context.Background(), Options{Arms: []Arm{{Name: "baseline", URL: serve(base)}, {Name: "slow", URL: serve(slow)}},
		Prompts: prompts, MaxNewTokens: tokens, Trials: trials, Concurrency: levels, SpecAlgorithm: "EAGLE3", HTTP: n.HTTP()})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Levels(); fmt.Sprint(got) != fmt.Sprint(levels) || len(res.Findings) != 0 {
		t.Fatalf("levels %v, findings %v", got, res.Findings)
	}
	for name, want := range map[string]float64{"baseline": rate, "slow": rate * 0.6} {
		a := res.Arm(name)
		for _, l := range a.Levels {
			if got := l.Summaries["decode_tok_s"].Center; math.Abs(got/want-1) > 0.02 {
				t.Errorf("%s at %d: decode %.1f tok/s, configured %.0f", name, l.Concurrency, got, want)
			}
			if got, exact := l.Summaries["accept_length"].Center, float64(tokens)/float64(base.verify(tokens)); got != exact {
				t.Errorf("%s at %d: accept length %v, want %v", name, l.Concurrency, got, exact)
			}
		}
		for i, tr := range a.Trials {
			benchServing(t, tr, a.Metrics[i], tokens)
		}
	}
	sl := res.Arm("slow")
	for _, l := range sl.Levels {
		if l.Verdict != Slower || l.Deltas["tok_s"].Pct > -25 {
			t.Errorf("slow arm at %d: %v %+v", l.Concurrency, l.Verdict, l.Deltas["tok_s"])
		}
	}
	if sl.Invalid || sl.Agreement.IdenticalN != trials*len(prompts)*len(levels) || sl.Verdict != Slower {
		t.Errorf("slow arm: %v, invalid %v, agreement %+v", sl.Verdict, sl.Invalid, sl.Agreement)
	}

	corrupt := &protoServer{rate: rate, ttft: ttft, chunk: chunk, corrupt: true}
	aborting := &protoServer{rate: rate, ttft: ttft, chunk: chunk, abortN: 3}
	res, err = Run(context.Background(), Options{Arms: []Arm{{Name: "baseline", URL: serve(&protoServer{rate: rate, ttft: ttft, chunk: chunk})},
		{Name: "corrupt", URL: serve(corrupt)}, {Name: "aborting", URL: serve(aborting)}},
		Prompts: prompts, MaxNewTokens: tokens, Trials: 1, Concurrency: levels, HTTP: n.HTTP()})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"corrupt", "aborting"} {
		a := res.Arm(name)
		if a.Verdict != Invalid || !a.Verdict.Fails() {
			t.Errorf("%s: verdict %v %v", name, a.Verdict, a.Warnings)
		}
		for _, l := range a.Levels {
			if l.Verdict != Invalid {
				t.Errorf("%s at %d: %v", name, l.Concurrency, l.Verdict)
			}
		}
	}
	if ag := res.Arm("corrupt").Agreement; ag.IdenticalN != 0 || ag.Outputs != len(prompts)*len(levels) {
		t.Errorf("corrupt agreement %+v", ag)
	}
	if w := warnings(res.Arm("aborting")); !strings.Contains(w, "aborted by the server: internal error (proto)") {
		t.Errorf("aborting warnings: %s", w)
	}
	if res.Arm("baseline").Verdict != Baseline {
		t.Errorf("baseline verdict %v", res.Arm("baseline").Verdict)
	}
}

// benchServing recomputes a trial's metrics from its samples by SGLang's
// bench_serving definitions and compares them with stats.Compute's.
func benchServing(t *testing.T, tr stats.Trial, m stats.Metrics, tokens int) {
	t.Helper()
	total := 0
	var tpots []float64
	for _, s := range tr.Samples {
		total += s.CompletionTokens
		tpots = append(tpots, (s.E2E-s.TTFT)/float64(s.CompletionTokens-1)*1000)
		// ITL: one entry per token after the first, each chunk's gap
		// spread evenly over its tokens (runs of `chunk` equal entries),
		// adding up to no more than the time from the first chunk to the
		// end.
		if len(s.ITL) != tokens-1 {
			t.Fatalf("prompt %d: %d ITL entries for %d tokens", s.Prompt, len(s.ITL), tokens)
		}
		sum := 0.0
		for i, x := range s.ITL {
			sum += x
			if i%chunkTokens != 0 && x != s.ITL[i-1] {
				t.Errorf("prompt %d: ITL[%d] = %v, ITL[%d] = %v within one chunk", s.Prompt, i, x, i-1, s.ITL[i-1])
			}
		}
		if sum > s.E2E-s.TTFT+1e-9 {
			t.Errorf("prompt %d: ITL sum %v s, E2E-TTFT %v s", s.Prompt, sum, s.E2E-s.TTFT)
		}
	}
	if want := float64(total) / tr.Wall; m.TokPerSec != want {
		t.Errorf("output throughput %v, sum(tokens)/duration %v", m.TokPerSec, want)
	}
	sort.Float64s(tpots)
	if want := stats.Quantile(tpots, 0.5); math.Abs(m.TPOTms-want) > 1e-9 {
		t.Errorf("TPOT median %v ms, bench_serving %v ms", m.TPOTms, want)
	}
	// np.percentile(tpots, 99): k = (n-1) x 0.99 between order statistics.
	k := float64(len(tpots)-1) * 0.99
	lo := int(k)
	if want := tpots[lo] + (tpots[min(lo+1, len(tpots)-1)]-tpots[lo])*(k-float64(lo)); math.Abs(m.TPOTp99ms-want) > 1e-9 || m.TPOTp99ms < m.TPOTms {
		t.Errorf("TPOT p99 %v ms, bench_serving %v ms (median %v)", m.TPOTp99ms, want, m.TPOTms)
	}
	if m.Tokens != total || m.Requests != len(tr.Samples) || m.Errors != 0 {
		t.Errorf("metrics %+v", m)
	}
}
