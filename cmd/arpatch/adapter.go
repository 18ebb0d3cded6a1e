package main

// The adapter between urfave/cli/v2 and the commands. Each command is three
// parts, as in cli/cli (pkg/cmd/<noun>/<verb>): a flags struct of plain
// parsed values, each field the Destination of its flag, which the
// command's constructor newCmdX(runF) declares beside it; an options
// function from those values to the command's options, which reads the
// files the flags name (a recipe, a series directory, a config) but runs
// and writes nothing, and refuses bad values with a usage error naming the
// flag (options_test.go tables them); and a run function (runF) from
// options and streams to the work. Besides urfave's own parsing, only
// this file reads a *cli.Context (act, cmdline, the Befores); urfave's
// quirks live here, each tested in adapter_test.go with urfave's own
// errors:
//   - flags after positional arguments (interspersed), and a value-taking
//     flag last on the line with no value, which urfave would give the
//     positional argument before it;
//   - an unknown command, which urfave reports as "No help topic"
//     (unknownCommand);
//   - help that shows a one-letter flag as "-a" (flagString);
//   - flag errors, which urfave prints with the help page on stdout, in
//     arpatch's words on stderr instead (conform, flagUsageError);
//   - its exit codes mapped onto arpatch's (exitCode).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/lazyre"
	"github.com/arpatch/arpatch/internal/shellq"
)

func init() {
	urfaveFlagString := cli.FlagStringer
	cli.FlagStringer = func(f cli.Flag) string { return flagString(urfaveFlagString(f), f.Names()[0]) }
}

// flagString is a flag's --help line s as the README and the remedies
// spell it: a one-letter name with "--" ("--a NAME", where urfave writes
// "-a NAME"; its FlagNamePrefixer hook is not called in v2.27), a
// one-letter alias still with "-" ("--help, -h"). urfave parses either
// spelling.
func flagString(s, name string) string {
	if len(name) == 1 && strings.HasPrefix(s, "-"+name) {
		return "-" + s
	}
	return s
}

// streams are a command's standard streams, as gh's IOStreams: run
// functions print only through them, so a test runs a command with
// buffers. Whether Err is a terminal (a progress bar, or lines) is
// internal/progress's to tell from the writer itself.
type streams struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// streamsOf returns the app's streams.
func streamsOf(c *cli.Context) streams {
	return streams{In: c.App.Reader, Out: c.App.Writer, Err: c.App.ErrWriter}
}

// given is the set of flags given on the command line, by name
// (cmdline.Given). A flag's value alone cannot tell "--jobs 0" from no
// --jobs.
type given map[string]bool

// args are the positional arguments (cmdline.Args).
type args []string

// cmdline is what a command line gives besides the flags' values, which
// urfave/cli writes straight into a command's flags struct (each flag's
// Destination): the flags given (Given, urfave's IsSet: a value alone
// cannot tell "--jobs 0" from no --jobs), the positional arguments, and
// the name each aliased flag was given by (name). A flags struct embeds
// it; act fills it before the options function runs.
type cmdline struct {
	Given given
	Args  args
	// typed maps a flag's name to the alias the command line gave it
	// by, where that is not its name.
	typed map[string]string
}

// argvKey is the context key of the command line runApp runs (its
// []string), which cmdline.fill reads the aliases typed from.
type argvKey struct{}

// fill sets l from c. The alias typed is read from the command line
// (argvKey) because urfave does not keep it: IsSet and
// LocalFlagNames answer every name of a flag given by any one of them.
func (l *cmdline) fill(c *cli.Context) {
	l.Given = given{}
	for _, f := range c.Command.Flags {
		if n := f.Names()[0]; c.IsSet(n) {
			l.Given[n] = true
		}
	}
	l.Args = c.Args().Slice()
	argv, _ := c.Context.Value(argvKey{}).([]string)
	typed := map[string]bool{}
	for _, a := range argv {
		if a == "--" {
			break
		}
		if strings.HasPrefix(a, "-") {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			typed[name] = true
		}
	}
	l.typed = map[string]string{}
	for _, f := range c.Command.Flags {
		names := f.Names()
		for _, alias := range names[1:] {
			// (A one-letter alias, -h, is no name an error uses.)
			if len(alias) > 1 && typed[alias] && !typed[names[0]] {
				l.typed[names[0]] = alias
			}
		}
	}
}

// name is flag as the command line named it: the alias it was given by
// (--max-concurrency for --concurrency, --history for --db) where its own
// name was not typed, so that an error about it names what the user wrote
// and its remedy, copied from their command line, reads as they typed it.
func (l cmdline) name(flag string) string {
	if a := l.typed[flag]; a != "" {
		return a
	}
	return flag
}

// act is a command's Action, in the style of gh's NewCmdX(f, runF): f is
// the flags struct the command's flags write into (Destination), opts
// turns it into the options O, and runF runs them with the app's
// streams. A command's constructor takes runF, so that a test can run the
// parser and the options function and keep the options
// (options_test.go's optsOf). f's cmdline, when it embeds one, is filled
// first.
func act[F, O any](f *F, opts func(F) (O, error), runF func(context.Context, O, streams) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		if l, ok := any(f).(interface{ fill(*cli.Context) }); ok {
			l.fill(c)
		}
		if p, ok := c.Context.Value(flagsOnly{}).(*any); ok {
			*p = *f
			return errOptionsOnly
		}
		o, err := opts(*f)
		if err != nil {
			return err
		}
		if c.Context.Value(optionsOnly{}) != nil {
			return errOptionsOnly
		}
		return runF(c.Context, o, streamsOf(c))
	}
}

// flagsOnly, as a context key whose value is a *any, makes a command
// store its parsed flags struct there and return errOptionsOnly before
// its options function: a test reads what the parser wrote
// (adapter_test.go's parsed).
type flagsOnly struct{}

// optionsOnly, as a context key with any value, stops every command after
// its options are made, before it runs: the CLI scripts' `usage` command
// checks refusals in the test process this way, so a command that fails
// to refuse returns errOptionsOnly (exit 1) and does nothing.
type optionsOnly struct{}

// errOptionsOnly is what a command on an optionsOnly context returns in
// place of running.
var errOptionsOnly = errors.New("the options were accepted; the command was not run (options-only context)")

// noFlags is the options function of a command without flags.
func noFlags(struct{}) (struct{}, error) { return struct{}{}, nil }

// exitError ends a command with an exit code (and a message, printed
// unless empty). It is a cli.ExitCoder.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }
func (e exitError) ExitCode() int { return e.code }

// exitWith returns the error that makes arpatch exit with code, printing
// msg unless it is empty.
func exitWith(code int, msg string) error { return exitError{code, msg} }

// exitCode maps a command's error onto arpatch's exit codes: a panic
// (internalError) is 5, a usage error (usageError, an ambiguous
// abbreviated commit, a revision that names none: 1-3 hex digits, a
// one-sided range) 2, an exitError its code, any other error 1.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ue usageError
	var ec cli.ExitCoder
	var ie internalError
	switch {
	case errors.As(err, &ie):
		return exitInternal
	case errors.As(err, &ue), errors.Is(err, gitsrc.ErrAbbreviated), errors.Is(err, gitsrc.ErrBadRevision):
		return exitUsage
	case errors.As(err, &ec):
		// urfave/cli answers an unknown command with exit 3; arpatch's
		// documented code for any usage error is 2.
		if strings.Contains(err.Error(), "No help topic for") {
			return exitUsage
		}
		return ec.ExitCode()
	}
	return exitFailure
}

// conform makes every command of cmds, subcommands included, answer a
// usage error as git and the go command do: one line on stderr in
// arpatch's words (run adds the pointer to --help), exit 2, nothing on
// stdout. urfave/cli would print "Incorrect Usage: ..." and the whole
// help page on stdout for a flag error, and the help page for a missing
// required flag, so that `arpatch status --json --bogus | jq` received
// text. So each command gets an OnUsageError (flagUsageError) and checks
// its required flags itself, in its Before (urfave's Required is cleared
// here, where its declarations stay readable). A leaf command hides
// urfave's "help" subcommand, which its help page listed as
// "COMMANDS: help, h" though the leaf has no commands.
func conform(cmds []*cli.Command) {
	for _, c := range cmds {
		c.OnUsageError = flagUsageError
		if len(c.Subcommands) == 0 {
			c.HideHelpCommand = true
		}
		if req := clearRequired(c.Flags); len(req) > 0 {
			before := c.Before
			c.Before = func(ctx *cli.Context) error {
				var missing []string
				for _, n := range req {
					if !ctx.IsSet(n) {
						missing = append(missing, "--"+n)
					}
				}
				switch len(missing) {
				case 0:
				case 1:
					return usagef("%s is required", missing[0])
				default:
					return usagef("%s are required", strings.Join(missing, " and "))
				}
				if before != nil {
					return before(ctx)
				}
				return nil
			}
		}
		conform(c.Subcommands)
	}
}

// clearRequired returns the names of the flags marked Required, and
// clears the mark (every flag type of urfave/cli v2 that has one keeps
// it in a bool field named Required).
func clearRequired(flags []cli.Flag) []string {
	var names []string
	for _, f := range flags {
		if rf, ok := f.(cli.RequiredFlag); ok && rf.IsRequired() {
			names = append(names, f.Names()[0])
			reflect.ValueOf(f).Elem().FieldByName("Required").SetBool(false)
		}
	}
	return names
}

// flagMessages are the flag package's parse errors (urfave/cli passes
// them on as they are), with the flag's name and value as groups.
var (
	errUndefined = lazyre.New(`^flag provided but not defined: -+(.*)$`)
	errNoValue   = lazyre.New(`^flag needs an argument: -+(.*)$`)
	errBadValue  = lazyre.New(`^invalid value "(.*)" for flag -+([^:]*): (.*)$`)
	errBadBool   = lazyre.New(`^invalid boolean value "(.*)" for -+([^:]*): (.*)$`)
	errBoolFlag  = lazyre.New(`^invalid boolean flag ([^:]*): (.*)$`)
	errSyntax    = lazyre.New(`^bad flag syntax: (.*)$`)
	errTwoForms  = lazyre.New(`^Cannot use two forms of the same flag: (\S+) (\S+)$`) // urfave/cli's own: a flag given by two of its names
)

// flagUsageError is every command's (and the app's) OnUsageError: a flag
// that did not parse, in arpatch's words, as a usage error. It names the
// flag as the README and --help spell it (--name) and, for a value of
// the wrong type, the type the flag takes.
func flagUsageError(c *cli.Context, err error, _ bool) error {
	return usageError{errors.New(flagMessage(c, err.Error()))}
}

// flagMessage is flagUsageError's text for the flag package's message m.
func flagMessage(c *cli.Context, m string) string {
	if g := errUndefined().FindStringSubmatch(m); g != nil {
		return fmt.Sprintf("unknown flag --%s", g[1])
	}
	if g := errNoValue().FindStringSubmatch(m); g != nil {
		return fmt.Sprintf("--%s needs a value", g[1])
	}
	if g := errBadBool().FindStringSubmatch(m); g != nil {
		return fmt.Sprintf("--%s=%s: want true or false", g[2], g[1])
	}
	if g := errBoolFlag().FindStringSubmatch(m); g != nil {
		return fmt.Sprintf("--%s: want true or false", g[1])
	}
	if g := errTwoForms().FindStringSubmatch(m); g != nil {
		a, b := min(g[1], g[2]), max(g[1], g[2])
		return fmt.Sprintf("--%s and --%s are two names of one flag: give it once", a, b)
	}
	if g := errSyntax().FindStringSubmatch(m); g != nil {
		return fmt.Sprintf("bad flag syntax %s (flags are --name or --name=value)", g[1])
	}
	if g := errBadValue().FindStringSubmatch(m); g != nil {
		val, name, why := g[1], g[2], g[3]
		var f cli.Flag
		if c != nil && c.Command != nil {
			f = lookupFlag(c.Command.Flags, name)
		} else if c != nil && c.App != nil {
			f = lookupFlag(c.App.Flags, name)
		}
		switch f.(type) {
		case *cli.GenericFlag:
			if strings.HasPrefix(why, "--"+name) { // arpatch's own value type said it
				return why
			}
		case *cli.IntFlag, *cli.Int64Flag:
			why = "want a whole number"
		case *cli.Float64Flag:
			why = "want a number"
		case *cli.DurationFlag:
			why = "want a duration with its unit, e.g. 90s or 5m"
		}
		return fmt.Sprintf("--%s %s: %s", name, shellq.Quote(val), why)
	}
	return m
}

func lookupFlag(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			return f
		}
	}
	return nil
}

// helpPointer is the --help page a usage error of the command line args
// points at: that of the deepest command args name before any flag
// ("arpatch patches check --help"), else arpatch's (a flag before the
// command is arpatch's own).
func helpPointer(app *cli.App, args []string) string {
	path, cmds := "arpatch", app.Commands
	for _, a := range args[min(1, len(args)):] {
		c := findCommand(cmds, a)
		if c == nil || c.Name == "help" {
			break
		}
		path, cmds = path+" "+c.Name, c.Subcommands
	}
	return path + " --help"
}

// noArgs refuses positional arguments for commands that take none, and
// flags given an empty value, which would silently mean "not given".
func noArgs(c *cli.Context) error { return noArgsExcept()(c) }

// noArgsExcept is noArgs with the flags named allowed an empty value: the
// command itself says what an empty one means (nightly's --summary
// "$GITHUB_STEP_SUMMARY" outside GitHub Actions).
func noArgsExcept(emptyOK ...string) cli.BeforeFunc {
	return func(c *cli.Context) error { return checkArgs(c, emptyOK) }
}

func checkArgs(c *cli.Context, emptyOK []string) error {
	// urfave/cli runs a command's Before before it dispatches to a
	// subcommand ("bench allreduce"): the subcommand's name is no stray
	// argument.
	if c.Command != nil && findCommand(c.Command.Subcommands, c.Args().First()) != nil {
		return nil
	}
	if c.Args().Len() > 0 {
		return usagef("%s takes no arguments, got %q", c.Command.Name, c.Args().Slice())
	}
	for _, name := range c.FlagNames() {
		if c.IsSet(name) && !slices.Contains(emptyOK, name) {
			if v, ok := c.Value(name).(string); ok && strings.TrimSpace(v) == "" {
				return usagef("--%s was given an empty value", name)
			}
		}
	}
	return tildeWithoutHome(c)
}

// tildeWithoutHome refuses a flag value that starts with "~" when the
// home directory is unknown: arpatch would otherwise make a directory
// literally named "~". "~user/" is the shell's to expand.
func tildeWithoutHome(c *cli.Context) error {
	for _, name := range c.FlagNames() {
		v, ok := c.Value(name).(string)
		if !ok || !c.IsSet(name) || (v != "~" && !strings.HasPrefix(v, "~/")) {
			continue
		}
		if h, err := os.UserHomeDir(); err != nil || h == "" {
			return usagef("--%s %s: HOME is not set, so ~ cannot be expanded; pass the full path", name, v)
		}
	}
	return nil
}

// interspersed moves the flags that follow a command's positional
// arguments in front of them, so that "arpatch history show 3 --db h.db"
// means what "arpatch history show --db h.db 3" means: urfave/cli v2 stops
// parsing flags at the first positional argument and would otherwise take
// "--db" and "h.db" as two more arguments. Tokens after "--" stay
// positional. A value-taking flag last on the line, with no value, is a
// usage error naming it ("--db needs a value"): moved in front of the
// arguments it would take one of them as its value.
func interspersed(app *cli.App, args []string) ([]string, error) {
	if len(args) < 2 {
		return args, nil
	}
	out := []string{args[0]}
	i := 1
	// Global flags, then the command path.
	for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "--" {
		out = append(out, args[i])
		i++
	}
	cmds, path := app.Commands, "arpatch"
	var leaf *cli.Command
	for i < len(args) {
		c := findCommand(cmds, args[i])
		if c == nil {
			break
		}
		out = append(out, args[i])
		leaf, cmds, path = c, c.Subcommands, path+" "+c.Name
		i++
	}
	if leaf == nil || leaf.SkipFlagParsing {
		return append(out, args[i:]...), nil
	}
	takesValue := map[string]bool{}
	for _, f := range leaf.Flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			takesValue[n] = !isBool
		}
	}
	var flags, pos []string
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i:]...)
			break
		}
		name := strings.TrimLeft(a, "-")
		if !strings.HasPrefix(a, "-") || a == "-" || name == "" {
			pos = append(pos, a)
			continue
		}
		name, _, hasValue := strings.Cut(name, "=")
		flags = append(flags, a)
		// An unknown flag (--help included) moves too, alone: the parser
		// then names it or shows the help.
		if takesValue[name] && !hasValue {
			if i+1 == len(args) {
				return nil, usagef("--%s needs a value (%s --help)", name, path)
			}
			i++
			flags = append(flags, args[i])
		}
	}
	return append(append(out, flags...), pos...), nil
}

// unknownCommand turns urfave/cli's answer to an unknown command ("No help
// topic for 'nosuch'") into a usage error that names it and lists the
// commands of the group it was looked up in (the app's, or a command's
// such as history's); any other err is returned as it is.
func unknownCommand(app *cli.App, args []string, err error) error {
	if err == nil {
		return nil
	}
	_, rest, ok := strings.Cut(err.Error(), "No help topic for '")
	if !ok {
		return err
	}
	name := strings.TrimSuffix(rest, "'")
	cmds, path := app.Commands, ""
	for _, a := range args[min(1, len(args)):] {
		c := findCommand(cmds, a)
		if c == nil || c.Name == "help" || len(c.Subcommands) == 0 {
			break
		}
		cmds, path = c.Subcommands, path+" "+c.Name
	}
	var names []string
	for _, c := range cmds {
		if !c.Hidden && c.Name != "help" {
			names = append(names, c.Name)
		}
	}
	return usagef("unknown command %q; the commands of arpatch%s are: %s (arpatch%s --help describes them)", strings.TrimSpace(path+" "+name), path, strings.Join(names, ", "), path)
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}
