package gitsrc

import (
	"strings"
	"testing"
)

func TestCommitTime(t *testing.T) {
	up, c1, _ := fixture(t)
	repo, err := OpenAny(up)
	if err != nil {
		t.Fatal(err)
	}
	// testrepo commits at 2026-04-03 12:00:00 UTC.
	ct, err := repo.CommitTime(c1)
	if err != nil || ct.Unix() != 1775217600 {
		t.Errorf("CommitTime = %v (%d), %v; want 1775217600", ct, ct.Unix(), err)
	}
	if _, err := repo.CommitTime(strings.Repeat("0", 40)); err == nil || !strings.Contains(err.Error(), "is not in "+up) {
		t.Errorf("missing commit: %v", err)
	}
}
