package bench

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/arpatch/arpatch/harness/server"
	"github.com/arpatch/arpatch/harness/workload"
	"github.com/arpatch/arpatch/internal/bounds"
	"github.com/arpatch/arpatch/recipes"
)

// Overrides are the settings a caller puts over a recipe's [bench]: the
// flags of `arpatch bench`, or nightly.toml's [bench]. A nil pointer or
// slice leaves the recipe's value.
type Overrides struct {
	Model, DraftModel, SpecAlgorithm, Baseline *string
	TP, SpecSteps, SpecTopK, SpecDraftTokens   *int
	NumPrompts, MaxNewTokens, Trials, Warmup   *int
	AgreeTokens                                *int     // leading tokens the output check compares (nil: Resolved's default)
	Concurrency                                []int    // levels, requests in flight
	Prompts                                    []string // the workload before NumPrompts (default: the recipe's workload)
	PromptsFrom                                string   // where Prompts came from (the --prompts file as given), for Options.Workload
	Arms                                       []Arm    // replace the recipe's arms (nil: the recipe's, or one "baseline")
	Interleave, IgnoreEOS                      bool
	ReadyTimeout, RequestTimeout               time.Duration // 0: Resolved's defaults (server.DefaultReadyTimeout, DefaultRequestTimeout)
	AgreeThreshold                             float64       // share of outputs that must agree, in [0, 1]; 0 turns the check off
	LogDir                                     string
	Env                                        []string
}

// specAlgorithmSetting names where the speculative algorithm is set, for
// refusals: the flag or the recipe key.
const specAlgorithmSetting = "--speculative-algorithm (recipe: bench.speculative_algorithm)"

// FromRecipe turns a recipe's [bench] and the overrides into Options: the
// one place where a recipe becomes a run, for bench and nightly alike. The
// arms are the recipe's [[bench.arm]] (one "baseline" when it has none)
// unless ov.Arms replaces them. The Options it returns are Resolved: what
// is left unset holds its default. It returns an error naming the setting for
// a count out of its range (package bounds) and for a workload file that
// cannot be read; the Options it returns then hold what was resolved
// before the error (nightly keys its history by them).
func FromRecipe(rb recipes.Bench, ov Overrides) (Options, error) {
	o := ov.over(rb)
	n := or(ov.NumPrompts, rb.NumPrompts)
	if err := o.checkCounts(n, ov.AgreeTokens != nil); err != nil {
		return o, err
	}
	prompts, name, err := ov.workload(rb)
	if err != nil {
		return o, err
	}
	o.Prompts, o.Workload = workload.Take(prompts, n), workload.Identity(name, prompts)
	o.Arms = ov.arms(rb)
	o = o.Resolved()
	if err := recipes.CheckSpecAlgorithm(o.SpecAlgorithm); err != nil {
		return o, fmt.Errorf("%s: %v", specAlgorithmSetting, err)
	}
	if strings.EqualFold(o.SpecAlgorithm, "EAGLE") && strings.Contains(strings.ToLower(o.DraftModel), "eagle3") {
		return o, fmt.Errorf("%s EAGLE with the EAGLE-3 draft %s gives accept length 1.00; use EAGLE3", specAlgorithmSetting, o.DraftModel)
	}
	return o, nil
}

// or is *p when the override p is set, else the recipe's v.
func or[T any](p *T, v T) T {
	if p != nil {
		return *p
	}
	return v
}

// over is the recipe's settings with each override set over them, and
// the concurrency levels ([1] when neither gives any); the workload and
// the arms are FromRecipe's next steps.
func (ov Overrides) over(rb recipes.Bench) Options {
	o := Options{
		Model: or(ov.Model, rb.Model), DraftModel: or(ov.DraftModel, rb.DraftModel),
		SpecAlgorithm: or(ov.SpecAlgorithm, rb.SpeculativeAlgorithm), Baseline: or(ov.Baseline, rb.BaselineArm),
		TP: or(ov.TP, rb.TP), SpecSteps: or(ov.SpecSteps, rb.SpeculativeNumSteps), SpecTopK: or(ov.SpecTopK, rb.SpeculativeEagleTopK),
		SpecDraftTokens: or(ov.SpecDraftTokens, rb.SpeculativeNumDraftTokens), MaxNewTokens: or(ov.MaxNewTokens, rb.MaxNewTokens),
		Trials: or(ov.Trials, rb.Trials), Warmup: or(ov.Warmup, rb.Warmup), Concurrency: []int(rb.Concurrency),
		AgreeTokens: or(ov.AgreeTokens, 0),
		Interleave:  ov.Interleave, IgnoreEOS: ov.IgnoreEOS, ReadyTimeout: ov.ReadyTimeout, RequestTimeout: ov.RequestTimeout,
		AgreeThreshold: ov.AgreeThreshold, AgreeOff: ov.AgreeThreshold == 0, LogDir: ov.LogDir, Env: ov.Env,
	}
	if ov.Concurrency != nil {
		o.Concurrency = ov.Concurrency
	}
	if len(o.Concurrency) == 0 {
		o.Concurrency = []int{1}
	}
	return o
}

// checkCounts refuses, naming the setting, concurrency levels, an
// agreement threshold and counts out of their ranges (package bounds),
// numPrompts among them; no TP (0) is none, and agree_tokens is checked
// only when set (agreeTokensSet), since Resolved fills it.
func (o Options) checkCounts(numPrompts int, agreeTokensSet bool) error {
	if err := recipes.CheckLevels(o.Concurrency); err != nil {
		return fmt.Errorf("concurrency: %v", err)
	}
	if err := bounds.CheckFloat("agree_threshold", o.AgreeThreshold); err != nil {
		return fmt.Errorf("agree_threshold: %v", err)
	}
	for _, v := range []struct {
		key string
		n   int
	}{{"tp", o.TP}, {"speculative_num_steps", o.SpecSteps}, {"speculative_eagle_topk", o.SpecTopK}, {"speculative_num_draft_tokens", o.SpecDraftTokens},
		{"num_prompts", numPrompts}, {"max_new_tokens", o.MaxNewTokens}, {"trials", o.Trials}, {"warmup", o.Warmup}, {"agree_tokens", o.AgreeTokens}} {
		if v.key == "tp" && v.n == 0 {
			continue // no TP: the launch leaves --tp-size out
		}
		if v.key == "agree_tokens" && !agreeTokensSet {
			continue // unset: Resolved fills it
		}
		if err := bounds.Check(v.key, int64(v.n)); err != nil {
			return fmt.Errorf("%s: %v", v.key, err)
		}
	}
	return nil
}

// workload returns the prompts before NumPrompts and where they came
// from: the overrides' (--prompts), else the recipe's bench.workload,
// else the built-in workload.
func (ov Overrides) workload(rb recipes.Bench) ([]string, string, error) {
	if ov.Prompts != nil {
		return ov.Prompts, ov.PromptsFrom, nil
	}
	if w := rb.Workload; w != "" && w != recipes.BuiltinWorkload {
		prompts, err := workload.Load(w)
		if err != nil {
			return nil, "", fmt.Errorf("bench.workload: %w", err)
		}
		return prompts, w, nil
	}
	return workload.Builtin(), recipes.BuiltinWorkload, nil
}

// arms are the overrides' arms, else the recipe's [[bench.arm]], else one
// "baseline".
func (ov Overrides) arms(rb recipes.Bench) []Arm {
	if ov.Arms != nil {
		return ov.Arms
	}
	var arms []Arm
	for _, ra := range rb.Arms {
		arms = append(arms, Arm{Name: ra.Name, Python: ra.Python, Env: ra.Env, Args: ra.Args})
	}
	if len(arms) == 0 {
		arms = []Arm{{Name: "baseline"}}
	}
	return arms
}

func (o *Options) fill() error {
	if len(o.Arms) == 0 {
		return errors.New("no arms to run")
	}
	seen := map[string]bool{}
	for _, a := range o.Arms {
		if seen[a.Name] {
			return fmt.Errorf("arm %q is defined twice", a.Name)
		}
		seen[a.Name] = true
	}
	if err := o.CheckArms(); err != nil {
		return err
	}
	if o.Baseline == "" {
		o.Baseline = o.Arms[0].Name
	}
	if !seen[o.Baseline] {
		return fmt.Errorf("baseline arm %q is not among the arms (%s)", o.Baseline, armNames(o.Arms))
	}
	// Run the baseline first in every trial.
	sort.SliceStable(o.Arms, func(i, j int) bool { return o.Arms[i].Name == o.Baseline && o.Arms[j].Name != o.Baseline })
	*o = o.Resolved()
	if err := o.checkBounds(); err != nil {
		return err
	}
	if o.Host == "" {
		o.Host = server.DefaultHost
	}
	if len(o.Prompts) == 0 {
		return errors.New("no prompts")
	}
	if o.RequestTimeout < 0 || o.ReadyTimeout < 0 {
		return errors.New("bench: a negative timeout")
	}
	if err := o.Arrivals.Check(); err != nil {
		return err
	}
	if o.LogDir == "" {
		o.LogDir = os.TempDir()
	}
	if o.Env == nil {
		o.Env = os.Environ()
	}
	for _, a := range o.Arms {
		if a.URL == "" && a.LaunchCmd == "" && o.Model == "" {
			return fmt.Errorf("arm %s needs a server: pass --model (and --draft-model) to launch SGLang, --launch-cmd, or --url", a.Name)
		}
		if a.URL == "" && a.LaunchCmd == "" && strings.EqualFold(o.SpecAlgorithm, "EAGLE3") && o.DraftModel == "" {
			return fmt.Errorf("arm %s: --speculative-algorithm EAGLE3 needs --draft-model", a.Name)
		}
	}
	if !launching(*o) {
		return nil // LogDir holds launched servers' logs: none here
	}
	return os.MkdirAll(o.LogDir, 0o755)
}

// checkBounds refuses a count out of its range (package bounds), and a
// concurrency level given twice, before anything is allocated or started.
func (o *Options) checkBounds() error {
	for _, v := range []struct {
		key string
		n   int
	}{{"trials", o.Trials}, {"warmup", o.Warmup}, {"max_new_tokens", o.MaxNewTokens}, {"num_prompts", len(o.Prompts)}} {
		if err := bounds.Check(v.key, int64(v.n)); err != nil {
			return fmt.Errorf("bench %s %v", v.key, err)
		}
	}
	if err := recipes.CheckLevels(o.Concurrency); err != nil {
		return fmt.Errorf("bench concurrency %v", err)
	}
	// A NaN threshold would pass every "share < threshold" test: the
	// output check off, and a garbage arm faster.
	if err := bounds.CheckFloat("agree_threshold", o.AgreeThreshold); err != nil {
		return fmt.Errorf("bench agree_threshold %v", err)
	}
	return nil
}

func armNames(as []Arm) string {
	var n []string
	for _, a := range as {
		n = append(n, a.Name)
	}
	return strings.Join(n, ", ")
}

// CheckArms refuses arms that cannot give a comparison: two attached to
// one server (it would be compared with itself), and a launch template
// without {port} (its server would not listen where arpatch waits).
func (o Options) CheckArms() error {
	for i, a := range o.Arms {
		for _, b := range o.Arms[i+1:] {
			if SameServer(a.URL, b.URL) {
				return fmt.Errorf("arms %s and %s attach to one server (%s): the A/B would compare it with itself; give each arm its own", a.Name, b.Name, a.URL)
			}
		}
		if a.URL == "" && a.LaunchCmd != "" && !strings.Contains(a.LaunchCmd, "{port}") {
			return fmt.Errorf("arm %s: the launch command has no {port}; its server must listen on the port arpatch gives it (e.g. --port {port})", a.Name)
		}
	}
	return nil
}
