package textfmt

import "testing"

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
