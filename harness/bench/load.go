package bench

import (
	"context"
	"sync"
	"time"

	"github.com/arpatch/arpatch/harness/sglang"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/internal/goroutine"
)

// warmup sends Warmup untimed requests, one at a time, cycling the
// prompts; it stops at once when ctx is cancelled.
func (o *Options) warmup(ctx context.Context, c *sglang.Client) error {
	for i := 0; i < o.Warmup; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, o.RequestTimeout)
		c.Generate(rctx, -1, o.request(o.Prompts[i%len(o.Prompts)]))
		cancel()
	}
	return ctx.Err()
}

func (o *Options) request(p string) sglang.Request {
	return sglang.Request{Text: p, MaxNewTokens: o.MaxNewTokens, Temperature: o.Temperature, IgnoreEOS: o.IgnoreEOS}
}

// trial sends every prompt, level at a time: at most level in flight,
// each as soon as a request before it is done, or, with open Arrivals,
// each at its arrival time or as soon as one is done after that. On
// cancellation it stops sending, waits for the requests in flight (each
// bounded by ctx) and returns ctx's error.
func (o *Options) trial(ctx context.Context, c *sglang.Client, arm string, index, level int) (stats.Trial, error) {
	t := stats.Trial{Arm: arm, Index: index, Concurrency: level, Start: time.Now().UTC()}
	samples := make([]sglang.Sample, len(o.Prompts))
	due := o.Arrivals.Times(len(o.Prompts))
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	start := time.Now()
	for w := 0; w < min(level, len(o.Prompts)); w++ {
		wg.Add(1)
		goroutine.Go(func() {
			defer wg.Done()
			for i := range next {
				rctx, cancel := context.WithTimeout(ctx, o.RequestTimeout)
				samples[i] = c.Generate(rctx, i, o.request(o.Prompts[i]))
				cancel()
				mu.Lock()
				done++
				if o.Progress != nil {
					o.Progress(Progress{Trial: index, Trials: o.Trials, Arm: arm, Concurrency: level, Done: done, Total: len(o.Prompts)})
				}
				mu.Unlock()
			}
		})
	}
send:
	for i := range o.Prompts {
		if wait := time.Until(start.Add(due[i])); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				break send
			}
		}
		select {
		case next <- i:
		case <-ctx.Done():
			break send
		}
	}
	close(next)
	wg.Wait()
	t.Wall = time.Since(start).Seconds()
	t.Samples = samples
	return t, ctx.Err()
}
