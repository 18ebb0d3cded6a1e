package sglang_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/arpatch/arpatch/harness/sglang"
	"github.com/arpatch/arpatch/harness/sglangtest"
	"github.com/arpatch/arpatch/harness/stats"
)

// fakeClock returns times from a list, one per call.
func fakeClock(ts ...time.Duration) func() time.Time {
	base := time.Unix(1000, 0)
	i := 0
	return func() time.Time {
		t := base.Add(ts[min(i, len(ts)-1)])
		i++
		return t
	}
}

func TestReadStreamMetrics(t *testing.T) {
	stream := `data: {"text": " a", "meta_info": {"id": "r", "prompt_tokens": 5, "completion_tokens": 1, "finish_reason": null}}

data: {"text": " a b c d", "meta_info": {"completion_tokens": 4, "finish_reason": null}}

data: {"text": " a b c d", "meta_info": {"completion_tokens": 4, "finish_reason": null}}

data: {"text": " a b c d e f", "meta_info": {"completion_tokens": 6, "spec_verify_ct": 3, "spec_accept_length": 2.0, "finish_reason": {"type": "length", "length": 6}}}

data: [DONE]
`
	var s sglang.Sample
	start := time.Unix(1000, 0)
	// One clock reading per line read, blank lines included.
	clock := fakeClock(100*time.Millisecond, 101*time.Millisecond, 130*time.Millisecond, 131*time.Millisecond, 135*time.Millisecond, 136*time.Millisecond,
		150*time.Millisecond, 151*time.Millisecond, 160*time.Millisecond)
	sglang.ReadStream(strings.NewReader(stream), start, clock, false, 0, &s)
	if s.Err != "" {
		t.Fatal(s.Err)
	}
	if s.TTFT != 0.1 || s.E2E != 0.16 || s.CompletionTokens != 6 || s.PromptTokens != 5 || s.SpecVerifyCt != 3 || s.SpecAcceptLength != 2 || s.FinishReason != "length" || s.Chunks != 4 || s.Text != " a b c d e f" {
		t.Errorf("sample = %+v", s)
	}
	// 3 tokens 30 ms after the first (10 ms each), then a chunk with no new
	// token (skipped), then 2 tokens 20 ms after the last that brought any.
	want := []float64{0.01, 0.01, 0.01, 0.01, 0.01}
	if len(s.ITL) != len(want) {
		t.Fatalf("itl = %v", s.ITL)
	}
	for i := range want {
		if math.Abs(s.ITL[i]-want[i]) > 1e-9 {
			t.Errorf("itl[%d] = %v, want %v", i, s.ITL[i], want[i])
		}
	}
	if d := s.DecodeTokPerSec(); math.Abs(d-5/0.06) > 1e-6 {
		t.Errorf("decode tok/s = %v, want %v", d, 5/0.06)
	}
}

func TestReadStreamFailures(t *testing.T) {
	for _, tc := range []struct{ name, stream, want string }{
		{"dropped", "data: {\"text\": \" a\", \"meta_info\": {\"completion_tokens\": 1}}\n\n", "the stream ended before [DONE] after 1 chunks"},
		{"malformed", "data: {\"text\": \" a\", \"meta_info\": {\"completion_tokens\": 1}}\n\ndata: {nope\n\n", "malformed chunk 2"},
		{"error object", "data: {\"error\": {\"message\": \"out of memory\"}}\n\n", `server error: {"message": "out of memory"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s sglang.Sample
			sglang.ReadStream(strings.NewReader(tc.stream), time.Now(), time.Now, false, 0, &s)
			if !strings.Contains(s.Err, tc.want) {
				t.Errorf("err = %q, want %q", s.Err, tc.want)
			}
		})
	}
	// A legacy string finish reason and a stream without [DONE] after it
	// count as finished.
	var s sglang.Sample
	sglang.ReadStream(strings.NewReader("data: {\"text\": \" a\", \"meta_info\": {\"completion_tokens\": 1, \"finish_reason\": \"stop\"}}\n"), time.Now(), time.Now, false, 0, &s)
	if s.Err != "" || s.FinishReason != "stop" {
		t.Errorf("legacy finish: %+v", s)
	}
}

// An abort in the stream (SGLang's FINISH_ABORT.to_json: an object with
// type, message, status_code, err_type, then [DONE]) is a failed request
// with the server's message; a legacy string "abort" likewise.
func TestReadStreamAbort(t *testing.T) {
	for _, tc := range []struct{ name, stream, want string }{
		{"object", `data: {"text": " a", "meta_info": {"completion_tokens": 1, "finish_reason": null}}

data: {"text": " a", "meta_info": {"completion_tokens": 1, "finish_reason": {"type": "abort", "message": "The input (9000 tokens) is longer than the model's context length (8192 tokens).", "status_code": 400, "err_type": null}}}

data: [DONE]
`, "aborted by the server: The input (9000 tokens) is longer than the model's context length (8192 tokens)."},
		{"string", "data: {\"text\": \"\", \"meta_info\": {\"completion_tokens\": 0, \"finish_reason\": \"abort\"}}\n\ndata: [DONE]\n", "aborted by the server: abort"},
	} {
		var s sglang.Sample
		sglang.ReadStream(strings.NewReader(tc.stream), time.Now(), time.Now, false, 0, &s)
		if s.Err != tc.want || !s.Aborted() {
			t.Errorf("%s: err %q aborted %v, want %q", tc.name, s.Err, s.Aborted(), tc.want)
		}
	}
}

// With --incremental-streaming-output each chunk's text is a delta
// (completion_tokens stays the total): the client joins the deltas. Read
// as whole texts, the same stream is refused, not cut to its last delta.
func TestReadStreamIncremental(t *testing.T) {
	stream := `data: {"text": " a", "meta_info": {"completion_tokens": 1, "finish_reason": null}}

data: {"text": " b c", "meta_info": {"completion_tokens": 3, "finish_reason": null}}

data: {"text": " d", "meta_info": {"completion_tokens": 4, "finish_reason": {"type": "length", "length": 4}}}

data: [DONE]
`
	var s sglang.Sample
	sglang.ReadStream(strings.NewReader(stream), time.Now(), time.Now, true, 3, &s)
	if s.Err != "" || s.Text != " a b c d" || s.TextAtAgree != " a b c" || s.TokensAtAgree != 3 || s.CompletionTokens != 4 {
		t.Errorf("incremental: %+v", s)
	}
	var whole sglang.Sample
	sglang.ReadStream(strings.NewReader(stream), time.Now(), time.Now, false, 3, &whole)
	if !strings.Contains(whole.Err, "chunk 2's text does not extend the text so far: the server streams text deltas") {
		t.Errorf("deltas read as whole texts: %+v", whole)
	}
	for _, tc := range []struct {
		info        map[string]any
		incr, known bool
	}{
		{map[string]any{"incremental_streaming_output": true}, true, true},
		{map[string]any{"incremental_streaming_output": false}, false, true},
		{map[string]any{"version": "0.5"}, false, false},
		{nil, false, false},
	} {
		if incr, known := sglang.IncrementalStreaming(tc.info); incr != tc.incr || known != tc.known {
			t.Errorf("IncrementalStreaming(%v) = %v, %v", tc.info, incr, known)
		}
	}
}

// rateStream is one of TestMeasuredRate's streams: an in-test server at
// rate tok/s, chunk tokens a chunk, over loopback on the wall clock.
type rateStream struct {
	rate    float64 // tok/s
	chunk   int     // tokens a chunk
	tokens  int     // tokens asked for: span seconds after the first
	srv     *sglangtest.Server
	warm, s sglang.Sample
}

// off is the measured decode rate's error, as a fraction of the set rate.
func (r *rateStream) off() float64 { return r.s.DecodeTokPerSec()/r.rate - 1 }

// streamAtRates runs TestMeasuredRate's three streams at once, each
// decoding for span seconds after a warm-up request on its connection,
// and returns them once all have ended.
func streamAtRates(span float64) []*rateStream {
	runs := []*rateStream{{rate: 200, chunk: 1}, {rate: 150, chunk: 3}, {rate: 90, chunk: 4}}
	var wg sync.WaitGroup
	for _, r := range runs {
		r.tokens = 1 + int(span*r.rate)
		r.srv = sglangtest.New(sglangtest.Config{TokPerSec: r.rate, TTFT: 30 * time.Millisecond, TokensPerChunk: r.chunk, AcceptLength: max(1, float64(r.chunk)-0.5)}) // at least 1: a verify pass yields a token
		ts := httptest.NewServer(r.srv)
		c := sglang.NewClient(ts.URL)
		wg.Go(func() {
			defer ts.Close()
			if r.warm = c.Generate(context.Background(), 0, sglang.Request{Text: "warm-up", MaxNewTokens: 2}); r.warm.Err == "" {
				r.s = c.Generate(context.Background(), 0, sglang.Request{Text: "hello world", MaxNewTokens: r.tokens})
			}
		})
	}
	wg.Wait()
	return runs
}

// TestMeasuredRate checks the real timing path: over loopback, on the
// wall clock, decode tok/s is within 2% of the rate the server was told
// to produce, TTFT is no less than the server's (the client cannot see a
// chunk before it is sent), and the accept length is exactly the server's
// tokens / verify count. The server keeps an absolute schedule (no sleep
// drift accumulates); a short request first opens the connection and
// runs the code paths once, as a bench's warm-up does, so the measured
// one's first chunk does not pay for them. The three streams run at once.
//
// What only the wall clock shows (TestMeasuredRateExact checks the
// arithmetic exactly on a virtual clock, where the client's own work
// takes no time): a client that cannot keep up with the stream, chunks
// held back on the way from the server's flush to the client's read
// (socket, HTTP buffering), a stamp that is not the monotonic clock.
// Each makes the rate wrong by a fraction that does not shrink with the
// span, or delays the last chunk's stamp against the first's.
//
// What 2% allows is the scheduling delay of reading the first and the
// last chunk: over a span of S seconds, 20*S ms. BenchmarkMeasuredRateError
// measures the error at each span (figures in docs/performance.md): on
// this 2-core machine at load average 4-7, the worst of 270 streams over
// 2 s was 0.75% off; over 1 s, 3 rounds of 60 had a stream more than 2%
// off; at load 6-9, 1 round in 20 to 40 over 2 s had one; up to 120 ms
// of delay was seen at load average 24. So the streams
// decode for 2 s, and only if a rate is off by more than 2% are all three
// run again over 6 s (120 ms allowed), the test as it always ran before:
// a loaded machine costs 6 s more, not a failure, and a rate 2% off over
// both spans fails. The price: an error that comes and goes (a client
// that now and then holds a chunk back) and spoils a run with
// probability p fails the test with probability p², not p, since both
// spans must show it. It stays so: one run cannot tell such an error from
// the load this re-run forgives, and what the client gets wrong every
// time (arithmetic, clock, an overall timeout) the virtual-clock tests
// TestMeasuredRateExact and TestMeasuredRateLong catch on every run. How
// late the first chunk may be read is the machine's speed, not the
// client's logic: BenchmarkTimingSkew reports it (ttft-late-ms).
func TestMeasuredRate(t *testing.T) {
	for _, span := range []float64{2, 6} {
		again := false
		for _, r := range streamAtRates(span) {
			t.Run(fmt.Sprintf("%v s, %v tok/s, %d a chunk", span, r.rate, r.chunk), func(t *testing.T) {
				s := r.s
				if r.warm.Err != "" {
					t.Fatal(r.warm.Err)
				}
				if s.Err != "" {
					t.Fatal(s.Err)
				}
				if math.Abs(r.off()) > 0.02 {
					msg := fmt.Sprintf("measured %.2f tok/s, off by %.1f%% (TTFT %.3f s, E2E %.3f s)", s.DecodeTokPerSec(), r.off()*100, s.TTFT, s.E2E)
					if span < 6 {
						t.Log(msg + ": all three again over 6 s")
						again = true
					} else {
						t.Error(msg)
					}
				}
				if s.CompletionTokens != r.tokens || s.SpecVerifyCt != r.srv.VerifyCount(r.tokens) {
					t.Errorf("tokens %d verify %d, want %d and %d", s.CompletionTokens, s.SpecVerifyCt, r.tokens, r.srv.VerifyCount(r.tokens))
				}
				if s.TTFT < 0.03 {
					t.Errorf("TTFT %.3f s, before the server's 0.03 s", s.TTFT)
				}
			})
		}
		if !again {
			break
		}
	}
}

// TestMeasuredRateExact streams from in-test servers on an in-memory
// network in a synctest bubble, where the servers' pacing and the
// client's time stamps share the bubble's fake clock: TTFT, E2E, every
// inter-token latency and the decode rate come out exactly as the servers
// were told, for one stream and for twelve at once through one client
// sharing the clock, at three rates.
func TestMeasuredRateExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := sglangtest.NewNetwork()
		defer n.Close()
		type arm struct {
			rate  float64
			chunk int
			url   string
		}
		arms := []*arm{{rate: 200, chunk: 1}, {rate: 150, chunk: 3}, {rate: 90, chunk: 4}}
		for _, a := range arms {
			a.url, _ = n.Serve(sglangtest.New(sglangtest.Config{TokPerSec: a.rate, TTFT: 30 * time.Millisecond, TokensPerChunk: a.chunk}))
		}
		check := func(a *arm, s sglang.Sample) {
			t.Helper()
			const tokens = 61
			if s.Err != "" || s.CompletionTokens != tokens {
				t.Fatalf("%v tok/s: %d tokens, err %q", a.rate, s.CompletionTokens, s.Err)
			}
			span := time.Duration(float64(tokens-1) / a.rate * float64(time.Second))
			if s.TTFT != 0.03 || s.E2E != (30*time.Millisecond+span).Seconds() {
				t.Errorf("%v tok/s: TTFT %v s, E2E %v s; want 0.03 and %v", a.rate, s.TTFT, s.E2E, (30*time.Millisecond + span).Seconds())
			}
			if got := s.DecodeTokPerSec(); math.Abs(got/a.rate-1) > 1e-6 {
				t.Errorf("%v tok/s: measured %v", a.rate, got)
			}
			// Each chunk after the first is due chunk/rate after the one
			// before (the last may be short), spread over its tokens.
			for i, x := range s.ITL[:tokens-1-(tokens-1)%a.chunk] {
				if math.Abs(x-1/a.rate) > 1e-6 {
					t.Fatalf("%v tok/s: ITL[%d] = %v s, want %v", a.rate, i, x, 1/a.rate)
				}
			}
		}
		c := sglang.NewClient(arms[0].url)
		c.HTTP = n.HTTP()
		for _, a := range arms {
			c.URL = a.url
			check(a, c.Generate(context.Background(), 0, sglang.Request{Text: "hello world", MaxNewTokens: 61}))
		}
		// Twelve streams in flight, four per server, one client, one clock.
		var wg sync.WaitGroup
		samples := make([]sglang.Sample, 12)
		for i := range samples {
			a := arms[i%3]
			cl := *c
			cl.URL = a.url
			wg.Go(func() {
				samples[i] = cl.Generate(context.Background(), i, sglang.Request{Text: fmt.Sprintf("prompt %d", i), MaxNewTokens: 61})
			})
		}
		wg.Wait()
		for i, s := range samples {
			check(arms[i%3], s)
		}
	})
}

// TestMeasuredRateLong streams for 10 s on a synctest bubble's clock,
// through NewClient's own http.Client with only its Transport swapped
// for the in-memory network's, so that the client's settings (NewClient
// promises no overall timeout) meet a stream as long as a bench's: every
// token arrives and the rate is exact. TestMeasuredRate's real streams
// last 2 s, shorter than such a timeout might be.
func TestMeasuredRateLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := sglangtest.NewNetwork()
		defer n.Close()
		const rate, tokens = 100.0, 1001 // 10 s of decode after the TTFT
		url, _ := n.Serve(sglangtest.New(sglangtest.Config{TokPerSec: rate, TTFT: 30 * time.Millisecond, TokensPerChunk: 4}))
		c := sglang.NewClient(url)
		c.HTTP.Transport = n.HTTP().Transport
		s := c.Generate(context.Background(), 0, sglang.Request{Text: "hello world", MaxNewTokens: tokens})
		if s.Err != "" || s.CompletionTokens != tokens {
			t.Fatalf("%d tokens, err %q; want %d", s.CompletionTokens, s.Err, tokens)
		}
		if s.E2E < 10 {
			t.Errorf("E2E %v s; want the stream to last 10 s", s.E2E)
		}
		if got := s.DecodeTokPerSec(); math.Abs(got/rate-1) > 1e-6 {
			t.Errorf("measured %v tok/s, want %v", got, rate)
		}
	})
}

func TestHTTPErrorAndHealth(t *testing.T) {
	srv := sglangtest.New(sglangtest.Config{HTTP500Every: 1, StartDelay: time.Hour})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	c := sglang.NewClient(ts.URL)
	s := c.Generate(context.Background(), 0, sglang.Request{Text: "x", MaxNewTokens: 4})
	if !strings.HasPrefix(s.Err, "HTTP 500: internal error (injected)") {
		t.Errorf("err = %q", s.Err)
	}
	if err := c.Health(context.Background()); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("health before start delay: %v", err)
	}
}

// BenchmarkStreamParse measures how many chunks per second ReadStream
// parses on one core, from memory.
//
//	go test -run XXX -bench StreamParse ./harness/sglang
func BenchmarkStreamParse(b *testing.B) {
	var sb strings.Builder
	text := ""
	const chunks = 1000
	for i := 1; i <= chunks; i++ {
		text += " w"
		sb.WriteString(`data: {"text": "` + text[max(0, len(text)-400):] + `", "meta_info": {"id": "r", "prompt_tokens": 12, "completion_tokens": ` + itoa(i) + `, "cached_tokens": 0, "finish_reason": null}}` + "\n\n")
	}
	sb.WriteString("data: [DONE]\n\n")
	stream := sb.String()
	b.SetBytes(int64(len(stream)))
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		var s sglang.Sample
		sglang.ReadStream(strings.NewReader(stream), start, time.Now, false, 0, &s)
		if s.Chunks != chunks {
			b.Fatalf("parsed %d chunks", s.Chunks)
		}
	}
	b.ReportMetric(float64(chunks*b.N)/b.Elapsed().Seconds(), "chunks/s")
}

// BenchmarkTimingSkew streams from the in-test server at 2,000 chunks/s
// (one token each) and reports how far the measured decode rate is from
// the true one, in percent, and how late after the server's 1 ms TTFT
// the first chunk was read, in ms (worst of b.N).
func BenchmarkTimingSkew(b *testing.B) {
	srv := sglangtest.New(sglangtest.Config{TokPerSec: 2000, TTFT: time.Millisecond, TokensPerChunk: 1})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	c := sglang.NewClient(ts.URL)
	var worst, late float64
	for i := 0; i < b.N; i++ {
		s := c.Generate(context.Background(), 0, sglang.Request{Text: "skew", MaxNewTokens: 1000})
		if s.Err != "" {
			b.Fatal(s.Err)
		}
		worst = math.Max(worst, math.Abs(s.DecodeTokPerSec()/2000-1)*100)
		late = math.Max(late, (s.TTFT-0.001)*1000)
	}
	b.ReportMetric(worst, "skew-%")
	b.ReportMetric(late, "ttft-late-ms")
}

// BenchmarkMeasuredRateError runs TestMeasuredRate's three streams at
// once, b.N times over each decode span, and reports how far the measured
// decode rates are from the set ones over the 3*b.N streams: the median,
// 99th percentile and worst |error| in percent, and the share of rounds
// in which a stream was more than 2% off (TestMeasuredRate's tolerance;
// over 2 s such a round makes the test run again over 6 s). Each round
// takes the span plus about 0.1 s.
//
//	go test -run XXX -bench MeasuredRateError/2s -benchtime 60x ./harness/sglang
func BenchmarkMeasuredRateError(b *testing.B) {
	for _, span := range []float64{0.5, 1, 2, 3, 6} {
		b.Run(fmt.Sprintf("%vs", span), func(b *testing.B) {
			var errs []float64
			over := 0
			for i := 0; i < b.N; i++ {
				worst := 0.0
				for _, r := range streamAtRates(span) {
					if r.s.Err != "" || r.warm.Err != "" {
						b.Fatal(r.warm.Err, r.s.Err)
					}
					errs = append(errs, math.Abs(r.off())*100)
					worst = max(worst, math.Abs(r.off()))
				}
				if worst > 0.02 {
					over++
				}
			}
			b.ReportMetric(stats.Quantile(errs, 0.5), "median-err-%")
			b.ReportMetric(stats.Quantile(errs, 0.99), "p99-err-%")
			b.ReportMetric(slices.Max(errs), "max-err-%")
			b.ReportMetric(float64(over)/float64(b.N), "rounds-over-2%")
		})
	}
}

func itoa(n int) string {
	s := ""
	for {
		s = string(rune('0'+n%10)) + s
		n /= 10
		if n == 0 {
			return s
		}
	}
}

// generateFrom sends one request, for a prompt of 5 bytes and at most 8
// new tokens, to a server that answers with body, from a client that
// knows the server's speculative_num_steps (steps).
func generateFrom(t *testing.T, steps int, body string) sglang.Sample {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, body)
	}))
	defer srv.Close()
	c := sglang.NewClient(srv.URL)
	c.SpecSteps = steps
	return c.Generate(context.Background(), 3, sglang.Request{Text: "a b c", MaxNewTokens: 8})
}

// TestImpossibleCounts: every count a server reports is bounded by what
// the request allows; each bound refuses the value past it, naming the
// chunk and the field, and accepts the value at it.
func TestImpossibleCounts(t *testing.T) {
	chunk := func(meta string) string {
		return `data: {"text": " a", "meta_info": {` + meta + `}}` + "\n\n"
	}
	done := "data: [DONE]\n\n"
	for _, c := range []struct {
		name  string
		steps int
		body  string
		want  string // "" : accepted
	}{
		{"at every bound", 3, chunk(`"prompt_tokens": 69, "completion_tokens": 1`) + chunk(`"prompt_tokens": 69, "completion_tokens": 8, "spec_verify_ct": 2, "spec_accept_length": 4, "finish_reason": {"type": "length"}`) + done, ""},
		{"steps unknown", 0, chunk(`"completion_tokens": 8, "spec_verify_ct": 1, "spec_accept_length": 8`) + done, ""},
		{"a chunk without counts", 3, chunk(`"completion_tokens": 4`) + chunk(`"finish_reason": null`) + chunk(`"completion_tokens": 6`) + done, ""},
		{"10x the tokens", 3, chunk(`"completion_tokens": 80`) + done, "impossible data from the server: chunk 1: completion_tokens 80 is more than the request's max_new_tokens 8"},
		{"would overflow a sum", 3, chunk(`"completion_tokens": 9223372036854775807`) + done, "chunk 1: completion_tokens 9223372036854775807 is more than the request's max_new_tokens 8"},
		{"beyond int64", 3, chunk(`"completion_tokens": 9223372036854775808`) + done, "malformed chunk 1: json: cannot unmarshal number 9223372036854775808 into Go struct field"},
		{"not an integer", 3, chunk(`"completion_tokens": 1e30`) + done, "completion_tokens of type int"},
		{"negative tokens", 3, chunk(`"completion_tokens": -1`) + done, "chunk 1: completion_tokens -1 is negative"},
		{"tokens go back", 3, chunk(`"completion_tokens": 4`) + chunk(`"completion_tokens": 2`) + done, "chunk 2: completion_tokens 2 is less than an earlier chunk's 4"},
		{"prompt too long", 3, chunk(`"prompt_tokens": 70, "completion_tokens": 1`) + done, "chunk 1: prompt_tokens 70 for a prompt of 5 bytes (at most one token per byte, and 64 special tokens)"},
		{"prompt overflow", 3, chunk(`"prompt_tokens": 9223372036854775807, "completion_tokens": 1`) + done, "prompt_tokens 9223372036854775807 for a prompt of 5 bytes"},
		{"negative prompt", 3, chunk(`"prompt_tokens": -5`) + done, "chunk 1: prompt_tokens -5 is negative"},
		{"verify above tokens", 3, chunk(`"completion_tokens": 8, "spec_verify_ct": 9`) + done, "chunk 1: spec_verify_ct 9 is more than completion_tokens 8 (every verify pass yields a token)"},
		{"verify overflow", 3, chunk(`"completion_tokens": 8, "spec_verify_ct": 9223372036854775807`) + done, "spec_verify_ct 9223372036854775807 is more than completion_tokens 8"},
		{"negative verify", 3, chunk(`"completion_tokens": 8, "spec_verify_ct": -1`) + done, "chunk 1: spec_verify_ct -1 is negative"},
		{"verify goes back", 3, chunk(`"completion_tokens": 4, "spec_verify_ct": 3`) + chunk(`"completion_tokens": 6, "spec_verify_ct": 2`) + done, "chunk 2: spec_verify_ct 2 is less than an earlier chunk's 3"},
		{"too many tokens per pass", 3, chunk(`"completion_tokens": 8, "spec_verify_ct": 1`) + done, "chunk 1: completion_tokens 8 from 1 verify passes: more than speculative_num_steps+1 = 4 tokens per pass"},
		{"accept length below 1", 3, chunk(`"completion_tokens": 8, "spec_verify_ct": 8, "spec_accept_length": 0.5`) + done, "chunk 1: spec_accept_length 0.5 is below 1"},
		{"negative accept length", 3, chunk(`"completion_tokens": 8, "spec_accept_length": -2`) + done, "spec_accept_length -2 is below 1"},
		{"accept length beyond steps", 3, chunk(`"completion_tokens": 8, "spec_verify_ct": 2, "spec_accept_length": 4.5`) + done, "chunk 1: spec_accept_length 4.5 is more than a verify pass can yield (speculative_num_steps+1 = 4)"},
		{"accept length beyond tokens", 0, chunk(`"completion_tokens": 8, "spec_accept_length": 1e300`) + done, "chunk 1: spec_accept_length 1e+300 is more than the request's max_new_tokens 8"},
	} {
		s := generateFrom(t, c.steps, c.body)
		switch {
		case c.want == "" && s.Err != "":
			t.Errorf("%s: refused: %s", c.name, s.Err)
		case c.want != "" && !strings.Contains(s.Err, c.want):
			t.Errorf("%s: err %q, want %q", c.name, s.Err, c.want)
		case c.want != "" && !s.Impossible() && !strings.HasPrefix(s.Err, "malformed"):
			t.Errorf("%s: Impossible() = %v for %q", c.name, s.Impossible(), s.Err)
		}
	}

	// A line longer than the longest a request reads: refused before it
	// is all read (here 1 MiB, lowered from MaxLine's 64 MiB). One longer
	// than the read buffer (64 KiB) but within the limit reads whole: it
	// was dropped unseen before (the buffer under its start was reused).
	defer sglang.SetMaxLine(1 << 20)()
	long := `data: {"text": "` + strings.Repeat("x", 2<<20) + `", "meta_info": {"completion_tokens": 1}}` + "\n\n" + done
	if s := generateFrom(t, 3, long); !strings.Contains(s.Err, "impossible data from the server: chunk 1: a line longer than 1048576 bytes") {
		t.Errorf("long line: %q", s.Err)
	}
	if s := generateFrom(t, 3, `data: {"text": "`+strings.Repeat("x", 100<<10)+`", "meta_info": {"completion_tokens": 1}}`+"\n\n"+done); s.Err != "" || s.Text != strings.Repeat("x", 100<<10) {
		t.Errorf("a 100 KiB line (longer than the read buffer, within the limit): %q, %d bytes", s.Err, len(s.Text))
	}
}

// TestSpecSteps reads speculative_num_steps from /server_info, within
// bounds, and nothing else.
func TestSpecSteps(t *testing.T) {
	for _, c := range []struct {
		info map[string]any
		want int
	}{
		{map[string]any{"speculative_num_steps": 3.0}, 3}, {map[string]any{"speculative_num_steps": nil}, 0}, {map[string]any{}, 0}, {nil, 0},
		{map[string]any{"speculative_num_steps": 2.5}, 0}, {map[string]any{"speculative_num_steps": 65.0}, 0}, {map[string]any{"speculative_num_steps": -1.0}, 0},
		{map[string]any{"speculative_num_steps": "3"}, 0}, {map[string]any{"speculative_num_steps": 1e300}, 0},
	} {
		if got := sglang.SpecSteps(c.info); got != c.want {
			t.Errorf("SpecSteps(%v) = %d, want %d", c.info, got, c.want)
		}
	}
}
