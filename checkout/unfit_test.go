package checkout

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/arpatch/arpatch/internal/testrepo"
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
	// Under strict, a fit the gate rule could not judge whole fails too
	// (no clang here: a CI machine without it must not pass --strict).
	noted := append([]DriftRow(nil), rows...)
	noted[0].Notes = []string{"no clang++ found: the C++ dispatch was not compiled", "second"}
	want = append([]string{"series pcie-2026-04 at " + a + " (84118acf50b3): exact, but the gate rule did not check all of it here (2 notes; the first: no clang++ found: the C++ dispatch was not compiled)"}, want...)
	if got := Unfit(noted, cat, true); !reflect.DeepEqual(got, want) {
		t.Errorf("strict with notes: %q, want %q", got, want)
	}
	if got := Unfit(noted, cat, false); len(got) != 0 {
		t.Errorf("default with notes: %q, want none (the notes are printed, the fit stands)", got)
	}
	rows[3].Verdict = "moved"
	rows = append(rows, DriftRow{Series: "other-1", Commit: b, Rev: "main", Verdict: "applied"},
		DriftRow{Series: "other-1", Commit: a, Rev: a, Verdict: "error", Err: errors.New("sha256 mismatch")})
	want = []string{"series other-1 does not load: sha256 mismatch", `no "pcie" series fits main`, `no "other" series fits ` + a}
	if got := Unfit(rows, cat, false); !reflect.DeepEqual(got, want) {
		t.Errorf("default: %q, want %q", got, want)
	}
}

// CheckCommitsContext tells its progress after each commit, expands a
// range FROM..TO to TO's first-parent commits after FROM, and stops on a
// cancelled context.
func TestCheckCommitsProgressRangeCancel(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c1, err := testrepo.Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	var cs []string
	for i := 2; i <= 4; i++ {
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte(strconv.Itoa(i)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := testrepo.Commit(dir, "change")
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	cat := &patches.Catalog{}
	var seen [][2]int
	rows, err := CheckCommitsContext(context.Background(), dir, []string{c1, c1[:12] + ".." + cs[2]}, cat, nil, func(n, total int) { seen = append(seen, [2]int{n, total}) })
	if err != nil || len(rows) != 0 {
		t.Fatalf("rows %v, %v", rows, err)
	}
	if want := [][2]int{{1, 4}, {2, 4}, {3, 4}, {4, 4}}; !reflect.DeepEqual(seen, want) {
		t.Errorf("progress %v, want %v (c1, then the range's three commits)", seen, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := CheckCommitsContext(ctx, dir, []string{c1}, cat, nil, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}
