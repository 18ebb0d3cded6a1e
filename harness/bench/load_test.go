package bench

import (
	"context"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/arpatch/arpatch/harness/sglangtest"
	"github.com/arpatch/arpatch/harness/workload"
)

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
