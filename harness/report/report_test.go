package report

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/arpatch/arpatch/internal/errwriter/errwritertest"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/perf/benchfmt"

	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/chart"
	"github.com/arpatch/arpatch/harness/sglang"
	"github.com/arpatch/arpatch/harness/sglangtest"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/recipes"
)

// run benches three in-test arms (one corrupting) on the virtual clock
// of a synctest bubble, over sglangtest.Network: the reports' numbers are
// then exact, and taking them waits on nothing. Each request's rate
// varies by up to 10% (Spread), so the trials' metrics differ: the arms'
// TPOT p99s are 3.43, 3.60 and 3.66 ms in trial order, and a column that
// must hold their median (3.60) holds neither the first, the last nor
// the mean.
func run(t *testing.T) (*bench.Result, Settings) {
	t.Helper()
	var res *bench.Result
	synctest.Test(t, func(t *testing.T) {
		n := sglangtest.NewNetwork()
		defer n.Close()
		urls := map[string]string{}
		for name, cfg := range map[string]sglangtest.Config{
			"baseline": {TokPerSec: 300, TTFT: time.Millisecond, TokensPerChunk: 2, Spread: 0.1},
			"pcie":     {TokPerSec: 300, TTFT: time.Millisecond, TokensPerChunk: 2, Spread: 0.1},
			"broken":   {TokPerSec: 300, TTFT: time.Millisecond, TokensPerChunk: 2, Spread: 0.1, Variant: "nan"},
		} {
			urls[name], _ = n.Serve(sglangtest.New(cfg))
		}
		o := bench.Options{Arms: []bench.Arm{{Name: "baseline", URL: urls["baseline"]}, {Name: "pcie", URL: urls["pcie"]}, {Name: "broken", URL: urls["broken"]}},
			Prompts: []string{"a b c", "d e f", "g h i"}, MaxNewTokens: 20, Trials: 3, HTTP: n.HTTP()}
		var err error
		if res, err = bench.Run(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	})
	return res, Settings{Prompts: 3, Trials: 3, MaxNewTokens: 20, Concurrency: []int{1}, Model: "fake/model"}
}

func TestTableAndMarkdown(t *testing.T) {
	res, s := run(t)
	var b bytes.Buffer
	WriteTable(&b, res, s)
	out := b.String()
	for _, want := range []string{"arm", "tok/s", "delta", "decode tok/s", "accept len", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "TPOT p50 ms", "TPOT p99 ms", "agree", "verdict",
		"baseline", "pcie", "9/9", "too few trials to tell", "INVALID", "WARNING broken: INVALID", "broken prompt 0 diverges at byte"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// Each metric's column holds its median: TPOT p99 of the pcie arm is
	// the median of its trials' p99s, in the column under its title.
	pcie := res.Arm("pcie")
	tpot99 := fmt.Sprintf("%.2f", stats.Quantile([]float64{pcie.Metrics[0].TPOTp99ms, pcie.Metrics[1].TPOTp99ms, pcie.Metrics[2].TPOTp99ms}, 0.5))
	if cell(t, out, "pcie", "TPOT p99 ms") != tpot99 || tpot99 == "0.00" {
		t.Errorf("pcie TPOT p99 cell %q, want %s:\n%s", cell(t, out, "pcie", "TPOT p99 ms"), tpot99, out)
	}
	b.Reset()
	if err := WriteMarkdown(&b, res, s); err != nil {
		t.Fatal(err)
	}
	errwritertest.EveryWriteFails(t, func(w io.Writer) error { return WriteMarkdown(w, res, s) })
	md := b.String()
	if !strings.Contains(md, "| arm | concurrency | tok/s |") || !strings.Contains(md, "| "+stats.Table[len(stats.Table)-1].Label+" | output agreement | verdict |") ||
		!strings.Contains(md, "**INVALID**") || !strings.Contains(md, "> **broken**: INVALID") {
		t.Errorf("markdown:\n%s", md)
	}
	// The markdown row's cell under "TPOT p99 ms" holds the same median
	// (in the first table; the serving metrics' follows).
	var head []string
	for _, l := range strings.Split(md, "\n") {
		if head != nil && !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case strings.HasPrefix(l, "| arm |"):
			head = cells
		case strings.HasPrefix(l, "| pcie |"):
			if i := slices.Index(head, "TPOT p99 ms"); i < 0 || i >= len(cells) || cells[i] != tpot99 || cells[len(cells)-2] != "9/9" {
				t.Errorf("markdown pcie row lacks TPOT p99 %s under its title: %s", tpot99, l)
			}
		}
	}
}

// cell returns the value in the terminal table's row of arm under the
// column titled title (titles and cells are at least two spaces apart).
func cell(t *testing.T, table, arm, title string) string {
	t.Helper()
	lines := strings.Split(table, "\n")
	col := strings.Index(lines[1], title)
	if col < 0 {
		t.Fatalf("no column %q in %q", title, lines[1])
	}
	for _, l := range lines[2:] {
		if strings.HasPrefix(l, arm+" ") && len(l) > col {
			f := strings.Fields(l[col:])
			if len(f) > 0 {
				return f[0]
			}
		}
	}
	return ""
}

// TestBenchfmtReadsBack parses the Go benchmark lines with benchfmt, as
// benchstat does.
func TestBenchfmtReadsBack(t *testing.T) {
	res, s := run(t)
	var b bytes.Buffer
	if err := WriteBenchfmt(&b, res, s); err != nil {
		t.Fatal(err)
	}
	errwritertest.EveryWriteFails(t, func(w io.Writer) error { return WriteBenchfmt(w, res, s) })
	r := benchfmt.NewReader(&b, "bench.txt")
	n := 0
	units := map[string]string{}
	p99s := map[float64]bool{}
	for r.Scan() {
		switch rec := r.Result().(type) {
		case *benchfmt.Result:
			n++
			if !strings.HasPrefix(rec.Name.String(), "EAGLE3/arm=") || rec.Iters != 3 || rec.GetConfig("model") != "fake/model" {
				t.Errorf("result %s iters %d model %q", rec.Name, rec.Iters, rec.GetConfig("model"))
			}
			if v, ok := rec.Value("tok/s"); !ok || v <= 0 {
				t.Errorf("tok/s %v %v", v, ok)
			}
			if v, ok := rec.Value("accept-len"); !ok || v <= 1 {
				t.Errorf("accept-len %v", v)
			}
			tpot99, ok := rec.Value("tpot-p99-sec")
			p99s[tpot99] = ok
		case *benchfmt.UnitMetadata:
			units[rec.Unit] = rec.Value
		case *benchfmt.SyntaxError:
			t.Errorf("syntax error: %v", rec)
		}
	}
	// 3 trials of the baseline and pcie; broken is INVALID, so no lines.
	if n != 6 || units["tok/s"] != "higher" || units["ttft-sec"] != "lower" || units["tpot-p99-sec"] != "lower" || len(units) != len(stats.Table) {
		t.Errorf("%d results, units %v", n, units)
	}
	// Every trial's TPOT p99, in seconds.
	for _, a := range res.Arms[:2] {
		for _, m := range a.Metrics {
			if !p99s[m.TPOTp99ms/1000] || m.TPOTp99ms <= 0 {
				t.Errorf("%s: TPOT p99 %v ms not among the benchfmt values %v", a.Arm.Name, m.TPOTp99ms, p99s)
			}
		}
	}
}

func TestJSONDocument(t *testing.T) {
	res, s := run(t)
	var b bytes.Buffer
	if err := NewDocument(res, s, "test", nil).WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	errwritertest.EveryWriteFails(t, NewDocument(res, s, "test", nil).WriteJSON)
	var doc struct {
		Schema      string `json:"schema"`
		Environment struct {
			OS       string            `json:"os"`
			Versions map[string]string `json:"versions"`
		} `json:"environment"`
		Result struct {
			Baseline string `json:"baseline"`
			Arms     []struct {
				Arm    struct{ Name string } `json:"arm"`
				Trials []struct {
					Samples []struct {
						TTFT             float64 `json:"ttft_s"`
						CompletionTokens int     `json:"completion_tokens"`
						SpecVerifyCt     int     `json:"spec_verify_ct"`
						Text             string  `json:"text"`
					} `json:"samples"`
				} `json:"trials"`
				Invalid bool `json:"invalid"`
				Metrics []struct {
					TPOTp99 float64 `json:"tpot_ms_p99"`
				} `json:"trial_metrics"`
				Levels []struct {
					Summaries map[string]struct {
						Center float64 `json:"center"`
					} `json:"summaries"`
					Deltas map[string]struct {
						Verdict string `json:"verdict"`
					} `json:"deltas"`
				} `json:"levels"`
			} `json:"arms"`
		} `json:"result"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Schema != Schema || doc.Result.Baseline != "baseline" || len(doc.Result.Arms) != 3 || doc.Environment.Versions["sglang@pcie"] != "sglangtest" {
		t.Fatalf("doc %+v", doc)
	}
	// TPOT p99 per trial, its median per level, and its delta.
	pcie := doc.Result.Arms[1]
	var p99s []float64
	for i, m := range pcie.Metrics {
		if m.TPOTp99 != res.Arm("pcie").Metrics[i].TPOTp99ms || m.TPOTp99 <= 0 {
			t.Errorf("trial %d: JSON TPOT p99 %v, measured %v", i, m.TPOTp99, res.Arm("pcie").Metrics[i].TPOTp99ms)
		}
		p99s = append(p99s, m.TPOTp99)
	}
	if got, want := pcie.Levels[0].Summaries["tpot_ms_p99"].Center, stats.Quantile(p99s, 0.5); got != want || len(p99s) != 3 {
		t.Errorf("summary tpot_ms_p99 %v, median of %v = %v", got, p99s, want)
	}
	if _, ok := pcie.Levels[0].Deltas["tpot_ms_p99"]; !ok {
		t.Errorf("no tpot_ms_p99 delta: %v", pcie.Levels[0].Deltas)
	}
	smp := doc.Result.Arms[1].Trials[2].Samples[1]
	if smp.CompletionTokens != 20 || smp.SpecVerifyCt == 0 || smp.TTFT <= 0 || smp.Text == "" || !doc.Result.Arms[2].Invalid {
		t.Errorf("sample %+v", smp)
	}
}

// TestSettingsOfZeroOptions runs bench with Options built directly, every
// defaulted setting left zero, and checks that the settings a report
// records are the ones the run used: trials run, tokens generated per
// request, the level, the tokens and threshold of the output check. (The
// defaults' values against the CLI's --help are cmd/arpatch's
// TestBenchDefaults.)
func TestSettingsOfZeroOptions(t *testing.T) { synctest.Test(t, testSettingsOfZeroOptions) }

func testSettingsOfZeroOptions(t *testing.T) {
	n := sglangtest.NewNetwork()
	defer n.Close()
	cfg := sglangtest.Config{TokPerSec: 5000, TTFT: time.Millisecond, TokensPerChunk: 1}
	var arms []bench.Arm
	for _, name := range []string{"baseline", "pcie"} {
		u, _ := n.Serve(sglangtest.New(cfg))
		arms = append(arms, bench.Arm{Name: name, URL: u})
	}
	o := bench.Options{Arms: arms, Prompts: []string{"a b", "c d"}, HTTP: n.HTTP()}
	s := SettingsOf(o)
	if s.Trials != recipes.DefaultTrials || s.MaxNewTokens != recipes.DefaultMaxNewTokens || !slices.Equal(s.Concurrency, []int{recipes.DefaultConcurrency}) ||
		s.AgreeTokens != sglang.DefaultAgreeTokens || s.AgreeThreshold != bench.DefaultAgreeThreshold {
		t.Fatalf("SettingsOf(zero options) = %+v, want the defaults", s)
	}
	res, err := bench.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, ar := range res.Arms {
		if len(ar.Trials) != s.Trials {
			t.Errorf("%s ran %d trials, the settings record %d", ar.Arm.Name, len(ar.Trials), s.Trials)
		}
		for _, tr := range ar.Trials {
			if tr.Concurrency != s.Concurrency[0] {
				t.Errorf("%s trial %d ran at concurrency %d, the settings record %v", ar.Arm.Name, tr.Index, tr.Concurrency, s.Concurrency)
			}
			for _, x := range tr.Samples {
				if x.CompletionTokens != s.MaxNewTokens || x.TokensAtAgree != s.AgreeTokens {
					t.Errorf("%s trial %d: %d tokens generated, %d compared; the settings record max_new_tokens %d, agree_tokens %d",
						ar.Arm.Name, tr.Index, x.CompletionTokens, x.TokensAtAgree, s.MaxNewTokens, s.AgreeTokens)
				}
			}
		}
	}
	if a := res.Arm("pcie").Agreement; a == nil || a.Threshold != s.AgreeThreshold {
		t.Errorf("pcie agreement %+v, the settings record threshold %v", a, s.AgreeThreshold)
	}
	// The check turned off is recorded as off (0), and the run uses 0.
	o.AgreeOff = true
	if s := SettingsOf(o); s.AgreeThreshold != 0 {
		t.Errorf("SettingsOf(AgreeOff) records threshold %v, want 0", s.AgreeThreshold)
	}
	if res, err = bench.Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if a := res.Arm("pcie").Agreement; a == nil || a.Threshold != 0 {
		t.Errorf("pcie agreement with AgreeOff %+v, want threshold 0", a)
	}
}

// runFasterBroken benches a baseline, a correct arm and an arm that is
// faster and computes garbage ("fast": 1.7x the baseline's rate, its
// outputs all NaN), 5 trials each: the arm that a report must never show
// as a win.
func runFasterBroken(t *testing.T) (*bench.Result, Settings) {
	t.Helper()
	var res *bench.Result
	synctest.Test(t, func(t *testing.T) {
		n := sglangtest.NewNetwork()
		defer n.Close()
		var arms []bench.Arm
		for _, a := range []struct {
			name string
			cfg  sglangtest.Config
		}{
			{"baseline", sglangtest.Config{TokPerSec: 300, TTFT: time.Millisecond, TokensPerChunk: 2, Spread: 0.05}},
			{"pcie", sglangtest.Config{TokPerSec: 300, TTFT: time.Millisecond, TokensPerChunk: 2, Spread: 0.05}},
			{"fast", sglangtest.Config{TokPerSec: 510, TTFT: time.Millisecond, TokensPerChunk: 2, Spread: 0.05, Variant: "nan"}},
		} {
			u, _ := n.Serve(sglangtest.New(a.cfg))
			arms = append(arms, bench.Arm{Name: a.name, URL: u})
		}
		var err error
		res, err = bench.Run(context.Background(), bench.Options{Arms: arms, Prompts: []string{"a b c", "d e f", "g h i"}, MaxNewTokens: 20, Trials: 5, HTTP: n.HTTP()})
		if err != nil {
			t.Fatal(err)
		}
	})
	fast, base := res.Arm("fast"), res.Arm("baseline")
	if fast.Verdict != bench.Invalid || fast.Levels[0].Summaries[stats.TokS].Center < 1.5*base.Levels[0].Summaries[stats.TokS].Center {
		t.Fatalf("fixture: fast arm %s at %.0f tok/s against %.0f: want INVALID and much faster", fast.Verdict, fast.Levels[0].Summaries[stats.TokS].Center, base.Levels[0].Summaries[stats.TokS].Center)
	}
	return res, Settings{Prompts: 3, Trials: 5, MaxNewTokens: 20, Concurrency: []int{1}, Model: "fake/model"}
}

// benchstat runs the real benchstat (go.mod's tool golang.org/x/perf/cmd/benchstat)
// on file with args.
func benchstat(t *testing.T, file string, args ...string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH: benchstat runs as `go tool benchstat`")
	}
	out, err := exec.Command(goBin, append([]string{"tool", "benchstat"}, append(args, file)...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool benchstat %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestBenchfmtLeavesInvalidOut: the faster, corrupting arm has no line in
// the benchfmt file, which says why; real benchstat, whatever the
// columns, shows no figure of it and no "faster" row, while it still
// compares the valid arms.
func TestBenchfmtLeavesInvalidOut(t *testing.T) {
	res, s := runFasterBroken(t)
	var b bytes.Buffer
	if err := WriteBenchfmt(&b, res, s); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "arm=fast") || !strings.Contains(b.String(), "\narpatch-excluded: arm fast: INVALID: no result, so no lines\n") {
		t.Errorf("benchfmt:\n%s", b.String())
	}
	file := filepath.Join(t.TempDir(), "bench.txt")
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-col", "/arm"}, {"-col", "/arm", "-row", "/concurrency"}, {"-col", "/arm", "-row", ".name"}, {"-col", ".config"}, {}} {
		out := benchstat(t, file, args...)
		// "fast" appears only inside the exclusion note (a header), and
		// no comparison claims a change as big as the INVALID arm's.
		if strings.Count(out, "fast") != strings.Count(out, "arm fast: INVALID: no result, so no lines") || strings.Contains(out, "+6") || strings.Contains(out, "+7") {
			t.Errorf("benchstat %v shows the INVALID arm:\n%s", args, out)
		}
	}
	if out := benchstat(t, file, "-col", "/arm"); !strings.Contains(out, "pcie") || !strings.Contains(out, "vs base") {
		t.Errorf("benchstat -col /arm no longer compares the valid arms:\n%s", out)
	}

	// No valid arm at all (an INVALID baseline): no result line, the
	// reason on a line of its own.
	for _, a := range res.Arms {
		a.Verdict = bench.NoReference
	}
	res.Arm("baseline").Verdict = bench.InvalidBaseline
	b.Reset()
	if err := WriteBenchfmt(&b, res, s); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "BenchmarkEAGLE3") || !strings.Contains(b.String(), "arpatch-excluded: arm baseline: INVALID baseline; arm pcie: no verdict (INVALID baseline); arm fast: no verdict (INVALID baseline): no result") {
		t.Errorf("benchfmt of a run without a result:\n%s", b.String())
	}
}

// TestJSONAndPlotMarkInvalid: the JSON keeps the INVALID arm's
// measurements under its verdict but no delta against the baseline (no
// "faster" anywhere in it); the plot draws no line for it and its legend
// says so; a plot with no valid arm is refused, naming them.
func TestJSONAndPlotMarkInvalid(t *testing.T) {
	res, s := runFasterBroken(t)
	var b bytes.Buffer
	if err := NewDocument(res, s, "test", nil).WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Result struct {
			Arms []struct {
				Invalid bool                  `json:"invalid"`
				Verdict string                `json:"verdict"`
				Levels  []bench.Level         `json:"levels"`
				Arm     struct{ Name string } `json:"arm"`
			} `json:"arms"`
		} `json:"result"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	fast := doc.Result.Arms[2]
	if fast.Arm.Name != "fast" || !fast.Invalid || fast.Verdict != "INVALID" || fast.Levels[0].Deltas != nil || fast.Levels[0].Verdict != bench.Invalid || fast.Levels[0].Summaries[stats.TokS].Center == 0 {
		t.Errorf("JSON of the INVALID arm: %+v", fast)
	}
	if doc.Result.Arms[1].Levels[0].Deltas[stats.TokS].Verdict == "" {
		t.Errorf("the valid arm lost its delta: %+v", doc.Result.Arms[1].Levels[0])
	}
	if strings.Count(b.String(), `"faster"`) != 0 {
		t.Errorf("the JSON says faster somewhere")
	}

	curves := Curves(res, stats.TokS)
	if curves[2].NoResult != "INVALID" || curves[1].NoResult != "" {
		t.Errorf("curves: %+v", curves)
	}
	out := filepath.Join(t.TempDir(), "p.svg")
	if err := chart.PlotConcurrency(out, "title", "tok/s", curves); err != nil {
		t.Fatal(err)
	}
	svg, _ := os.ReadFile(out)
	drawn := chart.PlotConcurrency // the same plot without the INVALID arm: byte for byte, but for its legend line
	out2 := filepath.Join(t.TempDir(), "p2.svg")
	if err := drawn(out2, "title", "tok/s", curves[:2]); err != nil {
		t.Fatal(err)
	}
	svg2, _ := os.ReadFile(out2)
	if !strings.Contains(string(svg), "fast: INVALID, not drawn") || strings.Count(string(svg), "<path") != strings.Count(string(svg2), "<path") {
		t.Errorf("plot: legend or lines of the INVALID arm (%d paths, %d without it)", strings.Count(string(svg), "<path"), strings.Count(string(svg2), "<path"))
	}
	for i := range curves {
		curves[i].NoResult = "no verdict (INVALID baseline)"
	}
	if err := chart.PlotConcurrency(out, "title", "tok/s", curves); err == nil || !strings.Contains(err.Error(), "no arm with a result to plot (baseline: no verdict (INVALID baseline); pcie") {
		t.Errorf("plot of no valid arm: %v", err)
	}
}

// The serving table shows, per arm and level, the median across trials
// of each vLLM figure the selection names, under its title; an INVALID
// arm's figures are not shown.
func TestServingTable(t *testing.T) {
	res, s := run(t)
	s.Serving = stats.Selection{Metrics: []string{stats.ServingTTFT, stats.ServingE2EL}, Percentiles: []float64{90, 99.9}}
	s.RequestRate = "inf"
	for _, a := range res.Arms { // as bench.Run computes them with this selection
		for i, tr := range a.Trials {
			a.Serving[i] = stats.ComputeServing(tr, s.Serving)
		}
	}
	var b bytes.Buffer
	WriteServing(&b, res, s)
	out := b.String()
	if !strings.HasPrefix(out, "serving metrics as vllm bench serve computes them (max concurrency 1, request rate inf (all at once)); medians across trials\n") {
		t.Errorf("title:\n%s", out)
	}
	lines := strings.Split(out, "\n")
	for _, h := range []string{"req/s", "output tok/s", "total tok/s", "TTFT mean ms", "TTFT median ms", "TTFT p90 ms", "TTFT p99.9 ms", "E2EL mean ms", "E2EL p99.9 ms"} {
		if !strings.Contains(lines[1], h) {
			t.Errorf("header lacks %q: %s", h, lines[1])
		}
	}
	if strings.Contains(lines[1], "TPOT") || strings.Contains(lines[1], "ITL") {
		t.Errorf("header shows a metric not selected: %s", lines[1])
	}
	pcie := res.Arm("pcie")
	var rps, p90 []float64
	for _, sv := range pcie.Serving {
		rps = append(rps, sv.RequestThroughput)
		p90 = append(p90, sv.Latencies[0].Percentiles[0].Value)
	}
	if len(rps) != 3 {
		t.Fatalf("pcie has %d serving records, want one per trial (3)", len(rps))
	}
	// cell reads the first table of out: the serving one here.
	if got, want := cell(t, out, "pcie", "req/s"), fmt.Sprintf("%.2f", stats.Quantile(rps, 0.5)); got != want || want == "0.00" {
		t.Errorf("pcie req/s %q, want %s:\n%s", got, want, out)
	}
	if got, want := cell(t, out, "pcie", "TTFT p90 ms"), fmt.Sprintf("%.2f", stats.Quantile(p90, 0.5)); got != want {
		t.Errorf("pcie TTFT p90 %q, want %s:\n%s", got, want, out)
	}
	if got := cell(t, out, "broken", "req/s"); got != "-" {
		t.Errorf("the INVALID arm's req/s is shown: %q\n%s", got, out)
	}
	b.Reset()
	if err := WriteMarkdown(&b, res, s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| arm | concurrency | req/s | output tok/s | total tok/s | TTFT mean ms |") {
		t.Errorf("markdown lacks the serving table:\n%s", &b)
	}
}
