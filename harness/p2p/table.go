package p2p

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/arpatch/arpatch/harness/allreduce"
)

// WriteTable prints the matrices, the host links, the patterns, the
// findings and the verdict.
func (rep *Report) WriteTable(w io.Writer) {
	if len(rep.Pairs) > 0 {
		size := 0
		for _, p := range rep.Pairs {
			for _, r := range p.Read {
				size = max(size, r.Bytes)
			}
		}
		fmt.Fprintf(w, "P2P through CUDA IPC mappings, each pair alone, GB/s at %s (row: the GPU whose kernel runs; column: the peer whose memory it uses):\n", allreduce.FormatBytes(size))
		for _, op := range []string{OpRead, OpWrite} {
			rep.matrix(w, op+" ("+map[string]string{OpRead: "loads from", OpWrite: "stores to"}[op]+" the peer)", func(p Pair) string {
				rs := p.Read
				if op == OpWrite {
					rs = p.Write
				}
				for _, r := range rs {
					if r.Bytes == size {
						mark := ""
						if len(p.Slow) > 0 {
							mark = "*"
						}
						return fmt.Sprintf("%.1f%s", r.GBps.Median, mark)
					}
				}
				return "ERR"
			})
		}
		rep.matrix(w, "latency, µs: flag round trip / one dependent load", func(p Pair) string {
			f := func(x *Figure) string {
				if x == nil {
					return "-"
				}
				return fmt.Sprintf("%.2f", x.Median)
			}
			return f(p.FlagRTTUS) + "/" + f(p.ReadLatencyUS)
		})
		fmt.Fprintln(w, "links:")
		seen := map[string]bool{}
		for _, p := range rep.Pairs {
			a, b := min(p.GPU, p.Peer), max(p.GPU, p.Peer)
			k := fmt.Sprint(a, b)
			if !seen[k] {
				seen[k] = true
				fmt.Fprintf(w, "  GPU%d-GPU%d  %s", a, b, p.Link.Label)
				if p.Link.NominalGBps > 0 {
					fmt.Fprintf(w, ", %.1f GB/s nominal", p.Link.NominalGBps)
				}
				fmt.Fprintln(w)
			}
		}
	}
	if len(rep.HostLinks) > 0 {
		fmt.Fprintln(w, "link to pinned host memory, each GPU alone, one stream (GB/s; latency µs):")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  GPU\tlink\tsize\tloads\tstores\tdependent load")
		for _, h := range rep.HostLinks {
			lat := "-"
			if h.ReadLatencyUS != nil {
				lat = fmt.Sprintf("%.2f", h.ReadLatencyUS.Median)
			}
			for k, r := range h.Load {
				st := "-"
				for _, s := range h.Store {
					if s.Bytes == r.Bytes {
						st = fmt.Sprintf("%.1f (%.1f-%.1f)", s.GBps.Median, s.GBps.Min, s.GBps.Max)
					}
				}
				fmt.Fprintf(tw, "  GPU%d\t%s\t%s\t%.1f (%.1f-%.1f)\t%s\t%s\n", h.GPU, h.Link.Label, allreduce.FormatBytes(r.Bytes), r.GBps.Median, r.GBps.Min, r.GBps.Max, st, map[bool]string{true: lat, false: ""}[k == 0])
			}
		}
		_ = tw.Flush() // w's own errors are the caller's to see
	}
	if len(rep.Patterns) > 0 {
		fmt.Fprintf(w, "all-to-all, every GPU of a group at once: %s per peer (GB/s per GPU), a round of dependent loads from every peer (µs); median and range:\n", allreduce.FormatBytes(rep.Options.PatternBytes))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  group\tread\twrite\tround")
		for _, a := range rep.Patterns {
			if a.Op != OpRead {
				continue
			}
			cell := func(op string) string {
				for _, p := range rep.Patterns {
					if p.Op != op || p.Name != a.Name {
						continue
					}
					f := p.PerGPUGBps
					if op == OpReadLatency {
						f = p.RoundUS
					}
					if p.Error != "" || f == nil {
						return "ERR"
					}
					if op == OpReadLatency {
						return fmt.Sprintf("%.2f (%.2f-%.2f)", f.Median, f.Min, f.Max)
					}
					return fmt.Sprintf("%.1f (%.1f-%.1f)", f.Median, f.Min, f.Max)
				}
				return "-"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", a.Name, cell(OpRead), cell(OpWrite), cell(OpReadLatency))
		}
		_ = tw.Flush() // w's own errors are the caller's to see
	}
	if len(rep.Findings) > 0 {
		fmt.Fprintln(w, "findings:")
		for _, f := range rep.Findings {
			fmt.Fprintf(w, "  [%s] %s\n", f.Severity, f.Text)
		}
	}
	fmt.Fprintf(w, "verdict: %s\n", rep.Verdict)
}

// matrix prints one GPU x GPU table of cell(pair).
func (rep *Report) matrix(w io.Writer, title string, cell func(Pair) string) {
	fmt.Fprintln(w, title+":")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\t")
	for _, g := range rep.Host.GPUs {
		fmt.Fprintf(tw, "GPU%d\t", g.Index)
	}
	fmt.Fprintln(tw)
	for _, a := range rep.Host.GPUs {
		fmt.Fprintf(tw, "  GPU%d\t", a.Index)
		for _, b := range rep.Host.GPUs {
			c := "-"
			if a.Index != b.Index {
				c = "?"
				for _, p := range rep.Pairs {
					if p.GPU == a.Index && p.Peer == b.Index {
						c = cell(p)
					}
				}
			}
			fmt.Fprintf(tw, "%s\t", c)
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush() // w's own errors are the caller's to see
}
