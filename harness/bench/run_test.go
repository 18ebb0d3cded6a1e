package bench

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/arpatch/arpatch/harness/server"
	"github.com/arpatch/arpatch/harness/sglangtest"
	"github.com/arpatch/arpatch/harness/workload"
	"github.com/arpatch/arpatch/internal/procgroup"
)

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

func TestLaunchedServerDies(t *testing.T) {
	o := Options{Arms: []Arm{{Name: "baseline", LaunchCmd: "echo 'Traceback: fatal (fake)' >&2; exit 5 # {port}"}},
		Prompts: []string{"a"}, Trials: 1, LogDir: t.TempDir(), ReadyTimeout: 5 * time.Second}
	_, err := Run(context.Background(), o)
	var ie *InfraError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "Traceback: fatal (fake)") || !strings.Contains(err.Error(), "exited (exit status 5)") {
		t.Errorf("err = %v", err)
	}
}

// A server left running by a run that was killed outright (its record
// beside its log) stops the next launch, which names its process group.
func TestOrphanedServerStopsTheRun(t *testing.T) {
	dir := t.TempDir()
	octx, stop := context.WithCancel(context.Background())
	orphan := procgroup.Command(octx, 0, "sleep", "30")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stop(); _ = orphan.Wait() }() // Wait says context.Canceled, as asked
	if err := os.WriteFile(filepath.Join(dir, "baseline-t1.log"+server.PGIDSuffix), []byte(strconv.Itoa(orphan.PGID())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := Options{Arms: []Arm{{Name: "baseline", LaunchCmd: "true {port}"}}, Prompts: []string{"a"}, Trials: 1, LogDir: dir}
	_, err := Run(context.Background(), o)
	var ie *InfraError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "still runs (process group "+strconv.Itoa(orphan.PGID())) {
		t.Errorf("err = %v", err)
	}
}
