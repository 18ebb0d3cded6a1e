package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// TestVerifyReproducibleExamplesRun checks that every
// --verify-reproducible example of the README and of `arpatch build
// --help` is run as printed by testdata/script/reproducible.txtar.
func TestVerifyReproducibleExamplesRun(t *testing.T) {
	var help bytes.Buffer
	if code := run(context.Background(), []string{"arpatch", "build", "--help"}, &help, &help); code != 0 {
		t.Fatalf("build --help: exit %d\n%s", code, help.String())
	}
	script, err := os.ReadFile("testdata/script/reproducible.txtar")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string]bool{}
	for _, l := range strings.Split(string(script), "\n") {
		if cmd, ok := strings.CutPrefix(l, "exec "); ok {
			ran[cmd] = true
		}
	}
	for name, text := range map[string]string{"build --help": help.String(), "README": string(readme)} {
		n := 0
		for _, l := range strings.Split(text, "\n") {
			l = strings.TrimSpace(l)
			if !strings.HasPrefix(l, "arpatch build ") || !strings.Contains(l, "--verify-reproducible") || strings.Contains(l, "[") {
				continue
			}
			n++
			if !ran[l] {
				t.Errorf("%s example %q is not run by reproducible.txtar", name, l)
			}
		}
		if n != 2 {
			t.Errorf("%s: %d --verify-reproducible examples, want 2", name, n)
		}
	}
}
