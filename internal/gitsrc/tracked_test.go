package gitsrc

import (
	"slices"
	"sort"
	"testing"
)

// TrackedPaths lists Tracked's paths, sorted, once each.
func TestTrackedPathsAreTrackedSorted(t *testing.T) {
	r := sharedCheckout(t)
	set, err := r.Tracked()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for p := range set {
		want = append(want, p)
	}
	sort.Strings(want)
	got, err := r.TrackedPaths()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("TrackedPaths:\n%q\nTracked, sorted:\n%q", got, want)
	}
	if len(got) < len(richFiles) {
		t.Errorf("%d paths; the fixture commits %d files and 3 symlinks", len(got), len(richFiles))
	}
}
