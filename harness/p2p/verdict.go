package p2p

import (
	"fmt"
	"slices"
	"strings"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/internal/textfmt"
	"github.com/arpatch/arpatch/internal/torchrun"
)

// verdict sums the report up in one line.
func (b *builder) verdict() string {
	rep := b.rep
	n := len(b.o.GPUs)
	if rep.Run.Stopped != nil || rep.Run.Exit == torchrun.ExitInterrupted {
		return "interrupted: the cases after the signal were not run; no verdict is drawn"
	}
	if len(rep.Corrupt) > 0 {
		c := rep.Corrupt[0]
		if c.Peer == HostPeer {
			return fmt.Sprintf("CORRUPT: GPU%d's link to pinned host memory changes data (%s): nothing measured through it can be trusted", c.GPU, c.Link)
		}
		return fmt.Sprintf("CORRUPT: %s between GPU%d and GPU%d (%s): custom allreduce must not run there (%d %s found bytes wrong)",
			CorruptText, c.GPU, c.Peer, c.Link, len(rep.Corrupt), textfmt.Word(len(rep.Corrupt), "check", "checks"))
	}
	for _, f := range rep.Findings {
		if f.Severity == Error {
			return "FAILED: " + f.Text
		}
	}
	if n == 1 {
		h := hostSummary(rep.HostLinks)
		return fmt.Sprintf("1 GPU (%s): no peer, so no P2P pair or all-to-all pattern can be measured here; its link to pinned host memory, every byte checked and exact: %s", b.gpuName(0), h)
	}
	var parts []string
	kinds := map[string]bool{}
	for _, p := range rep.Pairs {
		kinds[p.Link.Label] = true
	}
	s := fmt.Sprintf("%d GPUs, %d ordered pairs, every byte checked and exact", n, len(rep.Pairs))
	if len(kinds) == 1 {
		for k := range kinds {
			s = fmt.Sprintf("%d GPUs, every pair %s, every byte checked and exact", n, k)
		}
	}
	if r, w := spread(rep.Pairs, true), spread(rep.Pairs, false); r != "" {
		parts = append(parts, "pairs alone: read "+r+", write "+w)
	}
	if rtt := rttSpread(rep.Pairs); rtt != "" {
		parts = append(parts, "flag round trip "+rtt)
	}
	slow := 0
	for _, p := range rep.Pairs {
		slow += len(p.Slow)
	}
	if slow > 0 {
		parts = append(parts, fmt.Sprintf("%s far below %s link (see findings)", textfmt.Plural(slow, "rate", "rates"), textfmt.Word(slow, "its", "their")))
	}
	if a := asymmetry(rep.Patterns); a != "" {
		parts = append(parts, a)
	}
	return s + ": " + strings.Join(parts, "; ")
}

func hostSummary(hs []HostLinkReport) string {
	var out []string
	for _, h := range hs {
		var l, st string
		for _, r := range h.Load {
			l += fmt.Sprintf(" %.1f at %s,", r.GBps.Median, allreduce.FormatBytes(r.Bytes))
		}
		for _, r := range h.Store {
			st += fmt.Sprintf(" %.1f at %s,", r.GBps.Median, allreduce.FormatBytes(r.Bytes))
		}
		out = append(out, fmt.Sprintf("GPU%d (%s) loads%s stores%s GB/s", h.GPU, h.Link.Label, strings.TrimSuffix(l, ","), strings.TrimSuffix(st, ",")))
	}
	return strings.Join(out, "; ")
}

// spread is the range of the pairs' read (or write) medians at the largest
// size, "51.0-53.2 GB/s at 64M".
func spread(ps []Pair, read bool) string {
	var xs []float64
	size := 0
	for _, p := range ps {
		rs := p.Write
		if read {
			rs = p.Read
		}
		if len(rs) == 0 {
			continue
		}
		r := slices.MaxFunc(rs, func(a, b Rate) int { return a.Bytes - b.Bytes })
		size = r.Bytes
		xs = append(xs, r.GBps.Median)
	}
	if len(xs) == 0 {
		return ""
	}
	lo, hi := slices.Min(xs), slices.Max(xs)
	if hi-lo < 0.05 {
		return fmt.Sprintf("%.1f GB/s at %s", lo, allreduce.FormatBytes(size))
	}
	return fmt.Sprintf("%.1f-%.1f GB/s at %s", lo, hi, allreduce.FormatBytes(size))
}

func rttSpread(ps []Pair) string {
	var xs []float64
	for _, p := range ps {
		if p.FlagRTTUS != nil {
			xs = append(xs, p.FlagRTTUS.Median)
		}
	}
	if len(xs) == 0 {
		return ""
	}
	lo, hi := slices.Min(xs), slices.Max(xs)
	if hi-lo < 0.05 {
		return fmt.Sprintf("%.2f µs", lo)
	}
	return fmt.Sprintf("%.2f-%.2f µs", lo, hi)
}

// asymmetry is the verdict's clause on the widest group measured.
func asymmetry(ps []PatternReport) string {
	as := asymmetries(ps)
	if len(as) == 0 {
		return ""
	}
	a := as[len(as)-1] // Patterns lists all GPUs last
	s := fmt.Sprintf("all-to-all %s: read %.1f GB/s per GPU, write %.1f", a.Pattern, a.ReadGBps, a.WriteGBps)
	switch ratio := a.WriteGBps / a.ReadGBps; {
	case ratio > 1.25:
		return s + fmt.Sprintf(" (writes %.1fx reads: pushes suit this host better than pulls)", ratio)
	case ratio < 0.8:
		return s + fmt.Sprintf(" (reads %.1fx writes: pulls suit this host)", 1/ratio)
	}
	return s + " (within 25%: pull and push move bytes alike here)"
}
