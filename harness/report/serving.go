package report

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/internal/textfmt"
)

// servingColumn is one column of the serving table: its header and the
// stats.Serving figure (Figures' key) it shows.
type servingColumn struct{ label, key string }

// servingColumns are the serving table's figures for the selection:
// request and token throughput, then mean, median and each percentile
// of every selected latency metric, in vLLM's order.
func servingColumns(sel stats.Selection) []servingColumn {
	cols := []servingColumn{{"req/s", "request_throughput"}, {"output tok/s", "output_throughput"}, {"total tok/s", "total_token_throughput"}}
	for _, m := range stats.ServingMetrics {
		if !containsString(sel.Metrics, m.Name) {
			continue
		}
		cols = append(cols, servingColumn{m.Label + " mean ms", "mean_" + m.Name + "_ms"}, servingColumn{m.Label + " median ms", "median_" + m.Name + "_ms"})
		for _, p := range sel.Percentiles {
			cols = append(cols, servingColumn{m.Label + " p" + strconv.FormatFloat(p, 'f', -1, 64) + " ms", stats.PercentileKey(p, m.Name)})
		}
	}
	return cols
}

func containsString(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// servingRows are one arm at one level each: the median across the
// level's trials of each column's figure, then the level's verdict. An
// arm whose figures are no result (bench.Verdict.Valid is false) shows
// none of them: "-" in each column, and its verdict.
func servingRows(res *bench.Result, cols []servingColumn) [][]string {
	var out [][]string
	for _, a := range res.Arms {
		for _, l := range a.Levels {
			r := []string{a.Arm.Name, fmt.Sprint(l.Concurrency)}
			per := map[string][]float64{}
			for i, t := range a.Trials {
				if t.Concurrency != l.Concurrency || i >= len(a.Serving) {
					continue
				}
				for _, f := range a.Serving[i].Figures() {
					per[f.Key] = append(per[f.Key], f.Value)
				}
			}
			for _, c := range cols {
				v := "-"
				if l.Verdict.Valid() && a.Verdict.Valid() && len(per[c.key]) > 0 {
					v = fmt.Sprintf("%.2f", stats.Quantile(per[c.key], 0.5))
				}
				r = append(r, v)
			}
			out = append(out, append(r, string(l.Verdict)))
		}
	}
	return out
}

// servingLoad says how the requests were sent: "max concurrency 4,
// request rate inf" or "... request rate 8 req/s, burstiness 1
// (Poisson), seed 0".
func servingLoad(s Settings) string {
	load := "max concurrency " + textfmt.Ints(s.Concurrency, ",") + ", request rate inf (all at once)"
	if r, ok := s.RequestRate.(float64); ok {
		b := fmt.Sprintf("burstiness %v", s.Burstiness)
		if s.Burstiness == 1.0 {
			b += " (Poisson)"
		}
		load = fmt.Sprintf("max concurrency %s, request rate %g req/s, %s, seed %d", textfmt.Ints(s.Concurrency, ","), r, b, s.Seed)
	}
	return load
}

// WriteServing prints the serving table: per arm and level, the figures
// `vllm bench serve` prints (request throughput, output and total token
// throughput, mean, median and the chosen percentiles of the chosen
// latency metrics), each the median across the level's trials.
func WriteServing(w io.Writer, res *bench.Result, s Settings) {
	cols := servingColumns(s.Serving)
	fmt.Fprintf(w, "serving metrics as vllm bench serve computes them (%s); medians across trials\n", servingLoad(s))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	h := []string{"arm", "conc"}
	for _, c := range cols {
		h = append(h, c.label)
	}
	fmt.Fprintln(tw, strings.Join(append(h, "verdict"), "\t")+"\t")
	for _, r := range servingRows(res, cols) {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	tw.Flush()
}

// writeServingMarkdown is WriteServing as a markdown table.
func writeServingMarkdown(w io.Writer, res *bench.Result, s Settings) {
	cols := servingColumns(s.Serving)
	fmt.Fprintf(w, "\nServing metrics as `vllm bench serve` computes them (%s); medians across trials.\n\n", servingLoad(s))
	h := []string{"arm", "concurrency"}
	for _, c := range cols {
		h = append(h, c.label)
	}
	h = append(h, "verdict")
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(h, " | "), strings.Repeat("---|", len(h)))
	for _, r := range servingRows(res, cols) {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
}
