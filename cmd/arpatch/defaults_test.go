package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/report"
	"github.com/arpatch/arpatch/harness/server"
	"github.com/arpatch/arpatch/harness/sglang"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/nightly"
	"github.com/arpatch/arpatch/recipes"
)

// TestBenchDefaults: every defaulted bench setting has one value, its
// constant's. With neither flag nor recipe key (a recipe without a
// [bench]), `arpatch bench` runs with it and its report records it
// (report.SettingsOf); a nightly whose nightly.toml and recipes leave it
// unset runs with it and records it; Options built directly with a zero
// record it (for the settings bench itself defaults); --help shows it
// as the flag's default; docs/nightly.md's [bench] and the README's
// recipe example show it. nightly's regression.alpha defaults to the
// level bench compares at (stats.DefaultAlpha), as its docs say.
func TestBenchDefaults(t *testing.T) {
	dir := t.TempDir()
	rf := filepath.Join(dir, "bare.toml")
	if err := os.WriteFile(rf, []byte("name = \"bare\"\n[upstream]\ncommit = \"84118acf50b3a4c74e85e9ff9033792552de1a76\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cliOpts, err := cmdOptsOf(t, newCmdBench, "arpatch bench --recipe-file "+rf+" --launch-cmd 'x {port}'")
	if err != nil {
		t.Fatal(err)
	}
	bare, err := recipes.File(rf)
	if err != nil {
		t.Fatal(err)
	}
	nf := filepath.Join(dir, "nightly.toml")
	if err := os.WriteFile(nf, []byte("[bench]\nlaunch_cmd = \"x {port}\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := nightly.LoadConfig(nf)
	if err != nil {
		t.Fatal(err)
	}
	nightlyOpts, err := nightly.BenchOptions(cfg, nightly.Options{}, bare, bare)
	if err != nil {
		t.Fatal(err)
	}
	var help bytes.Buffer
	if code := run(context.Background(), []string{"arpatch", "bench", "--help"}, &help, &help); code != 0 {
		t.Fatalf("arpatch bench --help: exit %d\n%s", code, help.String())
	}
	nightlyDoc := section(t, "../../docs/nightly.md", "[bench]")
	readmeRecipe := section(t, "../../docs/usage.md", "[bench]                     # used by `arpatch bench`; the counts shown are the defaults")

	// nightly judges at the significance level bench compares at.
	if v, _ := keyLine(section(t, "../../docs/nightly.md", "[regression]"), "alpha"); cfg.Regression.Alpha != stats.DefaultAlpha || v != fmt.Sprint(stats.DefaultAlpha) {
		t.Errorf("nightly's regression.alpha is %v, docs/nightly.md shows %s; bench compares at %v", cfg.Regression.Alpha, v, stats.DefaultAlpha)
	}

	type view struct {
		s report.Settings
		o bench.Options
	}
	views := map[string]view{
		"bench":   {cliOpts.Settings, cliOpts.Bench},
		"nightly": {report.SettingsOf(nightlyOpts), nightlyOpts},
		"direct":  {report.SettingsOf(bench.Options{}), bench.Options{}.Resolved()},
	}
	for _, c := range []struct {
		flag   string
		want   any
		get    func(view) any
		direct bool   // bench.Options resolves it (zero is not "none")
		key    string // the [bench] key in recipes ("" for none)
		nkey   string // the [bench] key in nightly.toml ("" for none)
	}{
		{"tp", recipes.DefaultTP, func(v view) any { return v.s.TP }, false, "tp", ""},
		{"speculative-num-steps", recipes.DefaultSpecSteps, func(v view) any { return v.s.SpecSteps }, false, "speculative_num_steps", ""},
		{"speculative-eagle-topk", recipes.DefaultSpecTopK, func(v view) any { return v.s.SpecTopK }, false, "speculative_eagle_topk", ""},
		{"speculative-num-draft-tokens", recipes.DefaultSpecDraftTokens, func(v view) any { return v.s.SpecDraftTokens }, false, "speculative_num_draft_tokens", ""},
		{"num-prompts", recipes.DefaultNumPrompts, func(v view) any { return v.s.Prompts }, false, "num_prompts", "num_prompts"},
		{"max-new-tokens", recipes.DefaultMaxNewTokens, func(v view) any { return v.s.MaxNewTokens }, true, "max_new_tokens", "max_new_tokens"},
		{"concurrency", recipes.DefaultConcurrency, func(v view) any { return v.s.Concurrency[0] }, true, "concurrency", "concurrency"},
		{"warmup", recipes.DefaultWarmup, func(v view) any { return v.s.Warmup }, false, "warmup", "warmup"},
		{"trials", recipes.DefaultTrials, func(v view) any { return v.s.Trials }, true, "trials", "trials"},
		{"agree-tokens", sglang.DefaultAgreeTokens, func(v view) any { return v.s.AgreeTokens }, true, "", ""},
		{"agree-threshold", bench.DefaultAgreeThreshold, func(v view) any { return v.s.AgreeThreshold }, true, "", "agree_threshold"},
		{"ready-timeout", server.DefaultReadyTimeout, func(v view) any { return v.o.ReadyTimeout }, true, "", "ready_timeout"},
		{"request-timeout", bench.DefaultRequestTimeout, func(v view) any { return v.o.RequestTimeout }, true, "", ""},
	} {
		for name, v := range views {
			if name == "direct" && !c.direct {
				continue
			}
			if got := c.get(v); got != c.want {
				t.Errorf("%s: %s runs with and records %v, want the default %v", c.flag, name, got, c.want)
			}
		}
		m := regexp.MustCompile(`(?m)^\s+--` + c.flag + ` .*\(default: (?:the recipe's \[bench\] value, else )?([^)]*)\)$`).FindStringSubmatch(help.String())
		if m == nil || m[1] != fmt.Sprint(c.want) {
			t.Errorf("--%s: --help shows %q as the default, want %v\n%s", c.flag, m, c.want, help.String())
		}
		// The docs give a default as "key = V", "# ... else V" or
		// "# ... unset: V".
		doc := fmt.Sprint(c.want)
		if d, ok := c.want.(time.Duration); ok {
			doc = fmt.Sprintf("%q", strings.TrimSuffix(d.String(), "0s"))
		}
		if c.nkey != "" {
			ndoc := doc
			if c.nkey == "concurrency" {
				ndoc = "[" + doc + "]"
			}
			if v, comment := keyLine(nightlyDoc, c.nkey); v != ndoc && !strings.Contains(comment, "else "+ndoc) && !strings.Contains(comment, "unset: "+strings.Trim(ndoc, `"`)) {
				t.Errorf("docs/nightly.md [bench] %s = %s # %s: does not show the default %s", c.nkey, v, comment, ndoc)
			}
		}
		if c.key != "" {
			if v, _ := keyLine(readmeRecipe, c.key); v != doc {
				t.Errorf("README.md recipe [bench] %s = %q, not the default %s", c.key, v, doc)
			}
		}
	}
}

// section returns the lines of file from the one starting with start to
// the next blank line.
func section(t *testing.T, file, start string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+start)
	if !ok {
		t.Fatalf("%s has no line %q", file, start)
	}
	block, _, _ := strings.Cut(rest, "\n\n")
	return strings.Split(block, "\n")
}

// keyLine returns the value and the comment of the line of a TOML block
// that sets key ("" when none does).
func keyLine(lines []string, key string) (value, comment string) {
	for _, l := range lines {
		if v, ok := strings.CutPrefix(l, key+" = "); ok {
			v, comment, _ = strings.Cut(v, "#")
			return strings.TrimSpace(v), strings.TrimSpace(comment)
		}
	}
	return "", ""
}

// TestAllreduceDefaults: the --help of bench allreduce and tune allreduce
// shows the counts and timeout allreduce.Execute passes to bench.py when
// they are left zero (Inner, Reps, Timeout) or that a flag's default
// gives (Warmup: zero in Options is none).
func TestAllreduceDefaults(t *testing.T) {
	for _, cmd := range [][]string{{"bench", "allreduce"}, {"tune", "allreduce"}} {
		var help bytes.Buffer
		if code := run(context.Background(), append(append([]string{"arpatch"}, cmd...), "--help"), &help, &help); code != 0 {
			t.Fatalf("arpatch %v --help: exit %d\n%s", cmd, code, help.String())
		}
		for flag, want := range map[string]any{"warmup": allreduce.DefaultWarmup, "inner": allreduce.DefaultInner, "reps": allreduce.DefaultReps, "timeout": allreduce.DefaultTimeout} {
			m := regexp.MustCompile(`(?m)^\s+--` + flag + ` .*\(default: ([^)]*)\)$`).FindStringSubmatch(help.String())
			if m == nil || m[1] != fmt.Sprint(want) {
				t.Errorf("arpatch %v --%s: --help shows %q as the default, want %v", cmd, flag, m, want)
			}
		}
	}
}
