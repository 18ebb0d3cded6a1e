package envfile

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// shells are the real POSIX shells the differential tests load files with:
// dash (Debian's sh), bash, and bash in POSIX mode.
func shells(t testing.TB) [][]string {
	var out [][]string
	for _, s := range [][]string{{"dash"}, {"bash"}, {"bash", "--posix"}} {
		if p, err := exec.LookPath(s[0]); err == nil {
			out = append(out, append([]string{p}, s[1:]...))
		}
	}
	if len(out) == 0 {
		t.Skip("neither dash nor bash on PATH: the differential test needs a real shell")
	}
	return out
}

// loaded is what a shell did with one file: the variables it exported
// that an empty file does not, what it printed, and the files it left
// beside the env file.
type loaded struct {
	env    map[string]string
	output string
	files  []string
}

// loadAll loads each file with `set -a; . ./f.env; set +a` in a subshell
// of one shell process, each in its own directory, and reports what
// each did.
func loadAll(t testing.TB, shell []string, files []string) []loaded {
	t.Helper()
	root := t.TempDir()
	dirs := make([]string, len(files)+1)
	for i, f := range append([]string{""}, files...) { // dirs[0]: the empty file, the baseline
		dirs[i] = filepath.Join(root, strconv.Itoa(i))
		if err := os.Mkdir(dirs[i], 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dirs[i], "f.env"), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := `for d in "$@"; do
  ( cd "$d" && set -a && . ./f.env && set +a && env > ../"${d##*/}.env" ) > "$d.out" 2>&1
  echo "exit $?" >> "$d.out"
done`
	cmd := exec.Command(shell[0], append(append(append([]string(nil), shell[1:]...), "-c", script, "sh"), dirs...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LC_ALL=C.UTF-8"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", shell, err, out)
	}
	read := func(d string) map[string]string {
		b, _ := os.ReadFile(d + ".env")
		m := map[string]string{}
		for _, kv := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				m[k] = v
			}
		}
		for _, k := range []string{"PWD", "OLDPWD", "_", "SHLVL"} {
			delete(m, k)
		}
		return m
	}
	base := read(dirs[0])
	res := make([]loaded, len(files))
	for i, d := range dirs[1:] {
		env := read(d)
		for k, v := range base {
			if env[k] == v {
				delete(env, k)
			}
		}
		out, _ := os.ReadFile(d + ".out")
		ents, _ := os.ReadDir(d)
		var names []string
		for _, e := range ents {
			if e.Name() != "f.env" {
				names = append(names, e.Name())
			}
		}
		res[i] = loaded{env: env, output: string(out), files: names}
	}
	return res
}

// agree checks that every shell loads each file Parse accepts as exactly
// its assignments: exit 0, no output, no file written, and the exported
// variables (last one wins) those of Parse's lines. It returns how many
// files Parse accepted.
func agree(t *testing.T, files []string) int {
	t.Helper()
	var accepted []string
	var want []map[string]string
	for _, f := range files {
		lines, err := Parse([]byte(f))
		if err != nil {
			continue
		}
		m := map[string]string{}
		for _, l := range lines {
			if l.Key != "" {
				m[l.Key] = l.Value
			}
		}
		accepted = append(accepted, f)
		want = append(want, m)
	}
	for _, sh := range shells(t) {
		for i, got := range loadAll(t, sh, accepted) {
			if got.output != "exit 0\n" || len(got.files) > 0 || fmt.Sprint(got.env) != fmt.Sprint(want[i]) {
				t.Errorf("%v loads %q, which Parse accepts as %v, as %v (output %q, files written %v)", sh, accepted[i], want[i], got.env, got.output, got.files)
			}
		}
	}
	return len(accepted)
}

// The inputs of each kind: what comes before a line's first word, what a
// comment or an assignment holds, and what lines do to the next.
var (
	prefixes = []string{"", " ", "\t", " \t ", "\v", "\f", "\r", "\x00", "\x1c", "\x85", "\u0085", "\u00a0", "\u2003", "\u3000", "\ufeff", "\u200b", "\u202e", "\u2028"}
	bodies   = []string{
		"#; touch X", "# comment", "#", "# $(touch X) `touch X` ; touch X && touch X",
		"FOO=1", "FOO=", "FOO=push1:32768,island", "FOO=0,1,2,3/4,5,6,7", "_F00=a.b-c+d@e%f=g",
		"FOO=1$(touch X)", "FOO=`touch X`", "FOO=1;touch X", "FOO=1&&touch X", "FOO=1 touch X", "FOO=1|touch X",
		"FOO=1>X", "FOO=1<<EOF", "FOO=$HOME", "FOO=${X:-$(touch X)}", "FOO='1'", `FOO="1"`, `FOO=a\ b`, `FOO=1\`,
		"FOO=~", "FOO=a:~", "FOO=*", "FOO=1 #c", "FOO=1 ", "FOO=1\t", "FOO =1", "export FOO=1", "FOO=1\r", "FOO=\u00e9",
		"FOO=1\u00a0", "FOO=1\x00;touch X", "FOO=1\v;touch X", "1FOO=1", "FOO-BAR=1", "FOO=(1)", "FOO={a,b}", "FOO=a!b", "FOO=a^b",
	}
	multiline = []string{
		"# comment \\\ntouch X\n",       // sh: the touch runs; systemd: all one comment
		"FOO=1\\\n;touch X\n",           // a continuation
		"FOO=1\n\\\ntouch X\n",          // a continuation of nothing
		"cat <<EOF\nFOO=1\nEOF\n",       // a here-doc
		"FOO=1 <<EOF\ntouch X\nEOF\n",   // a here-doc on an assignment
		"FOO='1\ntouch X'\n",            // a quote across lines
		"# a\n\nFOO=1\n  BAR=2\n#\n",    // well-formed
		"FOO=1\nFOO=2\n",                // the last wins, as in sh
		"FOO=1\r\nBAR=2\r\n",            // CRLF
		"\ufeffFOO=1\n",                 // a byte-order mark
		"FOO=1",                         // no final newline
		"\n\n",                          // blank
		"FOO=1\n\x00touch X\n",          // NUL
		"# \u202eX=1 ,evil\nFOO=1\n",    // a bidi override in a comment
		"FOO=1\n#\ttab\t comment\t\n",   // tabs in a comment
		"#!/bin/sh\nFOO=1\n",            // a shebang is a comment
		"FOO=1\n# trailing backslash\\", // a comment's final '\' at the end of the file
	}
)

// TestAgreesWithShell: every file Parse accepts loads in dash, bash and
// bash --posix as exactly the assignments Parse reads, and nothing else
// happens; the known hazards are refused, naming the line and cause.
func TestAgreesWithShell(t *testing.T) {
	var files []string
	for _, p := range prefixes {
		for _, b := range bodies {
			files = append(files, p+b+"\n")
		}
	}
	files = append(files, multiline...)
	if n := agree(t, files); n < 30 {
		t.Errorf("only %d of %d inputs accepted: the test compares too little", n, len(files))
	}

	for _, c := range []struct{ in, want string }{
		{"\v#; touch X\n", `line 1: byte 1 is the control character '\v', which a shell reads as part of a word`},
		{"\f# x\n", `byte 1 is the control character '\f'`},
		{"\u00a0#; touch X\n", "line 1: the line starts with U+00A0, which is no blank to a shell"},
		{"\u3000FOO=1\n", "the line starts with U+3000"},
		{"\ufeff# arpatch\n", "the file starts with a byte-order mark"},
		{"FOO=1\n\u200b#x\n", "line 2: byte 1 is the invisible character U+200B"},
		{"FOO=1\x00;touch X\n", "byte 6 is a NUL byte"},
		{"FOO=1\r\n", "line 1: the line ends in CRLF"},
		{"# a \\\ntouch X\n", "line 1: the comment ends in '\\'"},
		{"FOO=1$(touch X)\n", `FOO: the value "1$(touch X)" holds '$' at byte 2`},
		{"FOO=`touch X`\n", "holds '`' at byte 1"},
		{"FOO=1;touch X\n", "holds ';' at byte 2"},
		{"FOO=1 touch X\n", "holds ' ' at byte 2"},
		{"FOO='1'\n", `holds '\'' at byte 1`},
		{"FOO=~\n", "holds '~' at byte 1"},
		{"FOO=1\\\n;touch X\n", `holds '\\' at byte 2`},
		{"FOO=\u00e9\n", "holds 'é' at byte 1"},
		{"export FOO=1\n", `"export FOO=1" is neither a comment nor KEY=VALUE`},
		{"FOO =1\n", `"FOO =1" is neither a comment nor KEY=VALUE`},
		{"cat <<EOF\n", `"cat <<EOF" is neither`},
		{"A=1\n\xff\n", "line 2: byte 1 is not UTF-8 (0xff)"},
	} {
		_, err := Parse([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want %q", c.in, err, c.want)
		}
	}

	// The hazards are real: the shells run what Parse refuses.
	for _, sh := range shells(t) {
		for i, got := range loadAll(t, sh, []string{"\v#; touch X\n", "\u00a0#; touch X\n", "FOO=1\x00;touch X\n", "# a \\\ntouch X\n", "FOO=1$(touch X)\n"}) {
			if len(got.files) != 1 || got.files[0] != "X" {
				t.Errorf("%v, hazard %d: the touch did not run (%v, %q): the refusal's reason no longer holds", sh, i, got.files, got.output)
			}
		}
	}
}

// TestRandomAgreesWithShell: random lines made of the bytes shells treat
// specially; each file Parse accepts loads as its assignments.
func TestRandomAgreesWithShell(t *testing.T) {
	frags := []string{"FOO", "B_1", "=", "=", "1", "a", "#", "# ", " ", "\t", "\v", "\f", "\r", "\\", "'", `"`, "$", "(", ")", "`",
		";", "&", "|", "<", ">", "~", "*", "?", "[", "{", "}", "!", "\u00a0", "\ufeff", "\u200b", "é", ",", ":", "/", "%", "@", "+", "-",
		".", "_", "$(touch X)", "`touch X`", ";touch X", "\n", "\ntouch X\n", "<<E\n", "\nE\n"}
	r := rand.New(rand.NewPCG(26, 2))
	var files []string
	for range 600 {
		var b strings.Builder
		switch r.IntN(3) {
		case 0:
			b.WriteString("FOO=")
		case 1:
			b.WriteString("#")
		}
		for range 1 + r.IntN(6) {
			b.WriteString(frags[r.IntN(len(frags))])
		}
		b.WriteString("\n")
		files = append(files, b.String())
	}
	if n := agree(t, files); n < 20 {
		t.Errorf("only %d of %d random inputs accepted: the test compares too little", n, len(files))
	}
}

// TestWriters: Assign writes only what Parse reads back as itself, and
// Comment keeps any text on its one comment line.
func TestWriters(t *testing.T) {
	for _, v := range []string{"1", "push1:32768,island", "0,1,2,3/4,5,6,7", ""} {
		l, err := Assign("FOO", v)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := Parse([]byte(l + "\n"))
		if err != nil || len(lines) != 1 || lines[0].Key != "FOO" || lines[0].Value != v {
			t.Errorf("Assign(FOO, %q) = %q, read back as %+v, %v", v, l, lines, err)
		}
	}
	for _, kv := range [][2]string{{"FOO", "1$(touch X)"}, {"FOO", "a\nb"}, {"F OO", "1"}, {"1F", "1"}, {"", "1"}} {
		if l, err := Assign(kv[0], kv[1]); err == nil {
			t.Errorf("Assign(%q, %q) = %q, want a refusal", kv[0], kv[1], l)
		}
	}
	var file bytes.Buffer
	texts := []string{"plain", "a\nFOO=1$(touch X)", "ends in \\", "\v#", "\u202e", "\x00", "\xff", "tab\there", "µs"}
	for _, text := range texts {
		file.WriteString(Comment(text) + "\n")
	}
	lines, err := Parse(file.Bytes())
	if err != nil || len(lines) != len(texts) {
		t.Fatalf("Comment lines %q: %v (%d lines)", file.String(), err, len(lines))
	}
	for i, l := range lines {
		if !l.IsComment {
			t.Errorf("Comment(%q) = %+v is no comment", texts[i], l)
		}
	}
	if Comment("plain") != "# plain" || Comment("a\nb") != `# "a\nb"` || Comment("µs") != "# µs" {
		t.Errorf("Comment: %q %q %q", Comment("plain"), Comment("a\nb"), Comment("µs"))
	}
	agree(t, []string{file.String()})
	for _, text := range append(texts, `"quoted"`, `"a\n"`, "") {
		if got := UnquoteText(CommentText(text)); got != text {
			t.Errorf("UnquoteText(CommentText(%q)) = %q", text, got)
		}
	}
}

// TestSource: the printed command loads the file in dash and bash, a
// bare name included (`.` looks a bare name up in PATH, not here).
func TestSource(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"tune.env", "my tune's $(x).env", "-x.env"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("FOO=ok\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, sh := range shells(t) {
			cmd := exec.Command(sh[0], append(sh[1:], "-c", Source(name)+`; printf %s "$FOO"`)...)
			cmd.Dir = dir
			cmd.Env = []string{"PATH=/nonexistent"}
			if out, err := cmd.CombinedOutput(); err != nil || string(out) != "ok" {
				t.Errorf("%v: %s: %q, %v", sh, Source(name), out, err)
			}
		}
	}
	if got := Source("/etc/arpatch/tune.env"); got != "set -a; . /etc/arpatch/tune.env; set +a" {
		t.Errorf("Source(abs) = %s", got)
	}
}

// FuzzParse: Parse never panics, and a file it accepts loads in the real
// shells as exactly its assignments (the seeds under testdata/fuzz run in
// every `go test`; `go test -fuzz FuzzParse` searches further, a shell
// run per accepted input).
func FuzzParse(f *testing.F) {
	for _, s := range append(multiline, "FOO=1\n", "\v#; touch X\n", "# a\n") {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lines, err := Parse(data)
		if err != nil {
			return
		}
		for _, l := range lines {
			if l.Key != "" {
				if a, err := Assign(l.Key, l.Value); err != nil || !strings.Contains(string(data), a) {
					t.Fatalf("line %d: %+v does not write back (%q, %v)", l.N, l, a, err)
				}
			}
		}
		agree(t, []string{string(data)})
	})
}
