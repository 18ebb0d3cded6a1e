package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// commandsDoc is docs/commands.md as the binary's --help makes it: the
// top-level help, then every command's and subcommand's, in the order
// `arpatch --help` lists them.
func commandsDoc(t *testing.T) string {
	var b strings.Builder
	b.WriteString("# Command reference\n\nEvery command's `--help`, as `arpatch CMD --help` prints it. This file is\ngenerated: `ARPATCH_WRITE_DOCS=1 go test ./cmd/arpatch -run TestCommandsDoc`\nwrites it again, and the test fails when it differs from the binary's\nhelp. docs/usage.md has each command in depth.\n")
	section := func(path []string) {
		var out bytes.Buffer
		args := append(append([]string{"arpatch"}, path...), "--help")
		if code := run(context.Background(), args, &out, &out); code != 0 {
			t.Fatalf("%s: exit %d\n%s", strings.Join(args, " "), code, out.String())
		}
		b.WriteString("\n## " + strings.Join(append([]string{"arpatch"}, path...), " ") + "\n\n```text\n" + strings.TrimRight(out.String(), "\n") + "\n```\n")
	}
	section(nil)
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name == "help" {
				continue
			}
			p := append(append([]string{}, path...), c.Name)
			section(p)
			walk(p, c.Subcommands)
		}
	}
	walk(nil, newApp(io.Discard, io.Discard).Commands)
	return b.String()
}

// TestCommandsDoc: docs/commands.md is every command's --help, word for
// word (ARPATCH_WRITE_DOCS=1 writes it again).
func TestCommandsDoc(t *testing.T) {
	const file = "../../docs/commands.md"
	want := commandsDoc(t)
	if os.Getenv("ARPATCH_WRITE_DOCS") == "1" {
		if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(want, "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("%s differs from the binary's --help at line %d:\n got %q\nwant %q\nrun: ARPATCH_WRITE_DOCS=1 go test ./cmd/arpatch -run TestCommandsDoc", file, i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("%s has %d lines, the binary's --help %d; run: ARPATCH_WRITE_DOCS=1 go test ./cmd/arpatch -run TestCommandsDoc", file, len(gl), len(wl))
	}
	for _, c := range []string{"## arpatch apply\n", "## arpatch history plot\n", "## arpatch bench allreduce\n"} {
		if !strings.Contains(want, c) {
			t.Errorf("the reference lacks %q", c)
		}
	}
}
