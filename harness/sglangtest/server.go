// Package sglangtest is an SGLang-protocol server for tests and demos: it
// speaks the native streaming /generate protocol (see package sglang) and
// /health_generate, with its token rate, TTFT, tokens per chunk
// (speculative bursts), accept length and failures under control. It
// generates deterministic text from the prompt, so two servers with the
// same Variant agree token for token, and a different Variant diverges.
package sglangtest

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config controls the server. Zero fields take the defaults noted.
type Config struct {
	TokPerSec      float64       // decode rate after the first token (90)
	TTFT           time.Duration // time to the first chunk (20 ms)
	TokensPerChunk int           // tokens per streamed chunk, as a verify step emits them (1)
	AcceptLength   float64       // completion tokens per verify step, for spec_verify_ct (TokensPerChunk)
	Variant        string        // perturbs the generated text from the Nth token (see DivergeAt)
	DivergeAt      int           // token index where Variant starts to show (0)
	StartDelay     time.Duration // /health_generate answers 503 until this much after New
	// Spread varies the decode rate from request to request, as a real
	// server's varies: a request runs at TokPerSec x (1 + Spread x u), u
	// in [-1, 1] fixed by the prompt and how many times this server has
	// served it (0: every request at TokPerSec). On a Network in a
	// synctest bubble, where timing is exact, it keeps samples from being
	// all equal, which no statistical test can judge; the rates stay
	// within the band by construction.
	Spread float64
	// Failures.
	HTTP500Every  int  // every Nth /generate answers HTTP 500
	DropAfter     int  // close the stream after this many chunks, without [DONE]
	Malformed     bool // send one chunk that is not JSON
	LegacyFinish  bool // finish_reason as a string, not an object
	OmitAcceptLen bool // leave spec_accept_length out of meta_info, as older trees do
	// AbortEvery makes every Nth /generate end, after its first chunk,
	// with finish_reason {"type": "abort", ...} and [DONE], as SGLang
	// aborts a request in the stream.
	AbortEvery int
	// Empty makes every /generate finish at once with no output
	// (finish_reason stop, completion_tokens 0).
	Empty bool
	// ClaimTokens makes the server lie: it reports completion_tokens as
	// ClaimTokens times the tokens it generated (0 or 1: the truth).
	ClaimTokens int
	// Incremental streams text deltas, as --incremental-streaming-output
	// does, and /server_info says so.
	Incremental bool
	Now         func() time.Time
}

// Server is an http.Handler.
type Server struct {
	cfg     Config
	started time.Time
	reqs    atomic.Int64
	mu      sync.Mutex
	Served  int            // completed /generate streams
	seen    map[string]int // requests per prompt, for Spread
}

// New returns a server with cfg's defaults filled in.
func New(cfg Config) *Server {
	if cfg.TokPerSec == 0 {
		cfg.TokPerSec = 90
	}
	if cfg.TTFT == 0 {
		cfg.TTFT = 20 * time.Millisecond
	}
	if cfg.TokensPerChunk <= 0 {
		cfg.TokensPerChunk = 1
	}
	if cfg.AcceptLength == 0 {
		cfg.AcceptLength = float64(cfg.TokensPerChunk)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Server{cfg: cfg, started: cfg.Now(), seen: map[string]int{}}
}

var words = strings.Fields(`the of and to in is that for on with as was by at it from this be are or an
were which has have not had but its also more one all two their new other after first
model token draft verify kernel reduce cache batch rank stage link graph stream layer`)

// Word returns the i-th generated word for a prompt and variant.
func Word(prompt, variant string, i, divergeAt int) string {
	h := fnv.New32a()
	h.Write([]byte(prompt))
	if variant != "" && i >= divergeAt {
		h.Write([]byte(variant))
	}
	n := int(h.Sum32()%uint32(len(words))) + i*7
	return words[n%len(words)]
}

type genReq struct {
	Text           string `json:"text"`
	SamplingParams struct {
		MaxNewTokens int     `json:"max_new_tokens"`
		Temperature  float64 `json:"temperature"`
	} `json:"sampling_params"`
	Stream bool `json:"stream"`
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health_generate", "/health":
		if s.cfg.Now().Sub(s.started) < s.cfg.StartDelay {
			http.Error(w, "loading", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	case "/get_server_info", "/server_info":
		// An HTTP response: see .ci/errcheck-excludes.txt.
		_ = json.NewEncoder(w).Encode(map[string]any{"version": "sglangtest", "tok_per_sec": s.cfg.TokPerSec, "variant": s.cfg.Variant,
			"incremental_streaming_output": s.cfg.Incremental})
	case "/flush_cache":
		w.WriteHeader(http.StatusOK)
	case "/generate":
		s.generate(w, r)
	default:
		http.NotFound(w, r)
	}
}

// generate streams a completion for the request as SGLang's /generate
// does, with the faults the config injects.
func (s *Server) generate(w http.ResponseWriter, r *http.Request) {
	n := s.reqs.Add(1)
	req, max, ok := s.readGen(w, r, n)
	if !ok {
		return
	}
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	start := s.cfg.Now()
	prompt := req.Text
	promptTokens := len(strings.Fields(prompt))
	var text strings.Builder
	id := fmt.Sprintf("req-%d", n)
	tokens, chunks := 0, 0
	abort := s.cfg.AbortEvery > 0 && n%int64(s.cfg.AbortEvery) == 0
	if s.cfg.Empty {
		max = 0
		send(w, fl, map[string]any{"text": "", "meta_info": map[string]any{"id": id, "prompt_tokens": promptTokens, "completion_tokens": 0,
			"spec_verify_ct": 0, "finish_reason": map[string]any{"type": "stop", "matched": nil}}}, false)
	}
	claim := 1 // reported completion_tokens per generated token
	if s.cfg.ClaimTokens > 1 {
		claim = s.cfg.ClaimTokens
	}
	sent := 0 // bytes of text already streamed, for deltas
	rate := s.cfg.TokPerSec * (1 + s.cfg.Spread*s.jitter(prompt))
	// The first chunk carries one token at TTFT; then a chunk of
	// TokensPerChunk tokens every TokensPerChunk/TokPerSec seconds, on an
	// absolute schedule so sleeps do not accumulate error.
	for tokens < max {
		step := s.cfg.TokensPerChunk
		if tokens == 0 {
			step = 1
		}
		if tokens+step > max {
			step = max - tokens
		}
		due := s.cfg.TTFT + time.Duration(float64(tokens+step-1)/rate*float64(time.Second))
		if d := due - s.cfg.Now().Sub(start); d > 0 {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		for i := 0; i < step; i++ {
			text.WriteString(" " + Word(prompt, s.cfg.Variant, tokens+i, s.cfg.DivergeAt))
		}
		tokens += step
		chunks++
		if s.cfg.Malformed && chunks == 2 {
			fmt.Fprint(w, "data: {not json\n\n")
			if fl != nil {
				fl.Flush()
			}
			return
		}
		meta, last := s.meta(n, promptTokens, tokens, claim, abort && chunks == 2, tokens == max, start)
		if last {
			max = tokens // the stream ends here, with [DONE]
		}
		out := text.String()
		if s.cfg.Incremental {
			out, sent = out[sent:], len(out)
		}
		send(w, fl, map[string]any{"text": out, "meta_info": meta}, true)
		if s.cfg.DropAfter > 0 && chunks >= s.cfg.DropAfter {
			return
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
	s.mu.Lock()
	s.Served++
	s.mu.Unlock()
}

// send writes chunk as one SSE data line, flushed through fl when flush
// and fl is not nil.
func send(w http.ResponseWriter, fl http.Flusher, chunk map[string]any, flush bool) {
	b, _ := json.Marshal(chunk)
	fmt.Fprintf(w, "data: %s\n\n", b)
	if flush && fl != nil {
		fl.Flush()
	}
}

// readGen decodes request n, answers it with an error (an injected
// HTTP 500, or no stream) and ok false when it is not to be streamed, and
// returns its max_new_tokens (128 when unset).
func (s *Server) readGen(w http.ResponseWriter, r *http.Request, n int64) (req genReq, max int, ok bool) {
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return req, 0, false
	}
	if s.cfg.HTTP500Every > 0 && n%int64(s.cfg.HTTP500Every) == 0 {
		http.Error(w, "internal error (injected)", http.StatusInternalServerError)
		return req, 0, false
	}
	max = req.SamplingParams.MaxNewTokens
	if max <= 0 {
		max = 128
	}
	if !req.Stream {
		http.Error(w, "only stream=true is implemented", http.StatusBadRequest)
		return req, 0, false
	}
	return req, max, true
}

// meta is the meta_info of request n's chunk after tokens tokens
// (reported as tokens*claim): an injected abort when abortHere (last is
// then true: the stream ends), the finish and speculative counts when
// final.
func (s *Server) meta(n int64, promptTokens, tokens, claim int, abortHere, final bool, start time.Time) (meta map[string]any, last bool) {
	meta = map[string]any{"id": fmt.Sprintf("req-%d", n), "prompt_tokens": promptTokens, "completion_tokens": tokens * claim, "cached_tokens": 0, "finish_reason": nil}
	if abortHere {
		meta["finish_reason"] = map[string]any{"type": "abort", "message": fmt.Sprintf("injected abort of request %d", n), "status_code": 500, "err_type": nil}
		return meta, true
	}
	if final {
		verify := int(math.Ceil(float64(tokens-1)/s.cfg.AcceptLength)) + 1
		meta["e2e_latency"] = s.cfg.Now().Sub(start).Seconds()
		meta["spec_verify_ct"] = verify
		if !s.cfg.OmitAcceptLen {
			meta["spec_accept_length"] = float64(tokens) / float64(verify)
		}
		if s.cfg.LegacyFinish {
			meta["finish_reason"] = "length"
		} else {
			meta["finish_reason"] = map[string]any{"type": "length", "length": tokens}
		}
	}
	return meta, false
}

// jitter is u in [-1, 1] for Spread: a hash of the prompt and how many
// times it was served before, so the same requests get the same rates
// whatever order concurrent ones arrive in.
func (s *Server) jitter(prompt string) float64 {
	if s.cfg.Spread == 0 {
		return 0
	}
	s.mu.Lock()
	k := s.seen[prompt]
	s.seen[prompt]++
	s.mu.Unlock()
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%d", prompt, k)
	return float64(h.Sum64()%2001)/1000 - 1
}

// VerifyCount is the spec_verify_ct the server reports for a request of
// tokens completion tokens: the first token comes from prefill, the rest
// from ceil((tokens-1)/AcceptLength) verify steps, plus that first step.
func (s *Server) VerifyCount(tokens int) int {
	return int(math.Ceil(float64(tokens-1)/s.cfg.AcceptLength)) + 1
}
