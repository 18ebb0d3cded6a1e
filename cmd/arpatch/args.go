package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// interspersed moves the flags that follow a command's positional
// arguments in front of them, so that "arpatch history show 3 --db h.db"
// means what "arpatch history show --db h.db 3" means: urfave/cli v2 stops
// parsing flags at the first positional argument and would otherwise take
// "--db" and "h.db" as two more arguments. Tokens after "--" stay
// positional.
func interspersed(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	i := 1
	// Global flags, then the command path.
	for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "--" {
		out = append(out, args[i])
		i++
	}
	cmds := app.Commands
	var leaf *cli.Command
	for i < len(args) {
		c := findCommand(cmds, args[i])
		if c == nil {
			break
		}
		out = append(out, args[i])
		leaf, cmds = c, c.Subcommands
		i++
	}
	if leaf == nil || leaf.SkipFlagParsing {
		return append(out, args[i:]...)
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
		if takesValue[name] && !hasValue && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return append(append(out, flags...), pos...)
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}
