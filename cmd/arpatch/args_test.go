package main

import (
	"bytes"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

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
		// After "--" nothing moves.
		{"arpatch history show -- 3 --db h.db", "arpatch history show -- 3 --db h.db"},
		{"arpatch history show 3 --bogus", "arpatch history show --bogus 3"},
		{"arpatch --version", "arpatch --version"},
		// A command that parses its own arguments gets them as they are.
		{"arpatch gencode-filter nvcc -O3 -c x.cu", "arpatch gencode-filter nvcc -O3 -c x.cu"},
		{"arpatch nosuch 3 --db x", "arpatch nosuch 3 --db x"},
	} {
		got := strings.Join(interspersed(app, strings.Fields(c.in)), " ")
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s\n got %s\nwant %s", c.in, got, c.want)
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
