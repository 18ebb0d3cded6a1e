package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/harness/sglangtest"
	"github.com/arpatch/arpatch/internal/bounds"
	"github.com/arpatch/arpatch/internal/goroutine"
)

// newCmdFakeSGLang serves the SGLang streaming protocol with a set token
// rate: for demos, CI and trying arpatch without GPUs. It is hidden from
// help. It runs its options with runF (fakeSGLangRun).
func newCmdFakeSGLang(runF func(context.Context, fakeSGLangOptions, streams) error) *cli.Command {
	var f fakeSGLangFlags
	return &cli.Command{
		Name:   "fake-sglang",
		Hidden: true,
		Usage:  "serve SGLang's /generate streaming protocol at a set token rate, for demos and tests",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "port", Destination: &f.Port, Usage: "`PORT` to listen on (127.0.0.1)", Required: true},
			&cli.Float64Flag{Name: "rate", Destination: &f.Rate, Usage: "decode rate in tokens/s", Value: 90},
			&cli.DurationFlag{Name: "ttft", Destination: &f.TTFT, Usage: "time to first token", Value: 20e6},
			&cli.IntFlag{Name: "tokens-per-chunk", Destination: &f.TokensPerChunk, Usage: "tokens per chunk (a verify step's accepted tokens)", Value: 3},
			&cli.Float64Flag{Name: "accept", Destination: &f.Accept, Usage: "accept length reported through spec_verify_ct", Value: 3},
			&cli.StringFlag{Name: "variant", Destination: &f.Variant, Usage: "perturb the output text (a wrong arm)"},
			&cli.DurationFlag{Name: "start-delay", Destination: &f.StartDelay, Usage: "answer /health_generate only after this"},
			&cli.IntFlag{Name: "http500-every", Destination: &f.HTTP500Every, Usage: "fail every Nth request with HTTP 500"},
			&cli.IntFlag{Name: "abort-every", Destination: &f.AbortEvery, Usage: "abort every Nth request in the stream (finish_reason abort)"},
			&cli.BoolFlag{Name: "empty", Destination: &f.Empty, Usage: "answer every request with no output"},
			&cli.BoolFlag{Name: "incremental-streaming-output", Destination: &f.Incremental, Usage: "stream text deltas, as SGLang's flag of that name"},
			&cli.BoolFlag{Name: "log-requests", Destination: &f.LogRequests, Usage: "write a line to stderr as each request arrives (a test waits on it)"},
			&cli.IntFlag{Name: "stall-after", Destination: &f.StallAfter, Usage: "answer the first `N` /generate requests, then hold each later one open, unanswered, until the server stops (a hung server; a test kills it)"},
		},
		Action: act(&f, fakeSGLangOpts, runF),
	}
}

// fakeSGLangFlags are fake-sglang's parsed flags.
type fakeSGLangFlags struct {
	Port           int
	Rate           float64
	TTFT           time.Duration
	TokensPerChunk int
	Accept         float64
	Variant        string
	StartDelay     time.Duration
	HTTP500Every   int
	AbortEvery     int
	Empty          bool
	Incremental    bool
	LogRequests    bool
	StallAfter     int
}

// fakeSGLangOptions are the server's behaviour and the port it listens on
// (127.0.0.1); LogRequests writes a line to stderr per request.
type fakeSGLangOptions struct {
	Server      sglangtest.Config
	Port        int
	LogRequests bool
	// StallAfter, when above 0, answers that many /generate requests and
	// holds each later one open until the server stops.
	StallAfter int
}

// fakeSGLangOpts refuses a rate or accept length out of range.
func fakeSGLangOpts(f fakeSGLangFlags) (fakeSGLangOptions, error) {
	for _, v := range []struct {
		flag string
		v    float64
	}{{"rate", f.Rate}, {"accept", f.Accept}} {
		if err := bounds.CheckFloat(v.flag, v.v); err != nil {
			return fakeSGLangOptions{}, usagef("--%s %v", v.flag, err)
		}
	}
	if f.StallAfter < 0 {
		return fakeSGLangOptions{}, usagef("--stall-after %d: want 0 (answer every request) or more", f.StallAfter)
	}
	return fakeSGLangOptions{Port: f.Port, LogRequests: f.LogRequests, StallAfter: f.StallAfter, Server: sglangtest.Config{
		TokPerSec: f.Rate, TTFT: f.TTFT, TokensPerChunk: f.TokensPerChunk,
		AcceptLength: f.Accept, Variant: f.Variant, StartDelay: f.StartDelay,
		HTTP500Every: f.HTTP500Every, AbortEvery: f.AbortEvery, Empty: f.Empty,
		Incremental: f.Incremental,
	}}, nil
}

// fakeSGLangRun serves until ctx is cancelled (SIGTERM or Ctrl-C).
func fakeSGLangRun(ctx context.Context, o fakeSGLangOptions, s streams) error {
	srv := sglangtest.New(o.Server)
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", o.Port))
	if err != nil {
		return err
	}
	fmt.Fprintf(s.Err, "fake-sglang on %s: %.1f tok/s, %d tokens per chunk\n", l.Addr(), o.Server.TokPerSec, o.Server.TokensPerChunk)
	var h http.Handler = srv
	if o.StallAfter > 0 {
		var generated atomic.Int64
		next := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/generate" && generated.Add(1) > int64(o.StallAfter) {
				<-r.Context().Done() // the client gave up, or Close ended the connection
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	if o.LogRequests {
		next := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(s.Err, "fake-sglang: %s %s\n", r.Method, r.URL.Path)
			next.ServeHTTP(w, r)
		})
	}
	hs := &http.Server{Handler: h}
	goroutine.Go(func() {
		<-ctx.Done()   // SIGTERM or Ctrl-C
		_ = hs.Close() // Serve then returns http.ErrServerClosed: the way out
	})
	if err := hs.Serve(l); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}
