package stats

import "strings"

// Metric is one entry of Table: everything a consumer needs to show,
// store, export, plot or judge one per-trial metric. Adding a metric is:
//   - a field of Metrics, set in Compute;
//   - one entry here (bench tables, JSON, benchfmt, nightly checks, CI
//     outputs, history export and plots read it from here);
//   - a history migration adding its Column (history/migrate.go's
//     migrations, and the same in PostgreSQL's types in
//     history/postgres.go's pgMigrations; TestEveryMetricHasItsColumn
//     checks every entry has one), with fills[v] = fillFromSamples for
//     the trials stored before it, and its name in history's fromSamples
//     when Compute gets it from a sample's stored fields (TestFromSamples
//     checks that list; any other metric stays NULL for old trials);
//   - docs/nightly.md's table of regression.metrics, whose names a doc
//     test compares with Table.
//
// Tests take the metric count, headers and units from Table and the
// schema version from history.SchemaVersion (an older history from
// history.OpenAt), so they need no edit, but for the outputs the docs
// show (docs/usage.md's nightly demo, whose bench table gains the column;
// docs/commands.md, regenerated).
type Metric struct {
	// Name is the metric's key everywhere: bench summaries and deltas
	// (JSON), nightly's regression.metrics, check names, history export
	// (CSV header, JSON key), plots and CI outputs ("tok_s").
	Name string
	// Unit of the values Get returns: "tok/s", "ms" or "tokens/verify".
	Unit string
	// HigherIsBetter is the direction that is better: true for rates,
	// false for latencies.
	HigherIsBetter bool
	// Get reads the metric from a trial's Metrics.
	Get func(Metrics) float64
	// Column is the REAL column of the history database's trials table
	// that stores the metric per trial.
	Column string
	// Label heads the metric's column in bench tables ("TTFT p99 ms");
	// Prec is the number of decimals shown there.
	Label string
	Prec  int
	// Benchfmt is the unit in Go benchmark format (benchstat): values in
	// ms are written in seconds, as the "-sec" suffix says.
	Benchfmt string
}

// TokS is the name of the headline metric, tok/s: bench verdicts, B
// against A in nightly, and the default of plots and regression checks.
const TokS = "tok_s"

// Table lists the metrics in the order tables, exports and CI outputs
// show them. TPOT is (E2E - TTFT) / (tokens - 1) per request of more than
// one token; TPOT p99 is its 99th percentile over a trial's requests, as
// bench_serving reports it (Upstream:
// python/sglang/bench_serving.py@84118acf50b3a4c74e85e9ff9033792552de1a76
// (calculate_metrics: p99_tpot_ms = np.percentile(tpots, 99) * 1000)).
var Table = []Metric{
	{Name: TokS, Unit: "tok/s", HigherIsBetter: true, Get: func(m Metrics) float64 { return m.TokPerSec }, Column: "tok_s", Label: "tok/s", Prec: 1, Benchfmt: "tok/s"},
	{Name: "decode_tok_s", Unit: "tok/s", HigherIsBetter: true, Get: func(m Metrics) float64 { return m.DecodeTokPerS }, Column: "decode_tok_s", Label: "decode tok/s", Prec: 1, Benchfmt: "decode-tok/s"},
	{Name: "accept_length", Unit: "tokens/verify", HigherIsBetter: true, Get: func(m Metrics) float64 { return m.AcceptLength }, Column: "accept_length", Label: "accept len", Prec: 2, Benchfmt: "accept-len"},
	{Name: "ttft_ms_p50", Unit: "ms", Get: func(m Metrics) float64 { return m.TTFTp50ms }, Column: "ttft_ms_p50", Label: "TTFT p50 ms", Prec: 1, Benchfmt: "ttft-sec"},
	{Name: "ttft_ms_p99", Unit: "ms", Get: func(m Metrics) float64 { return m.TTFTp99ms }, Column: "ttft_ms_p99", Label: "TTFT p99 ms", Prec: 1, Benchfmt: "ttft-p99-sec"},
	{Name: "itl_ms_p50", Unit: "ms", Get: func(m Metrics) float64 { return m.ITLp50ms }, Column: "itl_ms_p50", Label: "ITL p50 ms", Prec: 2, Benchfmt: "itl-sec"},
	{Name: "tpot_ms", Unit: "ms", Get: func(m Metrics) float64 { return m.TPOTms }, Column: "tpot_ms", Label: "TPOT p50 ms", Prec: 2, Benchfmt: "tpot-sec"},
	{Name: "tpot_ms_p99", Unit: "ms", Get: func(m Metrics) float64 { return m.TPOTp99ms }, Column: "tpot_ms_p99", Label: "TPOT p99 ms", Prec: 2, Benchfmt: "tpot-p99-sec"},
}

// Lookup returns the Table entry named name.
func Lookup(name string) (Metric, bool) {
	for _, m := range Table {
		if m.Name == name {
			return m, true
		}
	}
	return Metric{}, false
}

// Names returns the metric names in Table order.
func Names() []string {
	out := make([]string, len(Table))
	for i, m := range Table {
		out[i] = m.Name
	}
	return out
}

// Known is the names in Table order, comma-separated: for the error that
// refuses an unknown metric.
func Known() string { return strings.Join(Names(), ", ") }

// Values returns every metric of m by name.
func Values(m Metrics) map[string]float64 {
	out := make(map[string]float64, len(Table))
	for _, d := range Table {
		out[d.Name] = d.Get(m)
	}
	return out
}

// Better is the direction that is better, as benchfmt's "better" unit
// metadata says it: "higher" or "lower".
func (d Metric) Better() string {
	if d.HigherIsBetter {
		return "higher"
	}
	return "lower"
}

// Axis is the metric's axis title on plots: "tpot_ms_p99 (ms)".
func (d Metric) Axis() string { return d.Name + " (" + d.Unit + ")" }

// BenchfmtValue is v (in the metric's Unit) in its Benchfmt unit: ms as
// seconds.
func (d Metric) BenchfmtValue(v float64) float64 {
	if d.Unit == "ms" {
		return v / 1000
	}
	return v
}
