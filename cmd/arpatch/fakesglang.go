package main

import (
	"fmt"
	"net"
	"net/http"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/harness/sglangtest"
	"github.com/arpatch/arpatch/internal/bounds"
)

// fakeSGLangCommand serves the SGLang streaming protocol with a set token
// rate: for demos, CI and trying arpatch without GPUs. It is hidden from
// help.
func fakeSGLangCommand() *cli.Command {
	return &cli.Command{
		Name:   "fake-sglang",
		Hidden: true,
		Usage:  "serve SGLang's /generate streaming protocol at a set token rate, for demos and tests",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "port", Usage: "`PORT` to listen on (127.0.0.1)", Required: true},
			&cli.Float64Flag{Name: "rate", Usage: "decode rate in tokens/s", Value: 90},
			&cli.DurationFlag{Name: "ttft", Usage: "time to first token", Value: 20e6},
			&cli.IntFlag{Name: "tokens-per-chunk", Usage: "tokens per chunk (a verify step's accepted tokens)", Value: 3},
			&cli.Float64Flag{Name: "accept", Usage: "accept length reported through spec_verify_ct", Value: 3},
			&cli.StringFlag{Name: "variant", Usage: "perturb the output text (a wrong arm)"},
			&cli.DurationFlag{Name: "start-delay", Usage: "answer /health_generate only after this"},
			&cli.IntFlag{Name: "http500-every", Usage: "fail every Nth request with HTTP 500"},
			&cli.IntFlag{Name: "abort-every", Usage: "abort every Nth request in the stream (finish_reason abort)"},
			&cli.BoolFlag{Name: "empty", Usage: "answer every request with no output"},
			&cli.BoolFlag{Name: "incremental-streaming-output", Usage: "stream text deltas, as SGLang's flag of that name"},
			&cli.BoolFlag{Name: "log-requests", Usage: "write a line to stderr as each request arrives (a test waits on it)"},
		},
		Action: func(c *cli.Context) error {
			for _, f := range []string{"rate", "accept"} {
				if err := bounds.CheckFloat(f, c.Float64(f)); err != nil {
					return usagef("--%s %v", f, err)
				}
			}
			srv := sglangtest.New(sglangtest.Config{
				TokPerSec: c.Float64("rate"), TTFT: c.Duration("ttft"), TokensPerChunk: c.Int("tokens-per-chunk"),
				AcceptLength: c.Float64("accept"), Variant: c.String("variant"), StartDelay: c.Duration("start-delay"),
				HTTP500Every: c.Int("http500-every"), AbortEvery: c.Int("abort-every"), Empty: c.Bool("empty"),
				Incremental: c.Bool("incremental-streaming-output"),
			})
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", c.Int("port")))
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.ErrWriter, "fake-sglang on %s: %.1f tok/s, %d tokens per chunk\n", l.Addr(), c.Float64("rate"), c.Int("tokens-per-chunk"))
			var h http.Handler = srv
			if c.Bool("log-requests") {
				h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					fmt.Fprintf(c.App.ErrWriter, "fake-sglang: %s %s\n", r.Method, r.URL.Path)
					srv.ServeHTTP(w, r)
				})
			}
			hs := &http.Server{Handler: h}
			go func() {
				<-c.Context.Done() // SIGTERM or Ctrl-C
				_ = hs.Close()     // Serve then returns http.ErrServerClosed: the way out
			}()
			if err := hs.Serve(l); err != nil && err != http.ErrServerClosed {
				return err
			}
			return nil
		},
	}
}
