package textfmt

import (
	"strings"
	"testing"
)

func TestInts(t *testing.T) {
	for _, c := range []struct {
		xs        []int
		sep, want string
	}{{[]int{1, 4, 16}, ",", "1,4,16"}, {[]int{-3, 12}, ", ", "-3, 12"}, {nil, ",", ""}, {[]int{7}, ",", "7"}} {
		if got := Ints(c.xs, c.sep); got != c.want {
			t.Errorf("Ints(%v, %q) = %q, want %q", c.xs, c.sep, got, c.want)
		}
	}
}

func TestPlural(t *testing.T) {
	for n, want := range map[int]string{0: "0 files differ", 1: "1 file differs", 2: "2 files differ"} {
		if got := Plural(n, "file differs", "files differ"); got != want {
			t.Errorf("Plural(%d) = %q, want %q", n, got, want)
		}
	}
	if Word(1, "differs", "differ") != "differs" || Word(3, "differs", "differ") != "differ" {
		t.Error("Word")
	}
}

func TestLines(t *testing.T) {
	out := "\n  nvcc: NVIDIA (R) Cuda compiler driver \r\nCuda compilation tools, release 13.0, V13.0.88\n Build cuda_13.0  \n\n"
	if got := FirstLine(out); got != "nvcc: NVIDIA (R) Cuda compiler driver" {
		t.Errorf("FirstLine = %q", got)
	}
	if got := LastLine(out); got != "Build cuda_13.0" {
		t.Errorf("LastLine = %q", got)
	}
	for _, s := range []string{"", " one line "} {
		if FirstLine(s) != strings.TrimSpace(s) || LastLine(s) != strings.TrimSpace(s) {
			t.Errorf("one line %q: %q %q", s, FirstLine(s), LastLine(s))
		}
	}
}

func TestList(t *testing.T) {
	for _, c := range []struct {
		xs   []string
		n    int
		want string
	}{
		{nil, 3, ""}, {[]string{"a"}, 3, "a"}, {[]string{"a", "b", "c"}, 3, "a, b, c"}, {[]string{"a", "b", "c"}, 2, "a, b and 1 more"},
	} {
		if got := List(c.xs, c.n); got != c.want {
			t.Errorf("List(%q, %d) = %q, want %q", c.xs, c.n, got, c.want)
		}
	}
}
