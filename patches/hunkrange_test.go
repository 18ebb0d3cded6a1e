package patches

import "testing"

// HunkRange writes ranges as git does in an @@ line: one line is "N",
// otherwise "N,M", an empty side "N,0" (git diff's "@@ -0,0 +1,3 @@").
func TestHunkRange(t *testing.T) {
	for _, c := range []struct {
		start, n int
		want     string
	}{{7, 1, "7"}, {466, 14, "466,14"}, {0, 0, "0,0"}, {3, 0, "3,0"}} {
		if got := HunkRange(c.start, c.n); got != c.want {
			t.Errorf("HunkRange(%d, %d) = %q, want %q", c.start, c.n, got, c.want)
		}
	}
}
