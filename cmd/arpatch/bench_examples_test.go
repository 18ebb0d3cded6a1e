package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// TestBenchExamplesRun checks that every bench example of the README and
// of `arpatch bench --help` is one that
// testdata/script/bench_examples.txtar runs as printed: the three say the
// same lines.
func TestBenchExamplesRun(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"arpatch", "bench", "--help"}, &out, &out); code != 0 {
		t.Fatalf("bench --help: exit %d\n%s", code, out.String())
	}
	script, err := os.ReadFile("testdata/script/bench_examples.txtar")
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
	examples := func(text string) []string {
		var ex []string
		for _, l := range strings.Split(text, "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "arpatch bench --") && strings.Contains(l, "{arpatch} fake-sglang") {
				ex = append(ex, l)
			}
		}
		return ex
	}
	help, doc := examples(out.String()), examples(string(readme))
	if len(help) != 2 || len(doc) != 2 {
		t.Fatalf("examples: %d in --help, %d in README, want 2 each", len(help), len(doc))
	}
	for i, l := range help {
		if !ran[l] {
			t.Errorf("the --help example %q is not run by bench_examples.txtar", l)
		}
		if doc[i] != l {
			t.Errorf("README example %d:\n%s\n--help:\n%s", i, doc[i], l)
		}
	}
	// No other bench example in --help: the GPU one is prose, not an
	// example line.
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "      ") && strings.HasPrefix(strings.TrimSpace(l), "arpatch bench ") && !strings.Contains(l, "{arpatch} fake-sglang") && !strings.Contains(l, "[") {
			t.Errorf("--help example that is not run: %q", l)
		}
	}
}
