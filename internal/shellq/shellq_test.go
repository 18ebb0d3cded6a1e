package shellq

import (
	"os/exec"
	"strings"
	"testing"
)

// TestQuoteRoundTrip: sh reads every quoted word back as the word itself.
func TestQuoteRoundTrip(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH: the round trip needs a shell")
	}
	words := []string{"plain", "a b", "it's", `"dq"`, "$HOME", "`x`", "a\\b", "semi;colon", "tab\there", "new\nline", "*glob?", "~user", "", "-dash", "ünï"}
	for _, w := range words {
		out, err := exec.Command(sh, "-c", `printf %s `+Quote(w)).Output()
		if err != nil {
			t.Fatalf("%q quoted as %s: %v", w, Quote(w), err)
		}
		if string(out) != w {
			t.Errorf("%q quoted as %s reads back as %q", w, Quote(w), out)
		}
	}
	if got := Quote("plain/path-1.2_x"); got != "plain/path-1.2_x" {
		t.Errorf("a plain word got quoted: %s", got)
	}
	if got := Join([]string{"arpatch", "revert", "--src", "my tree"}); !strings.HasPrefix(got, "arpatch revert --src ") || got == "arpatch revert --src my tree" {
		t.Errorf("Join: %s", got)
	}
	if got := Path("~/my tree"); !strings.HasPrefix(got, "~/") || got == "~/my tree" {
		t.Errorf("Path keeps ~/ outside the quotes and quotes the rest: %s", got)
	}
}
