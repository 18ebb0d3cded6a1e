package checkout

import (
	"errors"
	"reflect"
	"testing"

	"github.com/arpatch/arpatch/patches"
)

// TestUnfit: the README's own check (era A and era B series of one family,
// at both pinned commits) passes, since each commit has a series that
// fits; --strict fails on the other era's conflicts; a revision where no
// member fits fails either way.
func TestUnfit(t *testing.T) {
	cat := &patches.Catalog{Series: []*patches.Series{
		{Name: "pcie-2026-04", Family: "pcie"}, {Name: "pcie-2026-07", Family: "pcie"}, {Name: "other-1", Family: "other"},
	}}
	a, b := "84118acf50b3a4c74e85e9ff9033792552de1a76", "8905cbd42f4a27dbecad6487cd3904278756fef8"
	rows := []DriftRow{
		{Series: "pcie-2026-04", Commit: a, Rev: a, Verdict: "exact"},
		{Series: "pcie-2026-07", Commit: a, Rev: a, Verdict: "conflict"},
		{Series: "pcie-2026-04", Commit: b, Rev: "main", Verdict: "conflict"},
		{Series: "pcie-2026-07", Commit: b, Rev: "main", Verdict: "offset"},
	}
	if got := Unfit(rows, cat, false); len(got) != 0 {
		t.Errorf("default: %q, want none", got)
	}
	want := []string{"series pcie-2026-07 at " + a + " (84118acf50b3): conflict", "series pcie-2026-04 at main (8905cbd42f4a): conflict"}
	if got := Unfit(rows, cat, true); !reflect.DeepEqual(got, want) {
		t.Errorf("strict: %q, want %q", got, want)
	}
	rows[3].Verdict = "moved"
	rows = append(rows, DriftRow{Series: "other-1", Commit: b, Rev: "main", Verdict: "applied"},
		DriftRow{Series: "other-1", Commit: a, Rev: a, Verdict: "error", Err: errors.New("sha256 mismatch")})
	want = []string{"series other-1 does not load: sha256 mismatch", `no "pcie" series fits main`, `no "other" series fits ` + a}
	if got := Unfit(rows, cat, false); !reflect.DeepEqual(got, want) {
		t.Errorf("default: %q, want %q", got, want)
	}
}
