package patches

import (
	"strings"
	"testing"
)

// BenchmarkApplyShippedSeries applies the embedded era A series in memory
// to files of the sizes it patches upstream (custom_all_reduce.cuh is
// about 500 lines, the two Python files about 300 and 480), shaped so the
// hunks fit. It measures parse-free apply: hunk search and splicing.
func BenchmarkApplyShippedSeries(b *testing.B) {
	cat, err := Embedded()
	if err != nil {
		b.Fatal(err)
	}
	s, err := cat.Get("pcie-2026-04")
	if err != nil {
		b.Fatal(err)
	}
	ps, err := s.Load(nil)
	if err != nil {
		b.Fatal(err)
	}
	// Rebuild each file from the hunks' old lines, padded with filler
	// lines up to where each hunk starts.
	tree := memTree{}
	for _, p := range ps {
		for _, fc := range p.Diff.Changes {
			var lines []string
			for _, h := range fc.Hunks {
				for len(lines) < h.OrigStart-1 {
					lines = append(lines, "// filler line of about the width of real code ............\n")
				}
				lines = append(lines, h.Old...)
			}
			for i := 0; i < 40; i++ {
				lines = append(lines, "// trailing filler\n")
			}
			tree[fc.Path] = strings.Join(lines, "")
		}
	}
	if _, err := Apply(tree, ps); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Apply(tree, ps); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOffsetSearch measures a hunk found 2,000 lines from where its
// header says, in a 12,000-line file: the worst case of exact search (the
// header's line fails, so every position is tried, to know the fit is
// the only one).
func BenchmarkOffsetSearch(b *testing.B) {
	var sb strings.Builder
	for i := 0; i < 10000; i++ {
		sb.WriteString("line of filler text\n")
	}
	content := "head\n" + strings.Repeat("pad\n", 2000) + "ctx\ntarget\n" + sb.String()
	d, err := ParseDiff("p", []byte("--- a/f\n+++ b/f\n@@ -2,3 +2,3 @@\n ctx\n-target\n+TARGET\n line of filler text\n"))
	if err != nil {
		b.Fatal(err)
	}
	ps := []*Patch{{Name: "p", Diff: d}}
	tree := memTree{"f": content}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r, err := Apply(tree, ps)
		if err != nil || r.Hunks[0].Offset != 2000 {
			b.Fatal(err)
		}
	}
}
