package shellq

import (
	"os"
	"os/exec"
	"slices"
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

// TestAssignRoundTrip: dash and bash set each variable to exactly its
// value from `export ` + Assign, and run nothing else.
func TestAssignRoundTrip(t *testing.T) {
	values := []string{"1", "1$(touch X)", "a\nexport Y=2", "`touch X`", "it's", "a;touch X", "", "~", "ünï"}
	for _, name := range []string{"sh", "bash"} {
		sh, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		for _, v := range values {
			dir := t.TempDir()
			cmd := exec.Command(sh, "-c", "export "+Assign("V", v)+"\n"+`printf %s "$V"; [ -z "${Y+set}" ]`)
			cmd.Dir = dir
			out, err := cmd.Output()
			ents, _ := os.ReadDir(dir)
			if err != nil || string(out) != v || len(ents) != 0 {
				t.Errorf("%s: export %s reads back as %q (%v, %d files made)", name, Assign("V", v), out, err, len(ents))
			}
		}
	}
	if got := AssignKV("CMAKE_ARGS=-Da -Db;x"); got != "CMAKE_ARGS='-Da -Db;x'" {
		t.Errorf("AssignKV = %s", got)
	}
}

// TestSplit: Split reads sh's quoting as sh does, reads every quoted word
// back as itself, and refuses an expansion, naming it.
func TestSplit(t *testing.T) {
	got, err := Split(`--json '{"a": 1}' --name "two words" a\ b {x,y} ~/m '$X' "say \"hi\" \n" c\$d`)
	want := []string{"--json", `{"a": 1}`, "--name", "two words", "a b", "{x,y}", "~/m", "$X", `say "hi" \n`, "c$d"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("Split = %q, %v\nwant %q", got, err, want)
	}
	words := []string{"plain", "a b", "it's", `"dq"`, "$HOME", "`x`", "a\\b", "semi;colon", "*glob?", "~user", "-dash", "ünï"}
	if got, err := Split(Join(words)); err != nil || !slices.Equal(got, words) {
		t.Errorf("Split(Join(%q)) = %q, %v", words, got, err)
	}
	for in, want := range map[string]string{
		"--x $HOME":    "$HOME: arpatch does not expand it",
		"--x $(id)":    "$(id): arpatch does not expand it",
		"--x $((1+1))": "$((1+1)): arpatch does not expand it",
		"--x 'open":    "1:5: reached EOF without closing quote",
	} {
		if _, err := Split(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Split(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}
