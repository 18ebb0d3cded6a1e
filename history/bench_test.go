package history

import (
	"bytes"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/internal/pgtest"
)

// benchRuns is the history the benchmarks read: three years of nightlies
// on a fleet of nine hosts (about 10,000 runs), all on one hardware key
// and workload so that every run is on the plot and in the window's
// candidates (the worst case for both).
const benchRuns = 10000

// benchOutcome is one nightly as `arpatch nightly` records it: two arms of
// five trials at one concurrency level, each trial with 8 requests (80
// samples a run), four drift records, a build, validity and regression
// check per arm and a drift check per series, and the environment's keys.
// Run i regresses every 50th night and drifts every 97th.
func benchOutcome(i int) Outcome {
	o := Outcome{Status: Complete, Verdict: "no regression", Env: map[string]string{"sglang_version@pcie": "0.5.5"}}
	for _, series := range []string{"pcie-2026-07", "pcie-2026-08"} {
		for _, p := range []string{"0001-pcie-dispatch-branch.patch", "0002-pcie-gate-bypass.patch"} {
			o.Drift = append(o.Drift, DriftRecord{Series: series, Commit: fmt.Sprintf("%040x", i), Rev: "main", Patch: p, Fit: "exact"})
		}
		st := CheckPass
		if i%97 == 0 {
			st = CheckFail
		}
		o.Checks = append(o.Checks, Check{Name: series + " at main", Kind: KindDrift, Status: st})
	}
	for a, arm := range []string{"baseline", "pcie"} {
		var trials []TrialRecord
		for k := 1; k <= 5; k++ {
			v := 1000 + 300*float64(a) + float64((i*7+k)%40)
			t := TrialRecord{Index: k, Concurrency: 1, Wall: 12.5, Values: map[string]float64{}}
			for j, m := range stats.Table {
				t.Values[m.Name] = v + float64(j)
			}
			for p := 0; p < 8; p++ {
				t.Samples = append(t.Samples, SampleRecord{Prompt: p, TTFT: 0.02, E2E: 1.1, CompletionTokens: 256, SpecVerifyCt: 90})
			}
			trials = append(trials, t)
		}
		o.Arms = append(o.Arms, ArmRecord{Name: arm, Recipe: arm, BuildKey: fmt.Sprintf("%064x", a), Agreement: 1, Trials: trials})
		st := CheckPass
		if arm == "pcie" && i%50 == 0 {
			st = CheckFail
		}
		o.Checks = append(o.Checks,
			Check{Name: "build " + arm, Kind: KindBuild, Status: CheckPass},
			Check{Name: "output of " + arm, Kind: KindValidity, Status: CheckPass},
			Check{Name: arm + " tok_s vs history", Kind: KindRegression, Status: st})
	}
	if i%50 == 0 {
		o.ExitCode = ExitFailedChecks
	}
	return o
}

// benchEnv is the environment a nightly records at BeginRun.
var benchEnv = map[string]string{"gpu_model": "NVIDIA RTX PRO 6000 Blackwell", "gpu_count": "8", "driver": "580.95.05", "cuda": "12.9",
	"host": "box-a", "topology": "PIX PXB SYS", "python": "3.12.3", "torch": "2.8.0", "nvcc": "12.9.86", "kernel": "6.8.0-64"}

// benchHistory is the path of a history of n runs (benchOutcome), built
// once per test binary with the store's own calls: BeginRun, then Record,
// one run at a time, as n nightlies would.
var benchHistory = sync.OnceValues(func() (string, error) {
	path, err := benchTarget()
	if err != nil {
		return "", err
	}
	s, err := Open(path)
	if err != nil {
		return "", err
	}
	start := time.Date(2023, 1, 1, 3, 0, 0, 0, time.UTC)
	for i := 0; i < benchRuns; i++ {
		id, err := s.BeginRun(Run{StartedAt: start.Add(time.Duration(i) * 2 * time.Hour), HardwareKey: "8x NVIDIA RTX PRO 6000 Blackwell", Workload: "bench-w1",
			SGLangCommit: fmt.Sprintf("%040x", i), PID: 4242, Env: benchEnv})
		if err != nil {
			return "", err
		}
		if err := s.Record(id, benchOutcome(i)); err != nil {
			return "", err
		}
	}
	return path, s.Close()
})

// benchPostgres builds the benchmarks' history on PostgreSQL (the
// server of $ARPATCH_TEST_POSTGRES, else one internal/pgtest starts), in
// a schema of its own dropped when the binary ends, instead of SQLite.
var benchPostgres = flag.Bool("bench-postgres", false, "build the benchmarks' history on PostgreSQL ($ARPATCH_TEST_POSTGRES or a throwaway server), not SQLite")

// benchTarget is where benchHistory builds: a SQLite file in the
// binary's scratch directory, or with -bench-postgres the URL of a new
// schema.
func benchTarget() (string, error) {
	if !*benchPostgres {
		dir, err := tempDirFor("arpatch-bench-history")
		if err != nil {
			return "", err
		}
		return filepath.Join(dir, "h.db"), nil
	}
	base, why := pgtest.Server()
	if base == "" {
		return "", fmt.Errorf("-bench-postgres: no PostgreSQL server: %s", why)
	}
	db, err := sql.Open("pgx", base)
	if err != nil {
		return "", err
	}
	defer func() { _ = db.Close() }() // nothing written through it after the schema
	name := fmt.Sprintf("bench%d", os.Getpid())
	if _, err := db.Exec(`CREATE SCHEMA ` + name); err != nil {
		return "", err
	}
	dropBenchSchema = func() {
		if db, err := sql.Open("pgx", base); err == nil {
			_, _ = db.Exec(`DROP SCHEMA ` + name + ` CASCADE`) // best effort: a throwaway schema
			_ = db.Close()
		}
	}
	return pgtest.WithParam(base, "search_path", name), nil
}

// dropBenchSchema drops benchTarget's schema (TestMain, at the end).
var dropBenchSchema = func() {}

// reportCPU adds the process's CPU time (user + system) per iteration to
// the benchmark's figures as cpu-ms/op: on a loaded machine wall time
// holds the others' work, CPU time much less of it. Call it first; it
// measures at the benchmark's end.
func reportCPU(b *testing.B) {
	b.Helper()
	start := cpuTime()
	b.Cleanup(func() { b.ReportMetric(float64((cpuTime()-start).Microseconds())/1000/float64(b.N), "cpu-ms/op") })
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru) // cannot fail with RUSAGE_SELF
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func openBench(b *testing.B) *Store {
	b.Helper()
	path, err := benchHistory()
	if err != nil {
		b.Fatal(err)
	}
	s, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	b.ResetTimer()
	reportCPU(b)
	return s
}

// BenchmarkExport10k is `arpatch history export --format csv|json` over
// 10,000 runs (100,000 trials, 800,000 samples), written to a counter of
// bytes and lines.
func BenchmarkExport10k(b *testing.B) {
	for _, format := range []string{"csv", "json"} {
		b.Run(format, func(b *testing.B) {
			s := openBench(b)
			for b.Loop() {
				var w lineCounter
				export := s.ExportCSV
				if format == "json" {
					export = s.ExportJSON
				}
				if err := export(&w); err != nil {
					b.Fatal(err)
				}
				// CSV: a header and a line a trial; JSON: an object a trial.
				if format == "csv" && w.lines != benchRuns*10+1 || format == "json" && w.objects != benchRuns*10 {
					b.Fatalf("export %s: %d lines, %d objects", format, w.lines, w.objects)
				}
			}
		})
	}
}

// lineCounter counts the newlines and the lines "  {" (a JSON export's
// objects) written to it.
// A "\n  {" split between two writes is counted: the last 3 bytes of
// each write are kept for the next.
type lineCounter struct {
	lines, objects int
	tail           []byte
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.lines += bytes.Count(p, []byte("\n"))
	c.tail = append(c.tail, p...)
	c.objects += bytes.Count(c.tail, []byte("\n  {"))
	c.tail = append(c.tail[:0], c.tail[max(0, len(c.tail)-3):]...)
	return len(p), nil
}

// BenchmarkPlot10k is `arpatch history plot --metric tok_s` over 10,000
// runs, written as SVG.
func BenchmarkPlot10k(b *testing.B) {
	s := openBench(b)
	out := filepath.Join(b.TempDir(), "p.svg")
	for b.Loop() {
		if err := s.Plot(stats.TokS, out, Series{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNightlyHistory10k is a nightly's history step on a history of
// 10,000 runs, the store calls nightly.Run and nightly.Execute make: open
// the history, mark stale runs, begin the run, read the reference window
// of tok/s for both arms (history.window 7) and the environment of each
// reference run, record the outcome in one transaction, then draw
// outputs.plot (tok/s over time, one point per run and arm: SVG, then
// PNG). Each iteration adds its run to the history.
func BenchmarkNightlyHistory10k(b *testing.B) {
	for _, ext := range []string{"svg", "png"} {
		b.Run(ext, func(b *testing.B) {
			path, err := benchHistory()
			if err != nil {
				b.Fatal(err)
			}
			out := filepath.Join(b.TempDir(), "tok_s."+ext)
			b.ResetTimer()
			reportCPU(b)
			i := 0
			for b.Loop() {
				i++
				s, err := Open(path)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.MarkStale(); err != nil {
					b.Fatal(err)
				}
				hw, w := "8x NVIDIA RTX PRO 6000 Blackwell", "bench-w1"
				id, err := s.BeginRun(Run{HardwareKey: hw, Workload: w, Env: benchEnv})
				if err != nil {
					b.Fatal(err)
				}
				refs := map[int64]bool{}
				for _, arm := range []string{"baseline", "pcie"} {
					vals, runs, err := s.Window(hw, w, arm, stats.TokS, 1, 7, id)
					if err != nil || len(vals) != 35 {
						b.Fatalf("window of %s: %d values, %v", arm, len(vals), err)
					}
					for _, r := range runs {
						refs[r] = true
					}
				}
				for r := range refs {
					if _, err := s.Env(r); err != nil {
						b.Fatal(err)
					}
				}
				if err := s.Record(id, benchOutcome(benchRuns+i)); err != nil {
					b.Fatal(err)
				}
				if err := s.Plot(stats.TokS, out, Series{HardwareKey: hw, Workload: w}); err != nil {
					b.Fatal(err)
				}
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
