// Package sglang is a client for SGLang's native streaming /generate
// endpoint, built to measure: every chunk is time-stamped as it is read,
// and a request yields one Sample with TTFT, end-to-end latency, token and
// verify counts, inter-token latencies and the generated text.
//
// Protocol facts (the two Upstream lines below): POST /generate with {"text",
// "sampling_params": {"max_new_tokens", "temperature", "ignore_eos"},
// "stream": true} answers with "data: {json}" lines and a final
// "data: [DONE]". Each chunk's "text" is the whole output so far, or only
// the new text when the server runs with --incremental-streaming-output
// (Client.Incremental; /server_info reports the setting), and its
// meta_info holds id, finish_reason, prompt_tokens, completion_tokens
// (always the total so far) and cached_tokens; the last adds e2e_latency
// and spec_verify_ct (newer trees also spec_accept_length). A request the
// server gives up on (an over-long prompt, an internal error) ends in the
// stream with finish_reason {"type": "abort", "message": ...}: a failed
// request, recorded in Sample.Err. A chunk that brings N tokens after a
// gap g counts as N inter-token latencies of g/N, as bench_serving counts
// them.
//
// Every count a server reports is bounded by what the request allows
// (Limits): a completion_tokens above max_new_tokens or below an earlier
// chunk's, a prompt_tokens beyond one per prompt byte, a spec_verify_ct
// above completion_tokens, an accept length beyond speculative_num_steps
// + 1, a line longer than MaxLine: each fails the request with an error
// that starts with ImpossibleData and names the chunk and the field, so
// that the arm is INVALID, never fast.
//
// Upstream: python/sglang/srt/entrypoints/http_server.py@84118acf50b3a4c74e85e9ff9033792552de1a76 (generate_request: stream_results yields "data: " + json, then "data: [DONE]")
// Upstream: python/sglang/bench_serving.py@84118acf50b3a4c74e85e9ff9033792552de1a76 (async_request_sglang_generate: text, sampling_params temperature/max_new_tokens/ignore_eos, stream)
// Upstream: python/sglang/srt/managers/tokenizer_manager.py@84118acf50b3a4c74e85e9ff9033792552de1a76 (_handle_batch_output: state.text[last_text_offset:] when incremental_streaming_output and stream)
// Upstream: python/sglang/srt/managers/schedule_batch.py@84118acf50b3a4c74e85e9ff9033792552de1a76 (FINISH_ABORT.to_json)
// Upstream: python/sglang/srt/entrypoints/http_server.py@84118acf50b3a4c74e85e9ff9033792552de1a76 (server_info: dataclasses.asdict(server_args)), the same at 8905cbd42f4a and 0bda0b168ad5
package sglang

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/arpatch/arpatch/internal/bounds"
)

// Request is one generation.
type Request struct {
	Text         string
	MaxNewTokens int
	Temperature  float64
	IgnoreEOS    bool
}

// Sample is the measurement of one request. Every duration is in seconds
// (float64, as the _s JSON keys say; reports print milliseconds), every
// count of tokens is completion or prompt tokens as the server reports
// them in meta_info.
type Sample struct {
	Prompt           int       `json:"prompt"` // index in the workload, 0-based
	Start            time.Time `json:"start"`  // wall clock when the request was sent
	TTFT             float64   `json:"ttft_s"` // seconds from Start to the first chunk that carries output
	E2E              float64   `json:"e2e_s"`  // seconds from Start to [DONE] or the end of the stream
	PromptTokens     int       `json:"prompt_tokens"`
	CompletionTokens int       `json:"completion_tokens"`
	SpecVerifyCt     int       `json:"spec_verify_ct"`               // speculative verify passes (EAGLE), 0 without speculation
	SpecAcceptLength float64   `json:"spec_accept_length,omitempty"` // tokens per verify pass, when the server reports it
	FinishReason     string    `json:"finish_reason,omitempty"`      // length, stop, abort
	Chunks           int       `json:"chunks"`                       // stream events read, [DONE] not counted
	// ITL holds one inter-token latency in seconds per completion token
	// after the first: a chunk that brings n tokens adds n gaps, each its
	// delay since the chunk before divided by n.
	ITL  []float64 `json:"itl_s,omitempty"`
	Text string    `json:"text"`
	// TextAtAgree is the output at the end of the chunk that first reached
	// the client's AgreeTokens tokens (all of it when shorter). A chunk
	// holds several tokens (with EAGLE, an accept length), so it may run
	// past AgreeTokens: the output check compares by Marks, not by TextAtAgree.
	TextAtAgree string `json:"text_at_agree_tokens"`
	// TokensAtAgree is the completion token count at TextAtAgree.
	TokensAtAgree int `json:"tokens_at_agree_tokens"`
	// Marks are the chunk boundaries up to the first at or past the
	// client's AgreeTokens tokens: {completion tokens, bytes of text} after each
	// chunk that brought tokens. The text of the first n tokens is known
	// exactly where a mark has n tokens, and between two marks' byte
	// counts otherwise (the stream does not split a chunk's text per
	// token).
	Marks [][2]int `json:"chunk_marks,omitempty"`
	Err   string   `json:"error,omitempty"`
}

// Within returns what s vouches for about the text of its first n
// tokens: it holds at least lo bytes of s.Text (the text at the last chunk
// boundary at or before n tokens) and at most hi (at the first boundary at
// or past n). lo == hi when a chunk ends at token n, and when the output
// has no more than n tokens (the whole text). A sample without marks (a
// result recorded before they were) vouches for its TextAtAgree.
func (s Sample) Within(n int) (lo, hi int) {
	if s.CompletionTokens <= n {
		return len(s.Text), len(s.Text)
	}
	if len(s.Marks) == 0 {
		return len(s.TextAtAgree), len(s.TextAtAgree)
	}
	hi = len(s.Text)
	for _, m := range s.Marks {
		if m[0] <= n {
			lo = max(lo, m[1])
		}
		if m[0] >= n {
			hi = m[1]
			break
		}
	}
	return lo, max(lo, hi)
}

// Aborted reports whether the server ended the request with
// finish_reason abort: it answered, but gave up on the request.
func (s Sample) Aborted() bool { return s.FinishReason == FinishAbort }

// FinishAbort is the finish_reason type of a request the server aborted.
const FinishAbort = "abort"

// DecodeTokPerSec is (tokens - 1) / (E2E - TTFT): the decode rate after
// the first token, in tokens per second; 0 when undefined.
func (s Sample) DecodeTokPerSec() float64 {
	if s.CompletionTokens < 2 || s.E2E <= s.TTFT {
		return 0
	}
	return float64(s.CompletionTokens-1) / (s.E2E - s.TTFT)
}

// TPOT is (E2E - TTFT) / (tokens - 1) in seconds; 0 when undefined.
func (s Sample) TPOT() float64 {
	if s.CompletionTokens < 2 {
		return 0
	}
	return (s.E2E - s.TTFT) / float64(s.CompletionTokens-1)
}

// DefaultAgreeTokens is how many leading tokens of each output the output
// check compares when the options leave it 0 (bench's --agree-tokens).
const DefaultAgreeTokens = 32

// Client talks to one server.
type Client struct {
	URL  string // e.g. http://127.0.0.1:30000
	HTTP *http.Client
	Now  func() time.Time
	// Incremental says the server streams text deltas
	// (--incremental-streaming-output): the client joins them.
	Incremental bool
	// ModeKnown says /server_info reported incremental_streaming_output
	// (Incremental is its value), so that a stream that contradicts it
	// says so.
	ModeKnown bool
	// AgreeTokens is how many leading tokens of each output the output
	// check compares: Sample.TextAtAgree and Marks stop there. 0 means
	// DefaultAgreeTokens.
	AgreeTokens int
	// SpecSteps is the speculative_num_steps the server runs with
	// (SpecSteps of its /server_info; 0: unknown, or no speculation): a
	// verify pass yields at most SpecSteps+1 tokens.
	SpecSteps int
}

// ImpossibleData starts the error of a request whose server reported a
// count that no server can (Limits): the server answered, and what it
// answered is wrong.
const ImpossibleData = "impossible data from the server: "

// Impossible reports whether the request failed on ImpossibleData.
func (s Sample) Impossible() bool { return strings.HasPrefix(s.Err, ImpossibleData) }

// PromptTokenSlack is how many tokens beyond one per byte of the prompt a
// server may count in prompt_tokens: the special tokens a tokenizer adds
// (BOS, EOS, a chat template's markers). Every token of a byte-level BPE
// or byte-fallback tokenizer covers at least one byte of the text.
const PromptTokenSlack = 64

// MaxLine is the longest stream line, in bytes, that a request reads: a
// chunk holds at most the whole output of max_new_tokens (at most 2^20,
// bounds.Bench), JSON-escaped, far below it.
const MaxLine = 64 << 20

// maxLine is MaxLine, lowered by tests.
var maxLine = MaxLine

// Limits are what a request allows its server to report. MaxNewTokens 0
// is bounds.Bench's largest max_new_tokens; PromptBytes < 0 leaves
// prompt_tokens unbounded above; SpecSteps 0 leaves the tokens per
// verify pass unbounded.
type Limits struct {
	MaxNewTokens int
	PromptBytes  int
	SpecSteps    int
}

// check returns what is impossible in chunk n's meta_info, given the
// counts of the chunks before (lastTokens, lastVerify), or "".
func (l Limits) check(n int, m metaInfo, lastTokens, lastVerify int) string {
	maxNew := cmp.Or(l.MaxNewTokens, int(bounds.Bench["max_new_tokens"].Max))
	ct, v := m.CompletionTokens, m.SpecVerifyCt
	var what string
	switch {
	case ct < 0:
		what = fmt.Sprintf("completion_tokens %d is negative", ct)
	case ct > maxNew:
		what = fmt.Sprintf("completion_tokens %d is more than the request's max_new_tokens %d", ct, maxNew)
	case ct > 0 && ct < lastTokens:
		what = fmt.Sprintf("completion_tokens %d is less than an earlier chunk's %d (it counts the tokens so far)", ct, lastTokens)
	case m.PromptTokens < 0:
		what = fmt.Sprintf("prompt_tokens %d is negative", m.PromptTokens)
	case l.PromptBytes >= 0 && m.PromptTokens > l.PromptBytes+PromptTokenSlack:
		what = fmt.Sprintf("prompt_tokens %d for a prompt of %d bytes (at most one token per byte, and %d special tokens)", m.PromptTokens, l.PromptBytes, PromptTokenSlack)
	case v < 0:
		what = fmt.Sprintf("spec_verify_ct %d is negative", v)
	case v > 0 && v > max(ct, lastTokens):
		what = fmt.Sprintf("spec_verify_ct %d is more than completion_tokens %d (every verify pass yields a token)", v, max(ct, lastTokens))
	case v > 0 && v < lastVerify:
		what = fmt.Sprintf("spec_verify_ct %d is less than an earlier chunk's %d (it counts the passes so far)", v, lastVerify)
	case l.SpecSteps > 0 && v > 0 && ct > v*(l.SpecSteps+1)+1:
		what = fmt.Sprintf("completion_tokens %d from %d verify passes: more than speculative_num_steps+1 = %d tokens per pass (and the prefill's one)", ct, v, l.SpecSteps+1)
	case m.SpecAcceptLength < 0 || m.SpecAcceptLength > 0 && m.SpecAcceptLength < 1:
		what = fmt.Sprintf("spec_accept_length %g is below 1 (a verify pass yields at least one token)", m.SpecAcceptLength)
	case l.SpecSteps > 0 && m.SpecAcceptLength > float64(l.SpecSteps+1):
		what = fmt.Sprintf("spec_accept_length %g is more than a verify pass can yield (speculative_num_steps+1 = %d)", m.SpecAcceptLength, l.SpecSteps+1)
	case m.SpecAcceptLength > float64(maxNew):
		what = fmt.Sprintf("spec_accept_length %g is more than the request's max_new_tokens %d", m.SpecAcceptLength, maxNew)
	default:
		return ""
	}
	return fmt.Sprintf("%schunk %d: %s", ImpossibleData, n, what)
}

// SpecSteps reads speculative_num_steps from a /server_info answer: the
// draft depth the server runs with; 0 when it does not say (or runs no
// speculation), or says a value outside bounds.Bench's range.
func SpecSteps(info map[string]any) int {
	v, ok := info["speculative_num_steps"].(float64)
	r := bounds.Bench["speculative_num_steps"]
	if !ok || v != float64(int64(v)) || int64(v) < r.Min || int64(v) > r.Max {
		return 0
	}
	return int(v)
}

// ModeMismatch starts the error of a request whose stream contradicts
// the streaming mode the client reads it in: deltas read as whole texts,
// or whole texts read as deltas. No output of such a server can be read,
// whatever its health.
const ModeMismatch = "stream mode mismatch: "

// NewClient returns a client for base URL u with no overall timeout (each
// request is bounded by its context).
func NewClient(u string) *Client {
	return &Client{URL: strings.TrimRight(u, "/"), HTTP: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}, Now: time.Now}
}

type genRequest struct {
	Text           string         `json:"text"`
	SamplingParams samplingParams `json:"sampling_params"`
	Stream         bool           `json:"stream"`
}

type samplingParams struct {
	MaxNewTokens int     `json:"max_new_tokens"`
	Temperature  float64 `json:"temperature"`
	IgnoreEOS    bool    `json:"ignore_eos,omitempty"`
}

// Generate sends one streaming request. Failures (HTTP status, a dropped
// stream, malformed JSON, a timeout) are recorded in Sample.Err, with what
// was measured before them; Generate itself does not fail.
func (c *Client) Generate(ctx context.Context, prompt int, r Request) Sample {
	s := Sample{Prompt: prompt}
	body, _ := json.Marshal(genRequest{Text: r.Text, SamplingParams: samplingParams{MaxNewTokens: r.MaxNewTokens, Temperature: r.Temperature, IgnoreEOS: r.IgnoreEOS}, Stream: true})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+"/generate", bytes.NewReader(body))
	if err != nil {
		s.Err = err.Error()
		return s
	}
	req.Header.Set("Content-Type", "application/json")
	now := c.Now
	if now == nil {
		now = time.Now
	}
	s.Start = now()
	resp, err := c.HTTP.Do(req)
	if err != nil {
		s.Err = "request failed: " + err.Error()
		s.E2E = now().Sub(s.Start).Seconds()
		return s
	}
	defer func() { _ = resp.Body.Close() }() // read side: Close loses nothing
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		s.Err = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
		s.E2E = now().Sub(s.Start).Seconds()
		return s
	}
	readStream(resp.Body, s.Start, now, streamMode{incremental: c.Incremental, known: c.ModeKnown, agree: c.AgreeTokens,
		limits: Limits{MaxNewTokens: r.MaxNewTokens, PromptBytes: len(r.Text), SpecSteps: c.SpecSteps}}, &s)
	return s
}

// streamMode is how a stream is read, whether /server_info said so, how
// many leading tokens the output check compares (0: DefaultAgreeTokens),
// and what the request allows the server to report.
type streamMode struct {
	incremental, known bool
	agree              int
	limits             Limits
}

// said is what /server_info said of the mode, for a mismatch's error.
func (m streamMode) said() string {
	if !m.known {
		return "/server_info does not say incremental_streaming_output (whole texts assumed)"
	}
	return fmt.Sprintf("/server_info says incremental_streaming_output: %v", m.incremental)
}

// chunk is the part of a streamed object the client reads.
type chunk struct {
	Text     string          `json:"text"`
	MetaInfo metaInfo        `json:"meta_info"`
	Error    json.RawMessage `json:"error"`
}

// metaInfo is a chunk's counts and finish reason.
type metaInfo struct {
	PromptTokens     int             `json:"prompt_tokens"`
	CompletionTokens int             `json:"completion_tokens"`
	SpecVerifyCt     int             `json:"spec_verify_ct"`
	SpecAcceptLength float64         `json:"spec_accept_length"`
	FinishReason     json.RawMessage `json:"finish_reason"`
}

// ErrNoDone marks a stream that ended without "data: [DONE]" or a finish
// reason.
var ErrNoDone = errors.New("the stream ended before [DONE]")

// ReadStream parses a /generate event stream into s, stamping each chunk
// with now() as it is read, relative to start. With incremental, each
// chunk's text is appended (text deltas); else it replaces the text so
// far, and a chunk whose text does not extend the previous one is an
// error (a server streaming deltas that did not say so). It stops at
// "data: [DONE]" and records in s.Err a stream that ends early, a
// malformed chunk, an error object, or an abort (with its message).
//
// Read as deltas, a stream of at least three chunks each of whose texts
// extends the one before is whole texts (a delta stream of real text does
// not grow that way), and is an error too: joined, its text would be
// garbled and the output check would blame the arm.
//
// agreeTokens is where TextAtAgree and Marks stop (the client's AgreeTokens;
// 0 means DefaultAgreeTokens). The counts are bounded by the zero Limits
// but for the prompt (unknown): completion_tokens at most bounds.Bench's
// max_new_tokens.
func ReadStream(r io.Reader, start time.Time, now func() time.Time, incremental bool, agreeTokens int, s *Sample) {
	readStream(r, start, now, streamMode{incremental: incremental, agree: agreeTokens, limits: Limits{PromptBytes: -1}}, s)
}

// readStream reads the stream r into s, line by line: each "data:" line
// is one chunk (streamState.chunk) until [DONE], an error or the stream's
// end, each timed by now against start.
func readStream(r io.Reader, start time.Time, now func() time.Time, mode streamMode, s *Sample) {
	st := &streamState{mode: mode, agree: cmp.Or(mode.agree, DefaultAgreeTokens), start: start, s: s, extending: true}
	br := bufio.NewReaderSize(r, 64<<10)
read:
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A chunk longer than the buffer: copy what was read (the next
			// read reuses the buffer under it), then read the rest, up to
			// MaxLine.
			first := append([]byte(nil), line...)
			rest, err2 := readLine(br, maxLine-len(first))
			line, err = append(first, rest...), err2
		}
		t := now()
		if errors.Is(err, errLongLine) {
			st.fail(t, fmt.Sprintf("%schunk %d: a line longer than %d bytes", ImpossibleData, s.Chunks+1, maxLine))
			return
		}
		if data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:")); ok {
			switch st.chunk(t, bytes.TrimSpace(data)) {
			case streamDone:
				break read
			case streamFailed:
				return
			}
		}
		if err != nil {
			s.E2E = t.Sub(start).Seconds()
			if s.FinishReason == "" {
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					s.Err = fmt.Sprintf("%v after %d chunks", ErrNoDone, s.Chunks)
				} else {
					s.Err = fmt.Sprintf("reading the stream after %d chunks: %v", s.Chunks, err)
				}
			}
			break
		}
	}
	if s.TokensAtAgree == 0 {
		s.TextAtAgree, s.TokensAtAgree = s.Text, s.CompletionTokens
	}
}

// streamStep is what a chunk leaves the stream to do: read on, stop at
// [DONE], or stop on an error (in the sample's Err).
type streamStep int

const (
	streamMore streamStep = iota
	streamDone
	streamFailed
)

// streamState is a stream being read into s: what the chunks so far said.
type streamState struct {
	mode  streamMode
	agree int // where TextAtAgree and Marks stop
	start time.Time
	s     *Sample

	prev      string // the last raw chunk text
	extending bool   // whether the raw chunk texts extend each other
	texts     int    // the raw chunk texts seen

	last                   time.Time // when the last tokens came
	lastTokens, lastVerify int
}

// fail ends the sample at t with the error msg.
func (st *streamState) fail(t time.Time, msg string) streamStep {
	st.s.Err = msg
	st.s.E2E = t.Sub(st.start).Seconds()
	return streamFailed
}

// chunk takes one chunk's data, read at t: [DONE], or a JSON chunk whose
// error, counts (within the limits), tokens' times, text and finish
// reason go into the sample.
func (st *streamState) chunk(t time.Time, data []byte) streamStep {
	s := st.s
	if bytes.Equal(data, []byte("[DONE]")) {
		s.E2E = t.Sub(st.start).Seconds()
		return streamDone
	}
	var c chunk
	if jerr := json.Unmarshal(data, &c); jerr != nil {
		return st.fail(t, fmt.Sprintf("malformed chunk %d: %v", s.Chunks+1, jerr))
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		return st.fail(t, "server error: "+string(c.Error))
	}
	s.Chunks++
	m := c.MetaInfo
	if bad := st.mode.limits.check(s.Chunks, m, st.lastTokens, st.lastVerify); bad != "" {
		return st.fail(t, bad)
	}
	st.lastVerify = max(st.lastVerify, m.SpecVerifyCt)
	if m.PromptTokens > 0 {
		s.PromptTokens = m.PromptTokens
	}
	st.times(t, m, c.Text)
	if step := st.text(t, c.Text); step != streamMore {
		return step
	}
	if grew := len(s.Marks) == 0 || m.CompletionTokens > s.Marks[len(s.Marks)-1][0]; grew && s.TokensAtAgree == 0 {
		s.Marks = append(s.Marks, [2]int{m.CompletionTokens, len(s.Text)})
	}
	if s.TokensAtAgree == 0 && m.CompletionTokens >= st.agree {
		s.TextAtAgree, s.TokensAtAgree = s.Text, m.CompletionTokens
	}
	if m.SpecVerifyCt > 0 {
		s.SpecVerifyCt = m.SpecVerifyCt
	}
	if m.SpecAcceptLength > 0 {
		s.SpecAcceptLength = m.SpecAcceptLength
	}
	if fr, msg := finishReason(m.FinishReason); fr != "" {
		s.FinishReason = fr
		s.E2E = t.Sub(st.start).Seconds()
		if fr == FinishAbort {
			s.Err = "aborted by the server: " + msg
		}
	}
	return streamMore
}

// times records the first token's time (TTFT) and, for each later token,
// its share of the gap since the last tokens came (ITL, seconds).
func (st *streamState) times(t time.Time, m metaInfo, text string) {
	s := st.s
	if s.TTFT == 0 && (m.CompletionTokens > 0 || text != "") {
		s.TTFT = t.Sub(st.start).Seconds()
		st.last = t
	} else if n := m.CompletionTokens - st.lastTokens; n > 0 && !st.last.IsZero() {
		gap := t.Sub(st.last).Seconds() / float64(n)
		for i := 0; i < n; i++ {
			s.ITL = append(s.ITL, gap)
		}
		st.last = t
	}
	if m.CompletionTokens > 0 {
		st.lastTokens = m.CompletionTokens
	}
	s.CompletionTokens = m.CompletionTokens
}

// text adds a chunk's text to the sample, as a delta (incremental mode)
// or as the whole text so far, and fails the stream when the server's
// chunks show the other mode.
func (st *streamState) text(t time.Time, text string) streamStep {
	s := st.s
	switch {
	case st.mode.incremental:
		if text != "" {
			st.extending = st.extending && len(text) > len(st.prev) && strings.HasPrefix(text, st.prev)
			st.prev = text
			st.texts++
		}
		if st.extending && st.texts >= 3 {
			return st.fail(t, fmt.Sprintf("%sthe texts of the first %d chunks each extend the one before: the server sends whole texts though %s", ModeMismatch, st.texts, st.mode.said()))
		}
		s.Text += text
	case !strings.HasPrefix(text, s.Text):
		return st.fail(t, fmt.Sprintf("%schunk %d's text does not extend the text so far: the server streams text deltas (--incremental-streaming-output) though %s", ModeMismatch, s.Chunks, st.mode.said()))
	default:
		s.Text = text
	}
	return streamMore
}

// errLongLine is a stream line longer than MaxLine.
var errLongLine = errors.New("line too long")

// readLine reads up to and including the next '\n', at most n bytes; a
// longer line is errLongLine. What it returns is its own (ReadSlice's
// slices are not: the next read reuses the buffer under them).
func readLine(br *bufio.Reader, n int) ([]byte, error) {
	var out []byte
	for {
		part, err := br.ReadSlice('\n')
		if len(out)+len(part) > n {
			return nil, errLongLine
		}
		out = append(out, part...)
		if err != bufio.ErrBufferFull {
			return out, err
		}
	}
}

// finishReason reads meta_info.finish_reason: null while streaming, then
// an object {"type": "length", ...} or, in some trees, a string. It
// returns the type and, for an abort, its message (or the whole object
// when it has none).
func finishReason(raw json.RawMessage) (string, string) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", ""
	}
	var obj struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Type != "" {
		if obj.Message == "" {
			obj.Message = string(raw)
		}
		return obj.Type, obj.Message
	}
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return str, str
	}
	return string(raw), string(raw)
}

// Health calls GET /health_generate (a one-token generation) and reports
// whether it answered 200.
func (c *Client) Health(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+"/health_generate", nil)
	if err != nil {
		return err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	// Drained so that the connection is reused; the status is the answer.
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/health_generate answered HTTP %d", resp.StatusCode)
	}
	return nil
}

// ServerInfo returns /server_info (or /get_server_info, its deprecated
// name) as a map; nil when neither answers.
func (c *Client) ServerInfo(ctx context.Context) map[string]any {
	for _, p := range []string{"/server_info", "/get_server_info"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+p, nil)
		if err != nil {
			return nil
		}
		resp, err := c.HTTP.Do(req)
		if err != nil {
			return nil
		}
		var m map[string]any
		err = json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&m)
		_ = resp.Body.Close() // read side: Close loses nothing
		if resp.StatusCode == http.StatusOK && err == nil {
			return m
		}
	}
	return nil
}

// IncrementalStreaming reads incremental_streaming_output from a
// /server_info answer: whether the server streams text deltas. ok is false
// when the answer lacks the field (or info is nil), so the mode is
// unknown.
//
// Upstream: python/sglang/srt/server_args.py@84118acf50b3a4c74e85e9ff9033792552de1a76 (ServerArgs.incremental_streaming_output, --incremental-streaming-output), also at 8905cbd42f4a and 0bda0b168ad5
func IncrementalStreaming(info map[string]any) (incremental, ok bool) {
	v, ok := info["incremental_streaming_output"].(bool)
	return v, ok
}
