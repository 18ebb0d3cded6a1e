package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/report"
	"github.com/arpatch/arpatch/nightly"
	"github.com/arpatch/arpatch/recipes"
)

// TestBenchOptionsAgreeWithNightly: `arpatch bench --recipe-file R` and a
// nightly whose recipe B is R turn it into the same run (bench.FromRecipe
// is the one place for both): the same report.Settings, and the same
// resolved bench.Options but for the fields listed in callerOnly. R sets
// every [bench] key to a value that is not its default, its workload
// included, so that a side that drops or overrides one fails here.
func TestBenchOptionsAgreeWithNightly(t *testing.T) {
	dir := t.TempDir()
	prompts := filepath.Join(dir, "prompts.jsonl")
	if err := os.WriteFile(prompts, []byte("{\"prompt\": \"one\"}\n{\"prompt\": \"two\"}\n{\"text\": \"three\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	recipe := filepath.Join(dir, "pcie.toml")
	if err := os.WriteFile(recipe, []byte(`name = "pcie"
series = "pcie"
[upstream]
commit = "84118acf50b3a4c74e85e9ff9033792552de1a76"
[env]
SGLANG_FORCE_CUSTOM_AR_PCIE = "1"
[bench]
model = "/m"
draft_model = "/d-eagle3"
tp = 4
speculative_algorithm = "EAGLE3"
speculative_num_steps = 5
speculative_eagle_topk = 2
speculative_num_draft_tokens = 6
workload = "`+prompts+`"
num_prompts = 5
max_new_tokens = 48
concurrency = [2, 8]
warmup = 1
trials = 3
baseline_arm = "baseline"
[[bench.arm]]
name = "baseline"
[[bench.arm]]
name = "pcie"
env = { SGLANG_FORCE_CUSTOM_AR_PCIE = "1" }
`), 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "nightly.toml")
	if err := os.WriteFile(p, []byte("[arms]\na = \"baseline\"\nb_file = \"pcie.toml\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := nightly.LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	base, err := recipes.Embedded("baseline")
	if err != nil {
		t.Fatal(err)
	}
	b, err := recipes.File(recipe)
	if err != nil {
		t.Fatal(err)
	}
	fromNightly, err := nightly.BenchOptions(cfg, nightly.Options{}, base, b)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := cmdOptsOf(t, newCmdBench, "arpatch bench --recipe-file "+recipe)
	if err != nil {
		t.Fatal(err)
	}
	fromCLI := cli.Bench
	if n, c := report.SettingsOf(fromNightly), report.SettingsOf(fromCLI); !reflect.DeepEqual(n, c) {
		t.Errorf("report settings differ:\nnightly: %+v\nbench:   %+v", n, c)
	}
	// callerOnly are the fields each caller sets for itself, not from the
	// recipe: where servers log, the launch, the HTTP client, the
	// preflight and progress hooks. Every other field must agree.
	callerOnly := func(o bench.Options) bench.Options {
		o.LogDir, o.Env, o.Self, o.HTTP, o.Preflight, o.Progress, o.Force = "", nil, "", nil, nil, nil, false
		for i := range o.Arms {
			o.Arms[i].Python, o.Arms[i].LaunchCmd, o.Arms[i].URL = "", "", ""
		}
		return o
	}
	n, c := callerOnly(fromNightly), callerOnly(fromCLI)
	if !reflect.DeepEqual(n, c) {
		t.Errorf("options differ:\nnightly: %+v\nbench:   %+v", n, c)
	}
	want := []string{"one", "two", "three", "one", "two"}
	if !reflect.DeepEqual(n.Prompts, want) || !strings.HasPrefix(n.Workload, prompts+"@sha256:") || !reflect.DeepEqual(n.Concurrency, []int{2, 8}) ||
		n.TP != 4 || n.SpecSteps != 5 || n.SpecTopK != 2 || n.SpecDraftTokens != 6 || n.MaxNewTokens != 48 || n.Warmup != 1 || n.Trials != 3 ||
		len(n.Arms) != 2 || n.Arms[1].Env["SGLANG_FORCE_CUSTOM_AR_PCIE"] != "1" {
		t.Errorf("options: %+v", n)
	}
}
