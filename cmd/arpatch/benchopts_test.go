package main

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/nightly"
	"github.com/arpatch/arpatch/recipes"
)

// TestBenchOptionsAgreeWithNightly: `arpatch bench` with flags and a
// nightly with the same [bench] values turn the pcie recipe into the same
// run (bench.FromRecipe is the one place for both), levels included.
func TestBenchOptionsAgreeWithNightly(t *testing.T) {
	pcie, err := recipes.Embedded("pcie")
	if err != nil {
		t.Fatal(err)
	}
	base, err := recipes.Embedded("baseline")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "nightly.toml")
	if err := os.WriteFile(p, []byte("[bench]\nmodel = \"/m\"\ndraft_model = \"/d-eagle3\"\ntrials = 3\nnum_prompts = 6\nmax_new_tokens = 64\nconcurrency = [1, 4, 16]\nwarmup = 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := nightly.LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	fromNightly, err := nightly.BenchOptions(cfg, nightly.Options{}, base, pcie)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := optsOf(t, benchOpts, "arpatch bench --model /m --draft-model /d-eagle3 --trials 3 --num-prompts 6 --max-new-tokens 64 --concurrency 1,4,16 --warmup 0")
	if err != nil {
		t.Fatal(err)
	}
	fromCLI := cli.Bench
	type shape struct {
		Model, DraftModel, SpecAlgorithm                       string
		TP, SpecSteps, SpecTopK, SpecDraftTokens, MaxNewTokens int
		Trials, Warmup                                         int
		Concurrency                                            []int
		Prompts                                                []string
		ArmEnvs                                                []map[string]string
	}
	of := func(o bench.Options) shape {
		s := shape{o.Model, o.DraftModel, o.SpecAlgorithm, o.TP, o.SpecSteps, o.SpecTopK, o.SpecDraftTokens, o.MaxNewTokens, o.Trials, o.Warmup, o.Concurrency, o.Prompts, nil}
		for _, a := range o.Arms {
			s.ArmEnvs = append(s.ArmEnvs, a.Env)
		}
		return s
	}
	n, c := of(fromNightly), of(fromCLI)
	if !reflect.DeepEqual(n, c) {
		t.Errorf("nightly:\n%+v\nbench:\n%+v", n, c)
	}
	if len(n.Prompts) != 6 || !reflect.DeepEqual(n.Concurrency, []int{1, 4, 16}) || n.Warmup != 0 || n.TP != 8 || n.ArmEnvs[1]["SGLANG_FORCE_CUSTOM_AR_PCIE"] != "1" {
		t.Errorf("options: %+v", n)
	}
}
