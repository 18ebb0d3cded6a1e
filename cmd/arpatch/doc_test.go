package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/txtar"
	"github.com/urfave/cli/v2"
	"mvdan.cc/sh/v3/shell"
	"mvdan.cc/sh/v3/syntax"

	"github.com/arpatch/arpatch/recipes"
)

// The documentation's examples run, as cmd/benchstat/doc_test.go checks
// benchstat's: every `arpatch` command line in the shell blocks of the
// README and docs/ and in each command's --help "Examples:" is executed, word for word, by
// a CLI script in testdata/script/, which gives it a world to run in
// (a fixture mirror at ~/mirrors/sglang.git, the fake CUDA toolchain, a
// fake nvidia-smi, ...), and the README's recipe example loads.

// docExample is one command line the documentation shows.
type docExample struct {
	Where string   // "README.md:36", "arpatch apply --help"
	Line  string   // as printed
	Env   []string // VAR=value words before the program
	Args  []string // the words, "arpatch" first, unexpanded
}

// keepVars leaves $NAME as it is when a line is split (IFS stays the
// default, so words split at blanks only).
func keepVars(name string) string {
	if name == "IFS" {
		return ""
	}
	return "$" + name
}

// docWords splits a documented command line as a shell reads it, without
// expanding variables ($X stays $X), and drops redirections and comments.
// It returns nil for a line that does not run arpatch (go build, git).
func docWords(line string) (env, args []string, err error) {
	f, err := syntax.NewParser().Parse(strings.NewReader(line), "")
	if err != nil {
		return nil, nil, err
	}
	if len(f.Stmts) == 0 {
		return nil, nil, nil
	}
	st := f.Stmts[0]
	if b, ok := st.Cmd.(*syntax.BinaryCmd); ok { // go build ... && bin/arpatch ...
		st = b.Y
	}
	call, ok := st.Cmd.(*syntax.CallExpr)
	if !ok {
		return nil, nil, nil
	}
	for _, r := range st.Redirs {
		if r.Op != syntax.RdrOut && r.Op != syntax.AppOut {
			return nil, nil, fmt.Errorf("%q reads input or holds a <placeholder>: not a command that runs as printed", line)
		}
	}
	var p bytes.Buffer
	for _, w := range call.Args {
		p.Reset()
		if err := syntax.NewPrinter().Print(&p, w); err != nil {
			return nil, nil, err
		}
		v, err := shell.Fields(p.String(), keepVars)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, v...)
	}
	// The README builds the binary once and runs it; go run is kept only
	// where the exit code does not matter.
	switch {
	case len(args) > 0 && (args[0] == "arpatch" || args[0] == "bin/arpatch" || args[0] == "./bin/arpatch"):
		args[0] = "arpatch"
	case len(args) > 2 && args[0] == "go" && args[1] == "run" && args[2] == "./cmd/arpatch":
		args = append([]string{"arpatch"}, args[3:]...)
	default:
		return nil, nil, nil
	}
	// VAR=value words, read only on a line that runs arpatch (a line that
	// only sets a variable, SLIM=$(git ...), is not an example).
	for _, a := range call.Assigns {
		p.Reset()
		if err := syntax.NewPrinter().Print(&p, a.Value); err != nil {
			return nil, nil, err
		}
		v, err := shell.Fields(p.String(), keepVars)
		if err != nil {
			return nil, nil, err
		}
		env = append(env, a.Name.Value+"="+strings.Join(v, " "))
	}
	return env, args, nil
}

// helpExamples returns the lines under "Examples:" in every command's
// --help, subcommands included.
func helpExamples(t *testing.T) []docExample {
	var out []docExample
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			name := path + " " + c.Name
			if _, ex, ok := strings.Cut(c.Description, "Examples:\n"); ok {
				for _, l := range strings.Split(ex, "\n") {
					l = strings.TrimSpace(l)
					if l == "" {
						continue
					}
					env, args, err := docWords(l)
					if err != nil || args == nil {
						t.Errorf("%s --help: example %q is not an arpatch command line (%v)", name, l, err)
						continue
					}
					out = append(out, docExample{Where: name + " --help", Line: l, Env: env, Args: args})
				}
			}
			walk(name, c.Subcommands)
		}
	}
	app := newApp(io.Discard, io.Discard)
	walk("arpatch", app.Commands)
	return out
}

// readmeExamples returns the arpatch command lines of the README and of
// every docs/*.md: every line of a ```sh block, and the "$ " lines of a
// plain ``` block (a transcript). The synopsis block (no "$ ") is not an
// example. docs/commands.md is --help's text, whose examples helpExamples
// reads. docs/verification.md's lines, on SGLang's real history, are run by
// verification.txtar when the scripts get a mirror ([mirror]); without one
// it is skipped, and this test still holds it to them word for word.
func readmeExamples(t *testing.T) []docExample {
	var out []docExample
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"../../README.md"}
	for _, f := range docs {
		if b := filepath.Base(f); b != "commands.md" {
			files = append(files, f)
		}
	}
	for _, f := range files {
		out = append(out, fileExamples(t, f)...)
	}
	return out
}

// fileExamples returns the arpatch command lines of one markdown file.
func fileExamples(t *testing.T, file string) []docExample {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(file, "../../")
	var out []docExample
	fence := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if strings.HasPrefix(l, "```") {
			if fence == "" {
				fence = strings.TrimPrefix(l, "```")
				if fence == "" {
					fence = "plain"
				}
			} else {
				fence = ""
			}
			continue
		}
		cmd := ""
		switch {
		case fence == "sh":
			cmd = l
		case fence == "plain" && strings.HasPrefix(l, "$ "):
			cmd = strings.TrimPrefix(l, "$ ")
		default:
			continue
		}
		env, args, err := docWords(cmd)
		if err != nil {
			t.Errorf("%s:%d: %q does not parse as a shell line: %v", name, n, cmd, err)
		}
		if args != nil {
			out = append(out, docExample{Where: fmt.Sprintf("%s:%d", name, n), Line: cmd, Env: env, Args: args})
		}
	}
	return out
}

// scriptExec is one `exec arpatch ...` line of a CLI script, with the env
// lines before it.
type scriptExec struct {
	Where string
	Env   []string
	Args  []string
}

var execLine = regexp.MustCompile(`^(?:\[[^\]]*\]\s*)*(?:[!?]\s*)?exec\s+(arpatch\s.*|arpatch)$`)

func scriptExecs(t *testing.T) []scriptExec {
	files, err := filepath.Glob("testdata/script/*.txtar")
	if err != nil {
		t.Fatal(err)
	}
	var out []scriptExec
	for _, f := range files {
		a, err := txtar.ParseFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var env []string
		for n, l := range strings.Split(string(a.Comment), "\n") {
			l = strings.TrimSpace(l)
			if rest, ok := strings.CutPrefix(l, "env "); ok {
				env = append(env, strings.Fields(rest)...)
				continue
			}
			m := execLine.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			// testscript quotes with '...' only, like a shell's single
			// quotes; $VAR is expanded by the script, left as is here.
			args, err := shell.Fields(m[1], keepVars)
			if err != nil {
				t.Errorf("%s:%d: %v", f, n+1, err)
				continue
			}
			out = append(out, scriptExec{Where: fmt.Sprintf("%s:%d", f, n+1), Env: slices.Clone(env), Args: args})
		}
	}
	return out
}

// TestDocExamplesRun fails for every README, docs/ or --help example that no CLI
// script executes word for word (with its VAR=value words set by an env
// line before it).
func TestDocExamplesRun(t *testing.T) {
	examples := append(readmeExamples(t), helpExamples(t)...)
	if len(examples) < 30 {
		t.Fatalf("found only %d examples; the extraction broke", len(examples))
	}
	execs := scriptExecs(t)
	for _, ex := range examples {
		found := slices.ContainsFunc(execs, func(s scriptExec) bool {
			if !slices.Equal(s.Args, ex.Args) {
				return false
			}
			for _, e := range ex.Env {
				if !slices.Contains(s.Env, e) {
					return false
				}
			}
			return true
		})
		if !found {
			t.Errorf("%s: example not executed by any testdata/script/*.txtar: %s\n\twant a line: exec %s", ex.Where, ex.Line, strings.Join(ex.Args, " "))
		}
	}
}

// TestREADMERecipeLoads loads every recipe docs/usage.md shows (a
// ```toml block with an [upstream] table) with the same loader as
// --recipe-file.
func TestREADMERecipeLoads(t *testing.T) {
	b, err := os.ReadFile("../../docs/usage.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```toml\n(.*?)```").FindAllSubmatch(b, -1)
	n := 0
	for _, m := range blocks {
		if !bytes.Contains(m[1], []byte("\n[upstream]")) {
			continue
		}
		n++
		if _, err := recipes.Parse("README.md recipe example", m[1]); err != nil {
			t.Errorf("the README's recipe example does not load: %v", err)
		}
	}
	if n == 0 {
		t.Error("no recipe example found in docs/usage.md")
	}
}

// TestNewUserMakesNothing holds testdata/script/newuser.txtar to a new
// user's state: it starts from a fresh HOME and makes nothing by hand but
// the README's set-up (a copy of SGLang's history at ~/mirrors/sglang.git)
// in a checkout of arpatch (its patches/sglang): no fixture files, no
// shell, no fake tools, only arpatch's commands and checks of what they
// print and leave (and `cp stdout FILE` after a command whose example
// writes its output to FILE with `> FILE`). And it runs, in their
// documented order, the README's main job and every --help example of the
// commands a new user meets first (apply, status, revert, patches,
// recipes): the files they name (my.toml, ./my-series, my-recipe.toml)
// are made by the examples before them.
func TestNewUserMakesNothing(t *testing.T) {
	const script = "testdata/script/newuser.txtar"
	a, err := txtar.ParseFile(script)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Files) > 0 {
		t.Errorf("%s carries %d fixture files; a new user has none", script, len(a.Files))
	}
	first := map[string]bool{"apply": true, "status": true, "revert": true, "patches": true, "recipes": true}
	want := []docExample{}
	for _, ex := range readmeExamples(t) {
		if slices.Equal(ex.Args, []string{"arpatch", "apply", "--recipe", "pcie", "--repo", "~/mirrors/sglang.git"}) {
			want = append(want, ex)
		}
	}
	// The files examples write with > FILE, by the words that write them.
	redirects := map[string][][]string{}
	for _, ex := range helpExamples(t) {
		name := strings.Fields(ex.Where)[1]
		if !first[name] {
			continue
		}
		if m := redirectTo.FindStringSubmatch(ex.Line); m != nil {
			redirects[m[1]] = append(redirects[m[1]], ex.Args)
		}
		if !slices.ContainsFunc(want, func(w docExample) bool { return slices.Equal(w.Args, ex.Args) }) {
			want = append(want, ex)
		}
	}
	if len(want) < 20 {
		t.Fatalf("only %d examples to find; the extraction broke", len(want))
	}
	allowed := map[string]bool{
		"env HOME=$WORK/home": true, "env ARPATCH_STATE=": true, "mkdir $HOME": true,
		"shippedseries patches/sglang":                       true, // a checkout of arpatch
		"mkdir $HOME/mirrors":                                true, // the README's set-up
		"symlink $HOME/mirrors/sglang.git -> $SGLANG_MIRROR": true,
	}
	check := regexp.MustCompile(`^!?\s*(stdout|stderr|exists|skip)\s`)
	var execs [][]string
	for n, l := range strings.Split(string(a.Comment), "\n") {
		l = strings.TrimSpace(l)
		l = strings.TrimSpace(regexp.MustCompile(`^\[!?mirror\]`).ReplaceAllString(l, ""))
		if l == "" || strings.HasPrefix(l, "#") || allowed[l] || check.MatchString(l) {
			continue
		}
		if file, ok := strings.CutPrefix(l, "cp stdout "); ok {
			// The shell's > FILE, right after the command an example
			// writes there.
			if len(execs) == 0 || !slices.ContainsFunc(redirects[file], func(args []string) bool { return slices.Equal(args, execs[len(execs)-1]) }) {
				t.Errorf("%s:%d: %q follows no example that writes its output to %s", script, n+1, l, file)
			}
			continue
		}
		m := execLine.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("%s:%d: %q makes or fakes something a new user would not have", script, n+1, l)
			continue
		}
		args, err := shell.Fields(m[1], keepVars)
		if err != nil {
			t.Fatal(err)
		}
		execs = append(execs, args)
	}
	// In order: each after the one before it (the same line may run
	// again later, as the main job does).
	at := 0
	for _, ex := range want {
		i := slices.IndexFunc(execs[at:], func(args []string) bool { return slices.Equal(args, ex.Args) })
		if i < 0 {
			t.Errorf("%s: %s is not run by %s after the examples before it", ex.Where, ex.Line, script)
			continue
		}
		at += i + 1
	}
}

// redirectTo is the file an example line writes its output to.
var redirectTo = regexp.MustCompile(`>\s*(\S+)\s*(?:#.*)?$`)
