package githash

import (
	"strings"
	"testing"
)

const full = "84118acf50b3a4c74e85e9ff9033792552de1a76"

func TestParse(t *testing.T) {
	h, err := Parse(full)
	if err != nil || h != Hash(full) || !h.IsFull() {
		t.Fatalf("Parse(full) = %q, %v", h, err)
	}
	for _, c := range []struct{ in, want string }{
		{"", "the commit is empty; pin a full 40-hex commit hash"},
		{"84118acf", "it has 8 hex digits, not 40: an abbreviated hash"},
		{full + "0", "it has 41 hex digits, not 40"},
		{strings.ToUpper(full), `upper case ('A' at position 6)`},
		{"main", `'m' at position 1 is not a hex digit`},
		{full[:20] + "g" + full[21:], `'g' at position 21 is not a hex digit`},
	} {
		h, err := Parse(c.in)
		if err == nil || h != "" {
			t.Errorf("Parse(%q) = %q, nil; want an error", c.in, h)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || c.in != "" && !strings.Contains(err.Error(), "in a clone of the repository, `git rev-parse '"+c.in+"^{commit}'` prints the full one") {
			t.Errorf("Parse(%q): %v; want it to say %q and the remedy", c.in, err, c.want)
		}
		if Hash(c.in).IsFull() {
			t.Errorf("IsFull(%q) = true", c.in)
		}
	}
}

func TestIsAbbreviated(t *testing.T) {
	for in, want := range map[string]bool{"84118": true, "CAFE": true, "abc": false, full: false, full[:39]: true, "cafex": false, "": false} {
		if got := Hash(in).IsAbbreviated(); got != want {
			t.Errorf("IsAbbreviated(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestShort(t *testing.T) {
	if got := Hash(full).Short(); got != "84118acf50b3" {
		t.Errorf("Short = %q", got)
	}
	if got := Hash("abc").Short(); got != "abc" {
		t.Errorf("Short of a short string = %q", got)
	}
	if got := Shorts([]string{full, "8905cbd42f4a27dbecad6487cd3904278756fef8", "x"}); got != "84118acf50b3, 8905cbd42f4a, x" {
		t.Errorf("Shorts = %q", got)
	}
}
