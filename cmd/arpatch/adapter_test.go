package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
	"mvdan.cc/sh/v3/shell"

	"github.com/arpatch/arpatch/internal/gitsrc"
)

// parsed runs arpatch's parser over the command line argv (split as sh
// does) as run does: interspersed, urfave/cli, the command's Before
// (noArgs). Instead of running the command it returns its flags struct,
// F (flagsOnly). A refusal of the parser is returned as urfave returns
// it.
func parsed[F any](t *testing.T, argv string) (F, error) {
	t.Helper()
	var f F
	words, err := shell.Fields(argv, func(string) string { return "" })
	if err != nil {
		t.Fatalf("%s: %v", argv, err)
	}
	app := newApp(io.Discard, io.Discard)
	argv2, err := interspersed(app, words)
	if err != nil {
		return f, err
	}
	var got any
	ctx := context.WithValue(context.WithValue(context.Background(), argvKey{}, words), flagsOnly{}, &got)
	err = app.RunContext(ctx, argv2)
	if !errors.Is(err, errOptionsOnly) || got == nil {
		if err == nil {
			t.Fatalf("%s: the command did not run", argv)
		}
		return f, err
	}
	f, ok := got.(F)
	if !ok {
		t.Fatalf("%s: the command's flags are %T, not %T", argv, got, f)
	}
	return f, nil
}

// optsOf parses argv and turns its flags into options with opts.
func optsOf[F, O any](t *testing.T, opts func(F) (O, error), argv string) (O, error) {
	t.Helper()
	f, err := parsed[F](t, argv)
	if err != nil {
		var o O
		return o, err
	}
	return opts(f)
}

// cmdOptsOf parses the command line argv (split as sh does) as run does
// (interspersed, urfave/cli, the command's Before), with the command
// newCmd makes in the place of the one argv names, and returns the
// options its Action hands to runF, which does not run: gh's
// NewCmdX(f, runF) test seam. A refusal of the parser or of the options
// function is returned as it comes.
func cmdOptsOf[O any](t *testing.T, newCmd func(runF func(context.Context, O, streams) error) *cli.Command, argv string) (O, error) {
	t.Helper()
	var got O
	words, err := shell.Fields(argv, func(string) string { return "" })
	if err != nil {
		t.Fatalf("%s: %v", argv, err)
	}
	ran := false
	cmd := newCmd(func(_ context.Context, o O, _ streams) error {
		got, ran = o, true
		return nil
	})
	conform([]*cli.Command{cmd})
	app := newApp(io.Discard, io.Discard)
	var slot **cli.Command
	for cmds, i := app.Commands, 1; i < len(words); i++ {
		j := slices.IndexFunc(cmds, func(c *cli.Command) bool { return c.HasName(words[i]) })
		if j < 0 {
			break
		}
		slot, cmds = &cmds[j], cmds[j].Subcommands
	}
	if slot == nil || (*slot).Name != cmd.Name {
		t.Fatalf("%s does not name the command %s", argv, cmd.Name)
	}
	*slot = cmd
	argv2, err := interspersed(app, words)
	if err != nil {
		return got, err
	}
	err = app.RunContext(context.Background(), argv2)
	if err == nil && !ran {
		t.Fatalf("%s: the command did not run", argv)
	}
	return got, err
}

// cmdRefuses checks that the command newCmd makes refuses each command
// line (in its parser or its options function) as its refusal says.
func cmdRefuses[O any](t *testing.T, newCmd func(runF func(context.Context, O, streams) error) *cli.Command, rs []refusal) {
	t.Helper()
	for _, r := range rs {
		_, err := cmdOptsOf(t, newCmd, r.argv)
		checkRefusal(t, r, err)
	}
}

// refusal is a refused command line: its exit code and what its message
// must hold (the flag and the remedy).
type refusal struct {
	argv string
	code int
	says []string
}

// checkRefusal fails unless err is r's refusal.
func checkRefusal(t *testing.T, r refusal, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want exit %d", r.argv, r.code)
		return
	}
	if got := exitCode(err); got != r.code {
		t.Errorf("%s: exit %d, want %d (%v)", r.argv, got, r.code, err)
	}
	for _, s := range r.says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: %q does not say %q", r.argv, err, s)
		}
	}
}

// TestExitCode maps urfave/cli's own errors, got by parsing bad command
// lines, and arpatch's onto the documented exit codes, each in arpatch's
// words, and prints none of urfave's help: as git and the go command, one
// line on stderr and nothing on stdout (run adds the --help pointer,
// TestUsageErrorOneLine).
func TestExitCode(t *testing.T) {
	for _, c := range []struct {
		argv string
		says string
	}{
		{"arpatch apply --no-such-flag", "unknown flag --no-such-flag"},
		{"arpatch history show 3 --bogus", "unknown flag --bogus"},
		// urfave's "flag needs an argument" never comes: interspersed
		// names the flag first.
		{"arpatch apply --src", "--src needs a value (arpatch apply --help)"},
		{"arpatch apply --dry-run=maybe", "--dry-run=maybe: want true or false"},
		{"arpatch build --jobs 1.5", "--jobs 1.5: want a whole number"},
		{"arpatch bench allreduce --timeout 5", "--timeout 5: want a duration with its unit, e.g. 90s or 5m"},
		{"arpatch bench --agree-threshold x", "--agree-threshold x: want a number"},
		{"arpatch bench allreduce --islands 0,1/x", `--islands "0,1/x": "x" is not a rank`},
		{"arpatch patches check --commit a", "--repo is required"},
		{"arpatch patches check", "--repo and --commit are required"},
		// urfave's exit 3 for an unknown command or help topic.
		{"arpatch bogus", "No help topic for 'bogus'"},
		{"arpatch patches bogus", "No help topic for 'bogus'"},
		{"arpatch help nosuch", "No help topic for 'nosuch'"},
		// An app-level flag.
		{"arpatch --bogus", "unknown flag --bogus"},
		// Refused by noArgs, arpatch's own usage error.
		{"arpatch apply stray", `apply takes no arguments, got ["stray"]`},
		{"arpatch apply --series ''", "--series was given an empty value"},
	} {
		words, _ := shell.Fields(c.argv, nil)
		var stdout, stderr bytes.Buffer
		app := newApp(&stdout, &stderr)
		argv, err := interspersed(app, words)
		if err == nil {
			err = app.RunContext(context.Background(), argv)
		}
		if err == nil {
			t.Errorf("%s: no error", c.argv)
			continue
		}
		if !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %q, want %q", c.argv, err, c.says)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %q is more than one line", c.argv, err)
		}
		if got := exitCode(err); got != exitUsage {
			t.Errorf("%s: exit %d, want %d", c.argv, got, exitUsage)
		}
		if stdout.Len() > 0 || stderr.Len() > 0 {
			t.Errorf("%s: urfave printed\n%s%s", c.argv, &stdout, &stderr)
		}
	}
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{errors.New("patch 0001.patch, hunk @@ -1 +1 @@: expected x found y"), exitFailure},
		// Not a flag error, though it starts with "invalid".
		{errors.New("invalid patch: hunk header @@ -1 +1"), exitFailure},
		{usagef("--keep %d: use 0 or more", -1), exitUsage},
		{fmt.Errorf("--commit: %w", gitsrc.ErrAbbreviated), exitUsage},
		{fmt.Errorf("--commit: %w", gitsrc.ShortHashError("84")), exitUsage},
		{exitWith(exitFailure, ""), exitFailure},
		{exitWith(4, "server died"), 4},
		{fmt.Errorf("wrapped: %w", exitWith(3, "drift")), 3},
		{cli.Exit("", 4), 4},
	} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// TestActBindsFlags: every kind of flag arpatch uses writes its value,
// or its default, into its Destination; act fills cmdline (the flags
// given, the arguments) and hands the options function's result to runF
// with the app's streams, or stops before runF under optionsOnly.
func TestActBindsFlags(t *testing.T) {
	type all struct {
		S   string
		B   bool
		I   int
		I64 int64
		F   float64
		D   time.Duration
		L   cli.StringSlice
		cmdline
	}
	type opts struct {
		all
		L []string
	}
	var got opts
	var out io.Writer
	cmd := func() *cli.Command {
		var f all
		return &cli.Command{Name: "c", Flags: []cli.Flag{
			&cli.StringFlag{Name: "s", Value: "dflt", Destination: &f.S}, &cli.BoolFlag{Name: "b", Destination: &f.B},
			&cli.IntFlag{Name: "i", Value: 7, Destination: &f.I}, &cli.Int64Flag{Name: "i64", Destination: &f.I64},
			&cli.Float64Flag{Name: "f", Destination: &f.F}, &cli.DurationFlag{Name: "d", Destination: &f.D}, &cli.StringSliceFlag{Name: "l", Destination: &f.L},
		}, Action: act(&f, func(f all) (opts, error) { return opts{f, f.L.Value()}, nil }, func(_ context.Context, o opts, s streams) error {
			got, out = o, s.Out
			return nil
		})}
	}
	var stdout bytes.Buffer
	app := &cli.App{Name: "arpatch", Writer: &stdout, Commands: []*cli.Command{cmd()}}
	if err := app.Run(strings.Fields("arpatch c --b --i64 9 --f 0.5 --d 2s --l x --l y,z --i 0 a1 a2")); err != nil {
		t.Fatal(err)
	}
	a := got.all
	if a.S != "dflt" || !a.B || a.I != 0 || a.I64 != 9 || a.F != 0.5 || a.D != 2*time.Second || !reflect.DeepEqual(got.L, []string{"x", "y", "z"}) ||
		!reflect.DeepEqual(a.Given, given{"b": true, "i64": true, "f": true, "d": true, "l": true, "i": true}) || !reflect.DeepEqual(a.Args, args{"a1", "a2"}) {
		t.Errorf("bound %+v", got)
	}
	if out != io.Writer(&stdout) {
		t.Errorf("runF got the writer %v, not the app's", out)
	}
	got = opts{}
	app = &cli.App{Name: "arpatch", Commands: []*cli.Command{cmd()}}
	err := app.RunContext(context.WithValue(context.Background(), optionsOnly{}, true), []string{"arpatch", "c", "--s", "v"})
	if !errors.Is(err, errOptionsOnly) || got.S != "" {
		t.Errorf("options only: %v, ran with %+v", err, got)
	}
}

// TestEveryFlagBound: every flag of every command writes into a field of
// its command's flags struct (a Destination, or a GenericFlag's own
// Value), so no flag is parsed and then dropped; the help flag is
// urfave's.
func TestEveryFlagBound(t *testing.T) {
	n := 0
	eachCommand(func(path string, c *cli.Command) {
		if c.Name == "help" {
			return
		}
		for _, f := range c.Flags {
			if f.Names()[0] == "help" {
				continue
			}
			n++
			if g, ok := f.(*cli.GenericFlag); ok {
				if g.Value == nil {
					t.Errorf("%s %s --%s: a GenericFlag without a Value", path, c.Name, f.Names()[0])
				}
				continue
			}
			if d := reflect.ValueOf(f).Elem().FieldByName("Destination"); !d.IsValid() || d.IsNil() {
				t.Errorf("%s %s --%s has no Destination: bind it to its flags struct's field", path, c.Name, f.Names()[0])
			}
		}
	})
	if n < 100 {
		t.Fatalf("checked only %d flags; the walk broke", n)
	}
}

func TestInterspersed(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	for _, c := range []struct{ in, want string }{
		{"arpatch history show 3 --db h.db", "arpatch history show --db h.db 3"},
		{"arpatch history show 3 --db=h.db", "arpatch history show --db=h.db 3"},
		{"arpatch history show --db h.db 3", "arpatch history show --db h.db 3"},
		{"arpatch recipes show pcie --help", "arpatch recipes show --help pcie"},
		{"arpatch patches check --repo m --commit main --json", "arpatch patches check --repo m --commit main --json"},
		// A bool flag takes no value: "x" stays positional.
		{"arpatch revert --dry-run x", "arpatch revert --dry-run x"},
		{"arpatch revert x --dry-run", "arpatch revert --dry-run x"},
		// After "--" nothing moves.
		{"arpatch history show -- 3 --db h.db", "arpatch history show -- 3 --db h.db"},
		{"arpatch history show 3 --bogus", "arpatch history show --bogus 3"},
		{"arpatch --version", "arpatch --version"},
		// A command that parses its own arguments gets them as they are.
		{"arpatch gencode-filter nvcc -O3 -c x.cu", "arpatch gencode-filter nvcc -O3 -c x.cu"},
		{"arpatch nosuch 3 --db x", "arpatch nosuch 3 --db x"},
	} {
		argv, err := interspersed(app, strings.Fields(c.in))
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
		}
		got := strings.Join(argv, " ")
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}

// TestTrailingFlagNeedsValue: a value-taking flag last on the line, after
// a positional argument, is refused by name with exit 2, through urfave's
// real parsing; without the check it took the argument as its value.
func TestTrailingFlagNeedsValue(t *testing.T) {
	for _, r := range []refusal{
		{"arpatch history show 1 --db", exitUsage, []string{"--db needs a value", "arpatch history show --help"}},
		{"arpatch history show --db", exitUsage, []string{"--db needs a value"}},
	} {
		_, err := parsed[historyShowFlags](t, r.argv)
		checkRefusal(t, r, err)
	}
	// Given its value, the same flag after the argument binds.
	f, err := parsed[historyShowFlags](t, "arpatch history show 1 --db h.db")
	if err != nil || f.DB != "h.db" || !reflect.DeepEqual(f.Args, args{"1"}) {
		t.Errorf("history show 1 --db h.db: %+v, %v; want db h.db, args [1]", f, err)
	}
}

// TestUnknownCommand: an unknown command or subcommand (urfave's "No help
// topic") is a usage error that names it and lists the commands of its
// group, each of which runs.
func TestUnknownCommand(t *testing.T) {
	for _, c := range []struct {
		argv string
		says []string
		not  string
	}{
		{"arpatch nosuch", []string{`unknown command "nosuch"`, "commands of arpatch are: apply, status, revert,", "history", "arpatch --help"}, "list, show"},
		{"arpatch help nosuch", []string{`unknown command "nosuch"`, "apply, status"}, ""},
		{"arpatch history nosuch", []string{`unknown command "history nosuch"`, "commands of arpatch history are: ", "list", "show", "arpatch history --help"}, "apply"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), strings.Fields(c.argv), &stdout, &stderr)
		if code != exitUsage {
			t.Errorf("%s: exit %d, want %d", c.argv, code, exitUsage)
		}
		msg := stderr.String()
		for _, s := range c.says {
			if !strings.Contains(msg, s) {
				t.Errorf("%s: %q does not say %q", c.argv, msg, s)
			}
		}
		if c.not != "" && strings.Contains(msg, c.not) {
			t.Errorf("%s: %q lists %q, another group's commands", c.argv, msg, c.not)
		}
		if strings.Contains(msg, "No help topic") || strings.Contains(msg, "fake-sglang") {
			t.Errorf("%s: %q shows urfave's text or a hidden command", c.argv, msg)
		}
	}
	// Every command it lists runs (its --help).
	var stderr bytes.Buffer
	run(context.Background(), []string{"arpatch", "nosuch"}, io.Discard, &stderr)
	_, list, _ := strings.Cut(stderr.String(), "are: ")
	list, _, _ = strings.Cut(list, " (")
	for _, name := range strings.Split(list, ", ") {
		if code := run(context.Background(), []string{"arpatch", name, "--help"}, io.Discard, io.Discard); code != exitOK {
			t.Errorf("arpatch %s --help (listed): exit %d", name, code)
		}
	}
}

// TestHelpOneDefaultPerFlag runs every command's --help and refuses a flag
// line that states two defaults, e.g. "(default: the recipe's bench.tp)
// (default: 0)": a default that a flag's Usage describes goes in its
// DefaultText, so urfave prints it once.
func TestHelpOneDefaultPerFlag(t *testing.T) {
	var walk func(path []string, cmds []*cli.Command)
	seen := 0
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden {
				continue
			}
			p := append(append([]string(nil), path...), c.Name)
			var out bytes.Buffer
			app := newApp(&out, &out)
			if err := app.Run(append(append([]string{"arpatch"}, p...), "--help")); err != nil {
				t.Errorf("arpatch %s --help: %v", strings.Join(p, " "), err)
			}
			seen++
			for _, l := range strings.Split(out.String(), "\n") {
				if strings.Count(l, "(default") > 1 {
					t.Errorf("arpatch %s --help states two defaults:\n%s", strings.Join(p, " "), l)
				}
			}
			walk(p, c.Subcommands)
		}
	}
	walk(nil, newApp(io.Discard, io.Discard).Commands)
	if seen < 20 {
		t.Errorf("walked %d commands, want every command (20 or more)", seen)
	}
}

// TestUsageNamesOnlyItsFlags: a command's USAGE (UsageText) names no flag
// the command does not take (ab build's once named build's --recipe and
// --src, which it refused); apply's names --tune and --force-tune.
func TestUsageNamesOnlyItsFlags(t *testing.T) {
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			name := path + " " + c.Name
			walk(name, c.Subcommands)
			if c.SkipFlagParsing {
				continue
			}
			has := map[string]bool{}
			for _, f := range c.Flags {
				has[f.Names()[0]] = true
			}
			for _, m := range regexp.MustCompile(`\[--([a-z0-9-]+)`).FindAllStringSubmatch(c.UsageText, -1) {
				if !has[m[1]] {
					t.Errorf("%s: USAGE names --%s, which it does not take", name, m[1])
				}
			}
			if name == "arpatch apply" && (!strings.Contains(c.UsageText, "[--tune FILE [--force-tune]]")) {
				t.Errorf("apply: USAGE does not name --tune and --force-tune:\n%s", c.UsageText)
			}
		}
	}
	walk("arpatch", newApp(io.Discard, io.Discard).Commands)
}

// TestABBuildHelp: ab build's --help lists the flags it takes, spelled as
// the README spells them (--a NAME, not urfave's -a NAME), and none of
// build's that it has no use for (--recipe, --recipe-file, --src).
func TestABBuildHelp(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"arpatch", "ab", "build", "--help"}, &out, io.Discard); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	h := out.String()
	for _, s := range []string{"   --a NAME ", "   --b NAME ", "   --a-file PATH ", "   --arch ARCHS", "   --help, -h "} {
		if !strings.Contains(h, s) {
			t.Errorf("ab build --help lacks %q:\n%s", s, h)
		}
	}
	for _, s := range []string{"-a NAME", "--recipe ", "--recipe-file", "--src "} {
		if regexp.MustCompile(`(^|\s)` + regexp.QuoteMeta(s)).MatchString(h) {
			t.Errorf("ab build --help shows %q:\n%s", s, h)
		}
	}
}

// TestUsageErrorOneLine runs bad command lines as main does: each exits
// 2 with nothing on stdout and one line on stderr that ends with the
// --help page of the command it was given to.
func TestUsageErrorOneLine(t *testing.T) {
	for _, c := range []struct{ argv, want string }{
		{"arpatch status --json --bogus", "arpatch: unknown flag --bogus (arpatch status --help)"},
		{"arpatch --bogus status", "arpatch: unknown flag --bogus (arpatch --help)"},
		{"arpatch history show 3 --db h.db --bogus", "arpatch: unknown flag --bogus (arpatch history show --help)"},
		{"arpatch nightly", "arpatch: --config is required (arpatch nightly --help)"},
		{"arpatch patches check --repo m", "arpatch: --commit is required (arpatch patches check --help)"},
		{"arpatch build --jobs x", "arpatch: --jobs x: want a whole number (arpatch build --help)"},
		{"arpatch bench allreduce --timeout 5", "arpatch: --timeout 5: want a duration with its unit, e.g. 90s or 5m (arpatch bench allreduce --help)"},
		{"arpatch status stray", `arpatch: status takes no arguments, got ["stray"] (arpatch status --help)`},
		// A message that names its --help already gets no second one.
		{"arpatch apply --src", "arpatch: --src needs a value (arpatch apply --help)"},
	} {
		words, _ := shell.Fields(c.argv, nil)
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), words, &stdout, &stderr); code != exitUsage {
			t.Errorf("%s: exit %d, want %d", c.argv, code, exitUsage)
		}
		if stdout.Len() > 0 {
			t.Errorf("%s: stdout %q, want nothing", c.argv, &stdout)
		}
		if got := stderr.String(); got != c.want+"\n" {
			t.Errorf("%s: stderr %q, want %q", c.argv, got, c.want)
		}
	}
}

// TestLeafHelpHasNoCommands: a command without subcommands lists no
// COMMANDS (urfave's "help, h"); a group lists its own.
func TestLeafHelpHasNoCommands(t *testing.T) {
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name == "help" {
				continue
			}
			p := append(append([]string{}, path...), c.Name)
			var stdout bytes.Buffer
			if code := run(context.Background(), append(p, "--help"), &stdout, io.Discard); code != exitOK {
				t.Errorf("%s --help: exit %d", strings.Join(p, " "), code)
			}
			has := strings.Contains(stdout.String(), "\nCOMMANDS:")
			if leaf := len(c.Subcommands) == 0; leaf == has {
				t.Errorf("%s --help: COMMANDS shown %v, for a leaf %v:\n%s", strings.Join(p, " "), has, leaf, &stdout)
			}
			walk(p, c.Subcommands)
		}
	}
	walk([]string{"arpatch"}, newApp(io.Discard, io.Discard).Commands)
}

// Every command that runs (a leaf, or a group with an action of its own)
// has examples in its --help, which TestDocExamplesRun runs.
func TestEveryCommandHasExamples(t *testing.T) {
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name == "help" {
				continue
			}
			name := path + " " + c.Name
			if len(c.Subcommands) == 0 || c.Action != nil {
				// bench's say "Examples (each runs in seconds ...):",
				// which bench_examples_test.go runs.
				if !strings.Contains(c.Description, "Examples:\n") && !strings.Contains(c.Description, "\nExamples (") {
					t.Errorf("%s --help has no Examples", name)
				}
			}
			walk(name, c.Subcommands)
		}
	}
	walk("arpatch", newApp(io.Discard, io.Discard).Commands)
}

// urfaveWords are urfave/cli's and the flag package's own messages, which
// arpatch words itself (flagMessage, conform, unknownCommand).
var urfaveWords = regexp.MustCompile(`Incorrect Usage|Required flags? .*not set|flag provided but not defined|flag needs an argument|invalid value ".*" for flag|invalid boolean|No help topic|could not parse|bad flag syntax|Cannot use two forms|^NAME:|USAGE:`)

// TestEveryCommandUsageError: every command, hidden ones included, answers
// each kind of bad flag (unknown, after --json, a value missing, a value
// of the wrong type, a boolean that is not one) as git and the go command
// do: exit 2, nothing on stdout, one line on stderr in arpatch's words
// ending with the pointer to the command's --help. It runs on an
// options-only context, so a command line the parser took would fail
// here with exit 1 instead of running.
func TestEveryCommandUsageError(t *testing.T) {
	ctx := context.WithValue(context.Background(), optionsOnly{}, true)
	check := func(path string, argv []string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"arpatch"}, argv...), &out, &errb)
		msg := errb.String()
		help := "(" + path + " --help)\n"
		if code != exitUsage || out.Len() != 0 || strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "arpatch: ") ||
			!strings.HasSuffix(msg, help) || urfaveWords.MatchString(msg) {
			t.Errorf("arpatch %s: exit %d (want 2), stdout %q (want none), stderr %q (want one line ending %q, in arpatch's words)",
				strings.Join(argv, " "), code, out.String(), msg, strings.TrimSpace(help))
		}
	}
	n := 0
	var walk func(path string, words []string, cmds []*cli.Command)
	walk = func(path string, words []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Name == "help" || c.SkipFlagParsing { // gencode-filter: its arguments are a compiler's
				continue
			}
			p, w := path+" "+c.Name, append(words[:len(words):len(words)], c.Name)
			check(p, append(w, "--bogus"))
			for _, f := range c.Flags {
				name := "--" + f.Names()[0]
				switch f.(type) {
				case *cli.BoolFlag:
					check(p, append(w, name+"=maybe"))
					if name == "--json" {
						check(p, append(w, "--json", "--bogus"))
					}
				case *cli.IntFlag, *cli.Int64Flag, *cli.Float64Flag:
					check(p, append(w, name, "x"))
					check(p, append(w, name))
				case *cli.DurationFlag:
					check(p, append(w, name, "5"))
					check(p, append(w, name))
				default:
					check(p, append(w, name))
				}
				n++
			}
			walk(p, w, c.Subcommands)
		}
	}
	walk("arpatch", nil, newApp(io.Discard, io.Discard).Commands)
	if n < 100 {
		t.Fatalf("checked only %d flags; the walk broke", n)
	}
}

// An error about an aliased flag names it as the command line typed it,
// for each flag that has an alias, whichever command it is on.
func TestErrorsNameFlagsAsTyped(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"arpatch", "bench", "--max-concurrency", "x"}, &stdout, &stderr); code != exitUsage {
		t.Fatalf("bench --max-concurrency x: exit %d, %s", code, stderr.String())
	}
	if got, want := stderr.String(), "arpatch: --max-concurrency \"x\" is not a whole number (digits only), e.g. 1,4,16 (arpatch bench --help)\n"; got != want {
		t.Errorf("stderr = %q, want %q", got, want)
	}
	stderr.Reset()
	run(context.Background(), []string{"arpatch", "bench", "--concurrency=x"}, &stdout, &stderr)
	if got := stderr.String(); !strings.HasPrefix(got, `arpatch: --concurrency "x" is not`) {
		t.Errorf("the flag's own name, typed: %q", got)
	}
	// --db's alias names the history in its errors, at parse and at run.
	fakeHome(t)
	stderr.Reset()
	run(context.Background(), []string{"arpatch", "history", "list", "--history", "/nonexistent.db"}, &stdout, &stderr)
	if got := stderr.String(); !strings.HasPrefix(got, "arpatch: --history /nonexistent.db: no such file or directory") {
		t.Errorf("history list --history /nonexistent.db: %q", got)
	}
	if o, err := cmdOptsOf(t, newCmdHistoryShow, "arpatch history show 3 --history ~/h.db"); err == nil || o.DB.Flag != "" {
		// (~/h.db does not exist: the refusal names the alias.)
		if !strings.Contains(fmt.Sprint(err), "--history ") {
			t.Errorf("history show --history: %+v, %v", o, err)
		}
	}
	// Every aliased flag of every command, given by its alias, is named
	// by it (cmdline.name); given by its name, or by both, by its name.
	required := regexp.MustCompile(`^(--\S+) is required`)
	n := 0
	eachCommand(func(path string, c *cli.Command) {
		if c.Name == "help" {
			return
		}
		for _, f := range c.Flags {
			names := f.Names()
			for _, alias := range names[1:] {
				if len(alias) == 1 {
					continue // -h
				}
				n++
				for _, typed := range []struct{ argv, want string }{
					{"--" + alias + "=v", alias}, {"--" + names[0] + "=v", names[0]}, {"--" + alias + "=v --" + names[0] + "=v", names[0]},
				} {
					argv := path + " " + c.Name + " " + typed.argv
					var got any
					var err error
					for range 3 {
						if got, err = parsed[any](t, argv); err == nil {
							break
						}
						m := required.FindStringSubmatch(err.Error())
						if m == nil {
							break
						}
						argv += " " + m[1] + " x"
					}
					if typed.argv == "--"+alias+"=v --"+names[0]+"=v" {
						// urfave refuses two names of one flag, naming both.
						if err == nil || !strings.Contains(err.Error(), "two names of one flag") {
							t.Errorf("%s: %v, want the two names refused", argv, err)
						}
						continue
					}
					l, ok := got.(interface{ name(string) string })
					if err != nil || !ok {
						t.Errorf("%s: %T, %v; want a flags struct with a cmdline", argv, got, err)
					} else if l.name(names[0]) != typed.want {
						t.Errorf("%s: --%s named %q, want %q", argv, names[0], l.name(names[0]), typed.want)
					}
				}
			}
		}
	})
}

// eachCommand calls f for every command of arpatch's tree (newApp's),
// a command before its subcommands, with path the names above it
// ("arpatch patches" for check).
func eachCommand(f func(path string, c *cli.Command)) {
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			f(path, c)
			walk(path+" "+c.Name, c.Subcommands)
		}
	}
	walk("arpatch", newApp(io.Discard, io.Discard).Commands)
}
