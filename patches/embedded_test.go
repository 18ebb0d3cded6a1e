package patches

import (
	"strings"
	"testing"
)

// TestShippedSeries checks the series in patches/sglang: they load, their
// hashes match, their requires hold, their headers are complete, each is
// tested on one of the pinned commits, and every patch carries no more
// upstream context than a diff needs and no upstream license header.
func TestShippedSeries(t *testing.T) {
	cat, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"pcie-2026-04": "84118acf50b3a4c74e85e9ff9033792552de1a76",
		"pcie-2026-07": "8905cbd42f4a27dbecad6487cd3904278756fef8",
		"pcie-2026-08": "0bda0b168ad5bf7311ae639904489a4698a05546",
	}
	// The aot layout keeps the kernel header under python/sglang/kernels/aot/.
	// Upstream: python/sglang/kernels/aot/csrc/allreduce/custom_all_reduce.cuh@c32c4ef79cf5218c24f467aad7f3ff392a62bed7
	// (CustomAllreduce::allreduce), also at 0bda0b168ad5.
	kernel := map[string]string{
		"pcie-2026-04": "sgl-kernel/csrc/allreduce/custom_all_reduce.cuh",
		"pcie-2026-07": "sgl-kernel/csrc/allreduce/custom_all_reduce.cuh",
		"pcie-2026-08": "python/sglang/kernels/aot/csrc/allreduce/custom_all_reduce.cuh",
	}
	if len(cat.Series) != len(want) {
		t.Errorf("shipped %d series, want %d", len(cat.Series), len(want))
	}
	for _, s := range cat.Series {
		t.Run(s.Name, func(t *testing.T) {
			if s.Family != "pcie" || len(s.TestedOn) != 1 || s.TestedOn[0] != want[s.Name] {
				t.Errorf("family %q tested_on %v, want pcie at %s", s.Family, s.TestedOn, want[s.Name])
			}
			ps, err := s.Load(nil)
			if err != nil {
				t.Fatal(err)
			}
			touched := map[string]bool{}
			for _, p := range ps {
				for _, fc := range p.Diff.Changes {
					touched[fc.Path] = true
					for _, h := range fc.Hunks {
						if lead := leadingContext(h); lead > 3 {
							t.Errorf("%s %s %s: %d leading context lines, want at most 3", p.Name, fc.Path, h.Header, lead)
						}
						for _, l := range h.New {
							if strings.Contains(l, "SPDX-License-Identifier") || strings.Contains(l, "Adapted from") {
								t.Errorf("%s adds an upstream header line: %q", p.Name, l)
							}
						}
					}
				}
			}
			for _, f := range []string{
				kernel[s.Name],
				"python/sglang/srt/distributed/device_communicators/custom_all_reduce.py",
				"python/sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py",
			} {
				if !touched[f] {
					t.Errorf("series does not change %s", f)
				}
			}
			if len(touched) != 3 {
				t.Errorf("series changes %d files, want exactly 3", len(touched))
			}
		})
	}
}

func leadingContext(h *Hunk) int {
	n := 0
	for i := range h.Old {
		if i < len(h.New) && h.Old[i] == h.New[i] {
			n++
			continue
		}
		break
	}
	return n
}

// TestCatalogWith: a catalog's series stay beside another's, which
// replace those of the same name.
func TestCatalogWith(t *testing.T) {
	base := &Catalog{Series: []*Series{{Name: "a-1", Family: "a"}, {Name: "a-2", Family: "a"}}}
	extra := &Catalog{Dir: "mine", Series: []*Series{{Name: "a-2", Family: "a", Description: "fixed"}, {Name: "a-3", Family: "a"}}}
	got := base.With(extra)
	var names []string
	for _, s := range got.Series {
		names = append(names, s.Name+":"+s.Description)
	}
	if strings.Join(names, " ") != "a-1: a-2:fixed a-3:" || got.Dir != "mine" || len(base.Series) != 2 {
		t.Errorf("With = %v (dir %q); base now %d series", names, got.Dir, len(base.Series))
	}
}
